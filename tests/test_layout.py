"""The repository's shape: product files stay short enough to read, or say why not."""

from pathlib import Path

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
