"""The manual is true to the repository: every file, link, ``manage.py`` command and
``make`` target that README.md, docs/ and bench/RESULTS.md name exists."""

import re
from pathlib import Path

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]
TOP = ("annotation/", "core/", "crowd/", "datafiles/", "dynabench/", "leaderboard/", "ml/", "replay/", "tasks/",
       "tests/", "bench/", "docs/", "templates/", "static/", ".ci/")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
MANAGE = re.compile(r"manage\.py\s+([a-z_]+)")
MAKE = re.compile(r"(?:^|[\s`(])make\s+([a-z][a-z-]*)", re.M)
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
# Where a document names a path that is made at run time, or stands for many.
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.|^var/|^tests/.*::|/<")


def documents():
    return [path for path in DOCUMENTS if path.exists()]


def named_paths(text: str) -> set[str]:
    found = set()
    for token in CODE.findall(text):
        token = token.split(":", 1)[0].split(" ", 1)[0].strip().rstrip(",.;")
        if token.startswith(TOP) and not PLACEHOLDER.search(token):
            found.add(token)
    return found


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.M))


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_path_a_document_names_exists(document):
    text = document.read_text(encoding="utf-8")
    missing = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = (document.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(f"link {target}")
    for name in named_paths(text):
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{document.relative_to(ROOT)} names what the repository does not have: {sorted(missing)}"


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_a_document_names_exists(document):
    text = document.read_text(encoding="utf-8")
    commands = set(get_commands())
    unknown = sorted({f"manage.py {name}" for name in MANAGE.findall(text) if name not in commands})
    targets = make_targets()
    code = "\n".join(CODE.findall(text) + FENCE.findall(text))  # "make" as a command, not the English word
    unknown += sorted({f"make {name}" for name in MAKE.findall(code) if name not in targets})
    assert not unknown, f"{document.relative_to(ROOT)} names commands that do not exist: {unknown}"


def test_the_readme_is_a_manual_and_the_manual_is_complete():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    assert readme.splitlines()[10:12] == ["make run    # set up everything and serve on http://127.0.0.1:8000",
                                          "make test   # set up everything and run the test suite"]
    for name in ("architecture", "operations", "crowd", "leaderboards", "replay", "annotation", "data"):
        assert f"docs/{name}.md" in readme, name
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
    # Nothing cites a file outside the repository.
    for document in documents():
        assert "../shared" not in document.read_text(encoding="utf-8"), document


PRODUCT = ("dynabench", "core", "jobs", "registry", "tasks", "annotation", "leaderboard", "crowd", "ml", "datafiles")
ENV_READ = re.compile(r'(?:\benv(?:\.\w+)?|_at_least|environ\.get|getenv|_from_env)\(\s*"([A-Z][A-Z0-9_]+)"'
                      r'|environ\["([A-Z][A-Z0-9_]+)"\](?!\s*=[^=])')


def test_every_setting_read_from_the_environment_is_in_the_operations_table():
    """docs/operations.md's settings table names every variable the product reads from
    the environment (dynabench/settings.py's env(...), env.int(...), _at_least(...),
    and os.environ reads anywhere in the apps and ml), and every row names a variable
    the product code mentions: a setting added without its row, or a row left after
    its setting went, fails here by name."""
    read, mentioned = set(), set()
    for path in (p for top in PRODUCT for p in (ROOT / top).rglob("*.py") if "migrations" not in p.parts):
        text = path.read_text()
        read |= {a or b for a, b in ENV_READ.findall(text)}
        mentioned |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', text))
    operations = (ROOT / "docs" / "operations.md").read_text()
    table = operations.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented = {name for line in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split(" | ")[0])}
    assert len(read) > 80  # the patterns still find the settings module's reads
    assert sorted(read - documented) == [], "read from the environment without a row in docs/operations.md"
    assert sorted(documented - mentioned) == [], "rows in docs/operations.md for variables no code mentions"
