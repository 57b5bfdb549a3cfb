"""The repository's shape: product files stay short enough to read, or say why not; a package that
lists its modules lists every one."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["annotation", "core", "crowd", "datafiles", "dynabench", "leaderboard", "ml", "tasks"]
LIMIT = 450


def test_no_product_file_is_long_without_a_reason_at_its_top():
    unexplained = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            if len(lines) > LIMIT and not (lines and lines[0].startswith("# Long on purpose: ")):
                unexplained.append(f"{path.relative_to(ROOT)} ({len(lines)} lines)")
    assert not unexplained, (f"over {LIMIT} lines without a '# Long on purpose: <why>.' first line: "
                             + ", ".join(unexplained))


@pytest.mark.parametrize(("package", "prefix"), [("core", "core."), ("annotation", "")])
def test_a_package_that_lists_its_modules_lists_every_one(package, prefix):
    """core's and annotation's docstrings say what each of their modules is
    for: a module added without its line fails here by name."""
    import ast

    folder = ROOT / package
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = sorted(path.stem for path in folder.glob("*.py") if path.stem != "__init__")
    assert [name for name in modules if f"``{prefix}{name}``" not in docstring] == []
