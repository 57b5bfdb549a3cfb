"""The repository's shape: product files stay short enough to read, or say why not; a package that
lists its modules lists every one."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["annotation", "core", "crowd", "datafiles", "dynabench", "jobs", "leaderboard", "ml", "registry", "replay",
           "tasks"]
LIMIT = 450


def product_files():
    """Every product source file with the comment that opens a reason: Python modules
    (migrations aside) and the pages' scripts."""
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, "# Long on purpose: "
    for path in sorted((ROOT / "static" / "js").rglob("*.js")):
        yield path, "// Long on purpose: "


def unexplained(files) -> list[str]:
    found = []
    for path, opening in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LIMIT and not (lines and lines[0].startswith(opening)):
            found.append(f"{path.name} ({len(lines)} lines, no '{opening}<why>.' first line)")
    return found


def test_no_product_file_is_long_without_a_reason_at_its_top():
    found = unexplained(product_files())
    assert not found, f"over {LIMIT} lines without a reason at the top: " + ", ".join(found)


def test_the_length_rule_reads_the_scripts_with_their_own_comment(tmp_path):
    """The pages' scripts are held to the rule, with JavaScript's comment: a long script
    passes only with ``// Long on purpose:`` as its first line."""
    assert (ROOT / "static" / "js" / "dynabench.js", "// Long on purpose: ") in list(product_files())
    body = "var x = 1;\n" * (LIMIT + 1)
    bare, reasoned, pythonic = tmp_path / "bare.js", tmp_path / "reasoned.js", tmp_path / "pythonic.js"
    bare.write_text(body)
    reasoned.write_text("// Long on purpose: a test.\n" + body)
    pythonic.write_text("# Long on purpose: a test.\n" + body)
    opening = "// Long on purpose: "
    assert [name.split(" ")[0] for name in unexplained([(bare, opening), (reasoned, opening), (pythonic, opening)])] \
        == ["bare.js", "pythonic.js"]


@pytest.mark.parametrize(("package", "prefix"), [("core", "core."), ("annotation", "")])
def test_a_package_that_lists_its_modules_lists_every_one(package, prefix):
    """core's and annotation's docstrings say what each of their modules is
    for: a module added without its line fails here by name."""
    import ast

    folder = ROOT / package
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = sorted(path.stem for path in folder.glob("*.py") if path.stem != "__init__")
    assert [name for name in modules if f"``{prefix}{name}``" not in docstring] == []
