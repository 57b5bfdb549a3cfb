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
