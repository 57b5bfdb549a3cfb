"""bench/'s scripts where they are listed. pyproject.toml's import-linter contract: the
library may import no script, and a script's bare name (how the scripts import each
other, bench/ being on sys.path) is forbidden for every script but those whose name is a
project package's (the package comes first on sys.path: ``annotation``, ``leaderboard``).
The Makefile: ``make bench-latency`` runs one, and its comment names the command of each."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "The benchmarks' library imports no benchmark script"


def test_the_contract_forbids_every_scripts_bare_name():
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    [contract] = [c for c in linter["contracts"] if c["name"] == CONTRACT]
    assert contract["source_modules"] == ["bench.benchlib"]
    assert "bench" in linter["root_packages"] and "bench.*" in contract["forbidden_modules"]
    scripts = {path.stem for path in (ROOT / "bench").glob("*.py")}
    assert scripts, "no scripts found in bench/"
    bare = set(contract["forbidden_modules"]) - {"bench.*"}
    missing = scripts - set(linter["root_packages"]) - bare
    assert not missing, f"add the bench scripts {sorted(missing)} to the contract {CONTRACT!r}"
    assert bare <= scripts, f"the contract names no script any more: {sorted(bare - scripts)}"


def test_the_makefile_runs_latency_and_names_every_benchmarks_command():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "bench-latency: install\n\t$(PY) bench/latency.py\n" in makefile
    assert "\nbench:" not in makefile  # a target named for what it runs
    unnamed = sorted(path.name for path in (ROOT / "bench").glob("*.py")
                     if f"#   $(PY) bench/{path.name}" not in makefile)
    assert not unnamed, f"the Makefile's comment above bench-latency names no command for {unnamed}"
