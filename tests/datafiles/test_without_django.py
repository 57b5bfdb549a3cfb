"""``datafiles`` works in a plain Python process: the benchmarks and scripts read and
fetch the public data sets with no Django settings and no database."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# Read a row of each kind, then fetch a data set from a mirror folder (no network): the
# file is checked against a pin made here, installed, and recorded as installed.
SCRIPT = """
import json, sys
from pathlib import Path
from datafiles import fetching
from datafiles.readers import Record, RowError, read_records

items = list(read_records("nli-jsonl", Path(sys.argv[1])))
mirror, dest, sha = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
download = fetching.Download("https://example.org/data/labeled_data.csv", sha, 0)
fetching.CATALOGUE["tiny"] = fetching.DataSet(
    "tiny", "a tiny data set", "MIT", (download,), fetching._copy_to("tiny/rows.csv"), ("tiny/rows.csv",))
outcome = fetching.fetch(["tiny"], dest, source=str(mirror), say=lambda line: None)
print(json.dumps({
    "kinds": [type(item).__name__ for item in items],
    "label": items[0].label,
    "outcome": outcome,
    "installed": fetching.is_installed(fetching.CATALOGUE["tiny"], dest),
    "django": sorted(name for name in sys.modules if name == "django" or name.startswith("django.")),
}))
"""


def test_reading_and_fetching_need_no_django(tmp_path):
    rows = tmp_path / "nli.jsonl"
    rows.write_text(json.dumps({"premise": "A dog runs.", "hypothesis": "An animal moves.",
                                "label": "entailment"}) + "\n" + json.dumps({"premise": "A cat."}) + "\n")
    upstream = b"count,class,tweet\n3,2,hello\n"
    mirrored = tmp_path / "mirror" / "example.org" / "data" / "labeled_data.csv"
    mirrored.parent.mkdir(parents=True)
    mirrored.write_bytes(upstream)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(rows), str(tmp_path / "mirror"), str(tmp_path / "data"),
         hashlib.sha256(upstream).hexdigest()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found == {"kinds": ["Record", "RowError"], "label": "entailment", "outcome": {"tiny": "fetched"},
                     "installed": True, "django": []}
    assert (tmp_path / "data" / "tiny" / "rows.csv").read_bytes() == upstream
