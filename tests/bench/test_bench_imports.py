"""pyproject.toml's import-linter contract for bench/: its library may import no script,
and a script's bare name (how the scripts import each other, bench/ being on sys.path)
is forbidden for every script but those whose name is a project package's (the package
comes first on sys.path: ``annotation``, ``leaderboard``)."""

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
