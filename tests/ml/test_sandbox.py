"""The check of an uploaded model runs in a child process, inside bubblewrap: over its
memory or time limit it is refused with the reason, the caller lives on, and nothing
is left in its work folder; a killed caller takes its child (and the sandbox) with it.
What the sandbox keeps from the child: tests/ml/test_sandbox_attacks.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import ml
from ml.sandbox import ARTIFACT, MIB, CheckLimitExceeded, ChildLimits, check_in_child
from ml.submissions import SubmissionRejected
from tests.sandboxing import requires_bwrap

pytestmark = requires_bwrap

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def archive(tmp_path_factory, sentiment_model_b) -> Path:
    """A good submission: the tiny sentiment model's HF files, zipped."""
    path = tmp_path_factory.mktemp("upload") / "upload.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            zf.write(sentiment_model_b.path / name, name)
    return path


def children_of(work: Path) -> list[int]:
    """Live check processes of the work folder ``work``: bubblewrap, the processes in
    its sandbox and the check itself all write their output to the file the parent
    opened there (whatever path the sandbox shows them)."""
    output = os.path.realpath(work / "check-output.log")
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                target = os.readlink(entry / "fd" / "1")
                state = next((line for line in (entry / "status").read_text().splitlines()
                              if line.startswith("State:")), "")
            except OSError:
                continue
            if target.startswith(output) and "zombie" not in state:
                found.append(int(entry.name))
    return found


def test_a_good_model_is_checked_in_a_child_and_only_its_artifact_is_left(tmp_path, archive, sentiment_spec):
    lines = []
    info = check_in_child(archive, tmp_path / "work", sentiment_spec, progress=lines.append)
    assert info.path == tmp_path / "work" / ARTIFACT
    assert ml.verify_artifact(info.path, info.sha256).metadata["training_data"]["source"] == "submission"
    assert [p.name for p in (tmp_path / "work").iterdir()] == [ARTIFACT]
    assert lines[0] == "the archive's 4 files are allowed" and lines[-1] == "saved as an artifact"
    assert "config.json: a bert model within the task's limits" in lines


def test_a_refusal_inside_the_child_comes_back_with_its_reason(tmp_path, archive, sentiment_spec, nli_spec):
    with pytest.raises(SubmissionRejected) as info:
        check_in_child(archive, tmp_path / "work", nli_spec)
    assert info.value.reason.startswith("config.json: id2label is ")
    assert not isinstance(info.value, CheckLimitExceeded)
    assert list((tmp_path / "work").iterdir()) == []


def test_over_the_time_limit_the_child_is_killed_and_nothing_is_left(tmp_path, archive, sentiment_spec):
    work = tmp_path / "work"
    started = time.monotonic()
    with pytest.raises(CheckLimitExceeded) as info:
        check_in_child(archive, work, sentiment_spec, child=ChildLimits(seconds=1.5))
    assert time.monotonic() - started < 10
    assert info.value.reason.startswith("checking the model took longer than the time limit of 1.5 s and was stopped")
    assert list(work.iterdir()) == []  # the unpacking folder included
    assert children_of(work) == []


def test_over_the_memory_limit_the_check_is_refused_and_the_caller_lives_on(tmp_path, archive, sentiment_spec):
    """300 MB of address space is less than torch needs to start: whatever fails first
    (an import, an allocation, or the child itself), the answer is the memory limit."""
    with pytest.raises(CheckLimitExceeded) as info:
        check_in_child(archive, tmp_path / "work", sentiment_spec, child=ChildLimits(memory_bytes=300 * MIB))
    assert info.value.reason.startswith("checking the model needed more than the memory limit of 300 MB")
    assert list((tmp_path / "work").iterdir()) == []


def test_a_cancelled_check_stops_its_child(tmp_path, archive, sentiment_spec):
    class Cancelled(Exception):
        pass

    def waiting():
        raise Cancelled

    with pytest.raises(Cancelled):
        check_in_child(archive, tmp_path / "work", sentiment_spec, waiting=waiting, poll_seconds=0.2)
    assert list((tmp_path / "work").iterdir()) == []
    assert children_of(tmp_path / "work") == []


def test_a_killed_parent_takes_its_child_along(tmp_path, archive, sentiment_spec):
    """A worker killed mid-check (out of memory, SIGKILL): the child dies with it, and
    the work folder it could not tidy is left for the next check to remove."""
    work = tmp_path / "work"
    script = (
        "import sys\n"
        "import ml\n"
        "from ml.sandbox import check_in_child\n"
        "spec = ml.TaskSpec.from_dict(__import__('json').loads(sys.argv[3]))\n"
        "check_in_child(sys.argv[1], sys.argv[2], spec)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(archive), str(work),
                               json.dumps(sentiment_spec.to_dict())],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(work.glob(f".{ARTIFACT}.upload-*")):  # the child is unpacking
            assert parent.poll() is None and time.monotonic() < deadline, "the check never started"
            time.sleep(0.01)
        children = children_of(work)
        assert children, "no child process"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        while children_of(work) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children_of(work) == []  # PR_SET_PDEATHSIG
    finally:
        if parent.poll() is None:
            parent.kill()
    assert any(work.iterdir())  # a killed parent cannot tidy: leaderboard.submissions removes it later
