"""From the attacker's side: code of theirs that runs inside the check of an uploaded
model finds no network, no secret and nothing of ``var/``, and cannot write outside
its work folder; the check then fails with the reason. Where bubblewrap is missing or
cannot sandbox, the check refuses to run and says why.

An upload carries no code (pickles and code files are refused), so the attacker's
code can only run through a bug in what reads the upload: transformers' or
tokenizers' loaders. The sandbox is there for that day. These tests play it: the
worker is a separate process started with the secrets in its environment, as a real
worker is, and checks a good model, but the child that checks it runs the attacker's
code where a tokenizer bug would, when it loads the tokenizer, in the same sandbox
and with the same limits as every check. What that code manages or fails to do comes
back on its progress lines.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from ml.sandbox import Sandbox, SandboxUnavailable, check_in_child, sandbox_problem
from tests.sandboxing import requires_bwrap

ROOT = Path(__file__).resolve().parents[2]
SECRET = f"not-for-uploads-{uuid.uuid4().hex}"
SECRETS = {"SECRET_KEY": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET, "PROLIFIC_TOKEN": SECRET,
           "DATABASE_URL": f"postgres://dynabench:{SECRET}@127.0.0.1:5432/dynabench"}

# The child's program: the real check, with the attacker's code (ATTACK, defining
# attack()) run where a tokenizer bug would run it. It raises the first error that code
# met, as a failed exploit would.
EXPLOITED = r'''
import json, os, runpy, sys
T = json.loads(TARGETS)
errors = []
ATTACK

import ml.backbones
transformers = ml.backbones.import_transformers()
load_tokenizer = transformers.AutoTokenizer.from_pretrained

def exploited(*args, **kwargs):
    attack()
    if errors:
        raise errors[0]
    return load_tokenizer(*args, **kwargs)

transformers.AutoTokenizer.from_pretrained = exploited
runpy.run_module("ml.sandbox", run_name="__main__")
'''

# What the attacker tries: to reach, read and write what it should not. Each outcome is
# a progress line.
PROBES = r'''
import socket
found = {}

def attempt(name, action):
    try:
        found[name] = "done: " + str(action())[:80]
    except OSError as exc:
        found[name] = f"blocked: {exc}"
        errors.append(exc)

def connect(family, address):
    def go():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(address)
        return "connected"
    return go

def write(path):
    def go():
        with open(path, "x") as fh:
            fh.write("planted")
        return path
    return go

def attack():
    attempt("the test's listener on 127.0.0.1", connect(socket.AF_INET, ("127.0.0.1", T["port"])))
    attempt("PostgreSQL on 127.0.0.1", connect(socket.AF_INET, ("127.0.0.1", 5432)))
    attempt("Redis on ::1", connect(socket.AF_INET6, ("::1", 6379)))
    attempt("a public address", connect(socket.AF_INET, ("1.1.1.1", 443)))
    attempt("a Unix socket", connect(socket.AF_UNIX, T["unix"]))
    found["interfaces"] = ",".join(sorted(name for _, name in socket.if_nameindex()))
    found["secrets in my environment"] = ",".join(sorted(set(os.environ) & set(T["names"]))) or "none"
    leaked, pids = [], [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if T["secret"].encode() in fh.read():
                    leaked.append(pid)
        except OSError:
            pass
    found["processes with the secret in their environment"] = ",".join(leaked) or "none"
    found["processes"] = str(len(pids))
    attempt("read var/secret_key", lambda: open(T["var"] + "/secret_key").read())
    attempt("read the database file", lambda: open(T["var"] + "/db.sqlite3", "rb").read())
    attempt("read another upload", lambda: open(T["other upload"], "rb").read())
    attempt("list var/", lambda: os.listdir(T["var"]))
    attempt("write into var/", write(T["var"] + "/models/planted"))
    attempt("write into the code", write(T["code"] + "/" + T["plant"]))
    attempt("write into /tmp", write("/tmp/" + T["plant"]))
    attempt("write into /dev/shm (memory)", write("/dev/shm/" + T["plant"]))
    with open("check-progress.log", "a") as progress:
        for name, what in found.items():
            progress.write(f"attacker: {name}: {what}\n")
'''

# A FIFO where the parent reads the child's progress: an open() that never returns
# would hold the worker past every time limit.
FIFO = r'''
def attack():
    os.unlink("check-progress.log")  # the check writes on to the file it opened
    os.mkfifo("check-progress.log")
'''

# Once the check has saved the model, a file of it swapped for a link to a file on the
# server (here one with the same content, so its digest matches): the parent would read
# it, and register it, through the link.
LINK = r'''
import atexit

def attack():
    def swap():
        os.rename("artifact/tokenizer.json", "kept.json")
        os.symlink(T["work on the server"] + "/kept.json", "artifact/tokenizer.json")
    atexit.register(swap)
'''

# The worker: checks the archive in the sandbox, its child running the attacker's code.
WORKER = r'''
import json, sys
import ml, ml.sandbox
from ml.sandbox import Sandbox, check_in_child
from ml.submissions import SubmissionRejected
archive, work, spec, var, program = sys.argv[1:6]
ml.sandbox._child_command = lambda request: [sys.executable, "-P", "-c", program, str(request)]
lines = []
try:
    check_in_child(archive, work, ml.TaskSpec.from_dict(json.loads(spec)), sandbox=Sandbox(private=(var,)),
                   progress=lines.append)
    outcome = {"accepted": True}
except SubmissionRejected as exc:
    outcome = {"rejected": exc.reason}
print(json.dumps({**outcome, "progress": lines}))
'''


def zipped(model: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            zf.write(model / name, name)
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory, sentiment_model_b) -> Path:
    return zipped(sentiment_model_b.path, tmp_path_factory.mktemp("upload") / "upload.zip")


def server(var: Path, archive: Path) -> tuple[Path, Path]:
    """var/ laid out as on a server: var/secret_key, the database file, another user's
    upload waiting for its check, and this one's; returns this upload and its work folder."""
    incoming = var / "models" / ".submissions" / "incoming"
    incoming.mkdir(parents=True)
    (var / "secret_key").write_text(SECRET)
    (var / "db.sqlite3").write_bytes(b"SQLite format 3\0" + SECRET.encode())
    (incoming / "other.zip").write_bytes(archive.read_bytes())
    return Path(shutil.copy(archive, incoming / "mine.zip")), var / "models" / ".submissions" / "checking" / "job-1"


def check_exploited(var: Path, upload: Path, work: Path, spec, attack: str, targets: dict, *, timeout=300) -> dict:
    """Check ``upload`` in a worker process started with the secrets in its environment,
    its child running ``attack``; the outcome (accepted, or rejected with the reason) and
    the progress lines."""
    program = EXPLOITED.replace("ATTACK", attack).replace("TARGETS", repr(json.dumps(targets)))
    result = subprocess.run(
        [sys.executable, "-c", WORKER, str(upload), str(work), json.dumps(spec.to_dict()), str(var), program],
        cwd=ROOT, env={**os.environ, **SECRETS}, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def attack(tmp_path_factory, archive, sentiment_spec):
    """One check whose child runs the attacker's probes."""
    var = tmp_path_factory.mktemp("var")
    upload, work = server(var, archive)
    plant = f".planted-{uuid.uuid4().hex}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_path = str(tmp_path_factory.mktemp("run") / "service.sock")
    unix.bind(unix_path)
    unix.listen(8)
    listener = socket.create_server(("127.0.0.1", 0), backlog=8)
    targets = {"port": listener.getsockname()[1], "unix": unix_path, "names": sorted(SECRETS), "secret": SECRET,
               "var": str(var), "other upload": str(upload.with_name("other.zip")), "code": str(ROOT / "ml"),
               "plant": plant}
    try:
        outcome = check_exploited(var, upload, work, sentiment_spec, PROBES, targets)
    finally:
        listener.close()
        unix.close()
    planted = [path for path in (var / "models" / "planted", ROOT / "ml" / plant, Path("/tmp") / plant,
                                 Path("/dev/shm") / plant) if path.exists()]
    for path in planted:
        path.unlink()
    seen = dict(line.removeprefix("attacker: ").split(": ", 1) for line in outcome["progress"]
                if line.startswith("attacker: "))
    assert seen, f"the attacker's code never ran: {outcome}"
    return {**outcome, "seen": seen, "planted": planted}


@requires_bwrap
@pytest.mark.parametrize("target", ["the test's listener on 127.0.0.1", "PostgreSQL on 127.0.0.1", "Redis on ::1",
                                    "a public address", "a Unix socket"])
def test_the_attackers_code_opens_no_connection(attack, target):
    """A listener of the test's own on loopback stands for PostgreSQL or Redis on the
    worker's machine: outside the sandbox the connection is made."""
    assert attack["seen"][target].startswith("blocked: ")


@requires_bwrap
def test_the_attackers_code_has_no_network_interface_but_its_own_loopback(attack):
    assert attack["seen"]["interfaces"] == "lo"


@requires_bwrap
def test_the_attackers_code_finds_no_secret_in_any_environment(attack):
    """Not in its own environment, nor in its parent's through /proc: it sees no
    process but its own."""
    assert attack["seen"]["secrets in my environment"] == "none"
    assert attack["seen"]["processes with the secret in their environment"] == "none"
    assert int(attack["seen"]["processes"]) <= 2  # bubblewrap's init and the check


@requires_bwrap
@pytest.mark.parametrize("target", ["read var/secret_key", "read the database file", "read another upload",
                                    "list var/"])
def test_the_attackers_code_sees_nothing_of_var(attack, target):
    assert attack["seen"][target].startswith("blocked: ")
    assert "No such file or directory" in attack["seen"][target]


@requires_bwrap
@pytest.mark.parametrize("target", ["write into var/", "write into the code", "write into /tmp",
                                    "write into /dev/shm (memory)"])
def test_the_attackers_code_writes_nothing_outside_its_work_folder(attack, target):
    assert attack["seen"][target].startswith("blocked: ")
    assert attack["planted"] == []


@requires_bwrap
def test_the_check_fails_with_the_reason(attack):
    """The first thing the attacker's code could not do is the reason the model was refused."""
    assert attack.get("rejected") == "the tokenizer could not be loaded: [Errno 111] Connection refused"


@requires_bwrap
def test_a_fifo_for_the_progress_file_does_not_hold_the_worker(tmp_path, archive, sentiment_spec):
    """The parent opens what the child left without blocking: the check ends as usual."""
    upload, work = server(tmp_path / "var", archive)
    outcome = check_exploited(tmp_path / "var", upload, work, sentiment_spec, FIFO, {}, timeout=240)
    assert outcome.get("accepted") is True, outcome


@requires_bwrap
def test_a_link_in_the_saved_model_is_refused(tmp_path, archive, sentiment_spec):
    upload, work = server(tmp_path / "var", archive)
    outcome = check_exploited(tmp_path / "var", upload, work, sentiment_spec, LINK,
                              {"work on the server": str(work)})
    assert outcome.get("rejected") == ("the saved model holds 'tokenizer.json', which is a link or a special file, "
                                       "not a regular file; refused")


# --- where the sandbox cannot run, the check refuses to -------------------------------------


def test_without_bubblewrap_the_check_refuses_to_run(tmp_path, archive, sentiment_spec):
    missing = tmp_path / "no-such" / "bwrap"
    with pytest.raises(SandboxUnavailable) as info:
        check_in_child(archive, tmp_path / "work", sentiment_spec, sandbox=Sandbox(program=str(missing)))
    assert info.value.reason == (
        f"the sandbox program {str(missing)!r} (bubblewrap) is not installed or not executable, so submitted "
        "models are not checked: install it (Debian or Ubuntu: apt-get install bubblewrap) or name its path")
    assert not (tmp_path / "work").exists()  # nothing was written, nothing run
    assert sandbox_problem(Sandbox(program=str(missing))) == info.value.reason


def test_a_sandbox_that_does_not_start_refuses_the_check(tmp_path, archive, sentiment_spec):
    """A bubblewrap that exits before it starts the child (no namespaces allowed in this
    container, an option too new for it) never reported a child: refused, not run bare."""
    with pytest.raises(SandboxUnavailable) as info:
        check_in_child(archive, tmp_path / "work", sentiment_spec, sandbox=Sandbox(program=shutil.which("false")))
    assert info.value.reason.startswith("bubblewrap could not set up the sandbox: ")
    assert list((tmp_path / "work").iterdir()) == []
    assert sandbox_problem(Sandbox(program=shutil.which("false"))).startswith(
        "bubblewrap could not set up the sandbox: ")


def test_the_check_refuses_to_show_a_private_folder(tmp_path, archive, sentiment_spec):
    """A var/ folder inside the Python installation would be in the child's view: the
    check refuses to run rather than show it."""
    private = Path(sys.prefix) / "var"
    with pytest.raises(SandboxUnavailable) as info:
        check_in_child(archive, tmp_path / "work", sentiment_spec,
                       sandbox=Sandbox(program=shutil.which("true"), private=(str(private),)))
    assert f"which holds the private folder {private}" in info.value.reason
    assert list((tmp_path / "work").iterdir()) == []


@requires_bwrap
def test_bubblewrap_here_can_sandbox_a_check():
    assert sandbox_problem() is None


def test_by_default_a_check_runs_in_bubblewrap_or_not_at_all(tmp_path, archive, sentiment_spec, monkeypatch):
    """No ``sandbox`` given: bubblewrap from PATH; where there is none, no check (never
    a check without one)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SandboxUnavailable) as info:
        check_in_child(archive, tmp_path / "work", sentiment_spec)
    assert info.value.reason.startswith("the sandbox program 'bwrap' (bubblewrap) is not installed")
    assert not (tmp_path / "work").exists()
