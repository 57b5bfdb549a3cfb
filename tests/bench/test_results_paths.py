"""The committed results name no folder of the machine they ran on: a file in the
repository by its path from the root, nothing under /work, /tmp, a home folder and the
like (``benchlib.results.write_json`` writes them so; see ``portable``)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# an absolute path into a folder that differs from machine to machine, as a whole string
# or inside a command line or URL ("sqlite:////work/...", "--out /tmp/x.json")
MACHINE_PATH = re.compile(r"(?<![\w.~$<>-])/(?:work|tmp|home|root|usr|Users|private|opt|srv|mnt|media)(?![\w.-])")


def absolute_paths(node, where="$"):
    """``(key path, string)`` for each string (a key or a value) in ``node`` that holds
    such a path or the repository's root."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from absolute_paths(key, f"{where} (key)")
            yield from absolute_paths(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from absolute_paths(value, f"{where}[{index}]")
    elif isinstance(node, str) and (MACHINE_PATH.search(node) or str(ROOT) in node):
        yield where, node


def test_the_scan_finds_a_path_wherever_it_is():
    document = {"args": {"out": "/work/main/bench/results/load.json"}, "database": "sqlite:////tmp/x.sqlite3",
                "runs": [{"command": f"{ROOT}/.venv/bin/gunicorn --bind 127.0.0.1:1"}], "/home/me/x": 1,
                "fine": ["bench/results/load.json", "--worker-tmp-dir /dev/shm", "sqlite:///var/x", "<tmp>/x",
                         "/usrx", "a/work/b"]}
    assert [where for where, _ in absolute_paths(document)] == ["$.args.out", "$.database", "$.runs[0].command",
                                                                "$ (key)"]


def test_no_committed_result_holds_an_absolute_path():
    files = sorted(RESULTS.rglob("*.json"))
    assert files, f"no JSON under {RESULTS}"
    found = [f"{path.relative_to(ROOT)}: {where} = {text[:120]!r}"
             for path in files for where, text in absolute_paths(json.loads(path.read_text(encoding="utf-8")))]
    assert not found, ("absolute paths in committed results (benchlib.results.write_json writes them portable; "
                       "rewrite the file with benchlib.results.portable):\n" + "\n".join(found))
