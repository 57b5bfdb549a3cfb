"""What every template we write promises a keyboard and screen-reader user, read from the
templates themselves, so that a table added later keeps it too."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = sorted(p for p in ROOT.glob("**/templates/**/*.html")
                   if not {".venv", "node_modules", "var"} & set(p.relative_to(ROOT).parts))
SCROLL_BOX = re.compile(r"<div\b[^>]*\bclass=\"[^\"]*\btable-scroll\b[^\"]*\"[^>]*>")


def test_the_templates_are_found():
    assert len(TEMPLATES) > 20


def test_every_box_that_scrolls_a_table_is_a_named_region_the_keyboard_can_reach():
    """A table that scrolls inside its own box at phone width must be reachable by Tab
    (axe: scrollable-region-focusable), and a region a screen reader lists needs a name."""
    boxes = [(path.relative_to(ROOT), tag) for path in TEMPLATES for tag in SCROLL_BOX.findall(path.read_text())]
    assert len(boxes) >= 8
    missing = [f"{path}: {tag}" for path, tag in boxes
               if not ('tabindex="0"' in tag and 'role="region"' in tag and re.search(r'aria-label="[^"]+"', tag))]
    assert missing == [], "\n".join(missing)


UNCLOSED_COMMENT = re.compile(r"\{#(?:(?!#\}).)*$", re.M)


def test_no_short_comment_runs_over_a_line():
    """Django's ``{# … #}`` ends on its own line: one that runs on is printed on the page
    as text. A comment of several lines is ``{% comment %}``."""
    found = [f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 1}"
             for path in TEMPLATES for text in [path.read_text()] for match in UNCLOSED_COMMENT.finditer(text)]
    assert found == []


def test_the_comment_rule_finds_a_comment_that_runs_over_a_line():
    assert UNCLOSED_COMMENT.search("<p>{# starts here\n   ends here #}</p>")
    assert not UNCLOSED_COMMENT.search("<p>{# one line #}</p>{% comment %}\nmany\n{% endcomment %}")
