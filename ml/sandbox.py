"""Checking an uploaded model in a child process that cannot take its parent down.

:func:`check_in_child` runs :func:`ml.submissions.unpack_submission` (unpacking,
loading, the first forward passes, saving) in a fresh Python interpreter,
``python -m ml.sandbox``, and never in the calling process:

- **memory**: the child limits its own address space (``RLIMIT_AS``) before it
  imports anything heavy.  A model whose loading needs more fails inside the child
  (``MemoryError``, a refused allocation, or the child dies); the parent reports
  it as a refusal with the limit, and lives on;
- **time**: the parent kills the child's process group once ``seconds`` of wall
  time have passed; the child's CPU time is bounded as well (``RLIMIT_CPU``);
- **the rest**: no core dumps; no GPU (``CUDA_VISIBLE_DEVICES`` is empty: the check
  runs on CPU, and CUDA's address-space reservations do not fit under a memory
  limit); a fixed number of torch threads and at most two glibc malloc arenas, so
  the address space a check needs does not grow with the machine's cores; a small
  environment (no database URL or secret key reaches the child); the child dies
  with its parent (``PR_SET_PDEATHSIG`` on Linux), so a worker killed mid-check
  leaves no orphan.

A fresh interpreter rather than a fork: a process that has run torch and forks
gets a child that hangs on its first forward pass, and a daemonic worker process
(Celery's prefork pool) may not start ``multiprocessing`` children.  The child's
answer comes back as JSON in a file (never a pickle).

Everything the check writes goes to ``work_dir``: the request and result files,
the child's output, the unpacking folder and the artifact being saved.  Whatever
happens, :func:`check_in_child` removes what it wrote there, except, on success,
the artifact ``work_dir/artifact``.  A parent that is itself killed cannot tidy
up: its caller removes the work folders of checks that are no longer running
(``leaderboard.submissions`` does so at the start of every check).
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .artifacts import ArtifactInfo, verify_artifact
from .errors import ArtifactError, MLError
from .spec import TaskSpec
from .submissions import ConfigBounds, SubmissionLimits, SubmissionRejected, unpack_submission

log = logging.getLogger(__name__)

MIB = 1024 * 1024
#: The artifact a successful check leaves in its work folder.
ARTIFACT = "artifact"
_REQUEST = "check-request.json"
_RESULT = "check-result.json"
_PROGRESS = "check-progress.log"
_OUTPUT = "check-output.log"
_CONTROL_FILES = (_REQUEST, _RESULT, _RESULT + ".tmp", _PROGRESS, _OUTPUT)
#: The child's TMPDIR (torch and the libraries it loads write caches there).
_TEMPORARY = f".{ARTIFACT}.tmpdir"
#: The child's exit status when it ran out of memory and could not even write that down.
_EXIT_NO_MEMORY = 3
#: Environment variables the child inherits (everything else is left behind: secrets,
#: database URLs, cloud credentials never reach the process that reads the upload).
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "VIRTUAL_ENV", "HF_HOME",
              "XDG_CACHE_HOME", "SYSTEMROOT")
_OUT_OF_MEMORY_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory", "failed to map segment",
                        "bad_alloc", "failed to allocate", "memoryerror")


class CheckLimitExceeded(SubmissionRejected):
    """The check needed more memory or time than its child process is given."""


class SandboxError(MLError):
    """The check could not be run or gave no answer that can be read: a problem on
    our side (the child could not start, or crashed for no reason the limits explain)."""


@dataclass(frozen=True)
class ChildLimits:
    """What the child process checking one upload may use."""

    #: Address space (``RLIMIT_AS``), in bytes: torch and transformers take a good
    #: part of it by themselves, and loading a model needs more than its weights'
    #: size again (the file is mapped, the tensors are allocated).
    memory_bytes: int = 6144 * MIB
    #: Wall-clock seconds, from the child's start (interpreter and imports included).
    seconds: float = 300.0
    #: Torch intra-op threads.
    threads: int = 2


def check_in_child(
    zip_path: str | os.PathLike,
    work_dir: str | os.PathLike,
    spec: TaskSpec,
    *,
    limits: SubmissionLimits = SubmissionLimits(),  # noqa: B008  (frozen, immutable)
    bounds: ConfigBounds = ConfigBounds(),  # noqa: B008  (frozen, immutable)
    child: ChildLimits = ChildLimits(),  # noqa: B008  (frozen, immutable)
    progress: Callable[[str], None] | None = None,
    waiting: Callable[[], None] | None = None,
    poll_seconds: float = 0.5,
) -> ArtifactInfo:
    """Check the upload at ``zip_path`` for ``spec`` in a child process; returns the
    verified :class:`ArtifactInfo` of ``work_dir/artifact``.

    Raises :class:`SubmissionRejected` with the reason (the model is refused, or it
    needed more than ``child`` allows: :class:`CheckLimitExceeded`), or
    :class:`SandboxError`.  ``progress`` gets the child's line at the end of each
    stage; ``waiting`` is called every ``poll_seconds`` while the child runs (a job's
    heartbeat): whatever it raises stops the check, and the child is killed.
    """
    work = Path(work_dir).absolute()
    work.mkdir(parents=True, exist_ok=True)
    dest = work / ARTIFACT
    if dest.exists():
        raise ArtifactError(f"artifact directory {dest} already exists")
    request = {
        "archive": str(Path(zip_path).absolute()),
        "dest": str(dest),
        "spec": spec.to_dict(),
        "limits": asdict(limits),
        "bounds": asdict(bounds),
        "memory_bytes": int(child.memory_bytes),
        "cpu_seconds": math.ceil(child.seconds * max(child.threads, 1)) + 10,
        "parent_pid": os.getpid(),
    }
    (work / _REQUEST).write_text(json.dumps(request), encoding="utf-8")
    (work / _TEMPORARY).mkdir(exist_ok=True)
    accepted = False
    try:
        with open(work / _OUTPUT, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-P", "-X", "faulthandler", "-m", "ml.sandbox", str(work / _REQUEST)],
                cwd=work, env=_child_environment(child, work), stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            )
            try:
                _wait(process, child, work / _PROGRESS, progress, waiting, poll_seconds)
            finally:
                _kill(process)
        result = _outcome(process.returncode, work, child)
        info = verify_artifact(dest, result["sha256"])
        accepted = True
        return info
    finally:
        _tidy(work, keep_artifact=accepted)


# --- the parent's side -------------------------------------------------------------------


def _child_environment(child: ChildLimits, work: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    root = str(Path(__file__).resolve().parent.parent)  # the folder that holds ml/
    threads = str(max(int(child.threads), 1))
    env.update(
        PYTHONPATH=root, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", TMPDIR=str(work / _TEMPORARY),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="", DYNABENCH_DEVICE="cpu", DYNABENCH_TORCH_THREADS=threads, OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MALLOC_ARENA_MAX="2",
    )
    return env


def _wait(process: subprocess.Popen, child: ChildLimits, progress_file: Path,
          progress: Callable[[str], None] | None, waiting: Callable[[], None] | None, poll_seconds: float) -> None:
    deadline = time.monotonic() + child.seconds
    relay = _ProgressRelay(progress_file, progress)
    while True:
        try:
            process.wait(timeout=max(min(poll_seconds, deadline - time.monotonic()), 0.01))
        except subprocess.TimeoutExpired:
            pass
        else:
            relay.read()
            return
        relay.read()
        if time.monotonic() >= deadline:
            raise CheckLimitExceeded(
                f"checking the model took longer than the time limit of {child.seconds:g} s and was stopped; "
                "a model that loads and runs in time is accepted (is it much larger than it needs to be?)")
        if waiting is not None:
            waiting()


class _ProgressRelay:
    """Passes on each complete line the child has added to its progress file."""

    def __init__(self, path: Path, progress: Callable[[str], None] | None):
        self.path, self.progress, self.offset, self.partial = path, progress, 0, b""

    def read(self) -> None:
        if self.progress is None:
            return
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(64 * 1024)
        except FileNotFoundError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").strip()[:300]
            if text:
                self.progress(text)


def _kill(process: subprocess.Popen) -> None:
    """End the child and anything it started (its own process group), if still running."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
    process.wait()


def _outcome(returncode: int, work: Path, child: ChildLimits) -> dict:
    """The child's answer: the accepted artifact's digest, or the refusal raised."""
    memory = (f"checking the model needed more than the memory limit of {child.memory_bytes // MIB:,} MB "
              "(loading it and running it once); a smaller model, or one saved in a smaller dtype, may fit")
    try:
        result = json.loads((work / _RESULT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        result = None
    if isinstance(result, dict):
        status = result.get("status")
        if status == "accepted" and isinstance(result.get("sha256"), str):
            return result
        if status == "rejected":
            raise SubmissionRejected(str(result.get("reason") or "the model was refused"))
        if status == "memory":
            raise CheckLimitExceeded(memory)
        if status == "error":
            _log_output(work, f"the submission check failed: {result.get('error')}")
            raise SandboxError(f"the check failed with an unexpected error: {result.get('error')}")
    if returncode == _EXIT_NO_MEMORY:
        raise CheckLimitExceeded(memory)
    if returncode == -signal.SIGXCPU:
        raise CheckLimitExceeded(f"checking the model used more than its CPU time limit "
                                 f"({child.seconds:g} s per thread) and was stopped")
    if returncode in (-signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS):
        # Killed by the kernel's out-of-memory killer, or aborted by a refused allocation
        # in native code (std::bad_alloc, a Rust allocation error).
        name = signal.Signals(-returncode).name
        _log_output(work, f"the submission check was stopped by {name}")
        raise CheckLimitExceeded(f"{memory} (the check process was stopped by {name})")
    _log_output(work, f"the submission check ended with status {returncode} and no answer")
    raise SandboxError(f"the check process ended with status {returncode} without an answer")


def _log_output(work: Path, message: str) -> None:
    try:
        with open(work / _OUTPUT, "rb") as fh:
            fh.seek(max(fh.seek(0, os.SEEK_END) - 4000, 0))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    log.warning("%s; its last output:\n%s", message, tail)


def _tidy(work: Path, *, keep_artifact: bool) -> None:
    """Remove what the check wrote in ``work``: its control files, the child's
    unpacking and saving folders, and the artifact unless it is kept."""
    for name in _CONTROL_FILES:
        (work / name).unlink(missing_ok=True)
    for path in work.glob(f".{ARTIFACT}.*"):
        shutil.rmtree(path, ignore_errors=True)
    if not keep_artifact:
        shutil.rmtree(work / ARTIFACT, ignore_errors=True)


# --- the child's side --------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Linux: the kernel kills this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)


def _limit_resources(memory_bytes: int, cpu_seconds: int) -> None:
    import resource  # noqa: PLC0415 - Unix only, in the child

    def lower(which: int, soft: int, hard: int) -> None:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))

    lower(resource.RLIMIT_CORE, 0, 0)
    lower(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
    lower(resource.RLIMIT_AS, memory_bytes, memory_bytes)


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from is a refused allocation."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, MemoryError):
            return True
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
            return True
        if any(word in str(exc).lower() for word in _OUT_OF_MEMORY_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _child_main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    _die_with_parent(int(request["parent_pid"]))
    _limit_resources(int(request["memory_bytes"]), int(request["cpu_seconds"]))
    work = Path(request_path).parent
    out_of_memory = False
    try:
        with open(work / _PROGRESS, "a", encoding="utf-8") as progress_file:
            def say(line: str) -> None:
                progress_file.write(line.replace("\n", " ") + "\n")
                progress_file.flush()

            info = unpack_submission(
                request["archive"], request["dest"], TaskSpec.from_dict(request["spec"]),
                limits=SubmissionLimits(**request["limits"]), bounds=ConfigBounds(**request["bounds"]),
                progress=say,
            )
        result = {"status": "accepted", "sha256": info.sha256}
    except SubmissionRejected as exc:
        out_of_memory = _out_of_memory(exc)
        result = {"status": "memory"} if out_of_memory else {"status": "rejected", "reason": exc.reason}
    except BaseException as exc:  # MemoryError, or a failure no check anticipated
        out_of_memory = _out_of_memory(exc)
        text = " ".join(str(exc).split())[:400]
        result = {"status": "memory"} if out_of_memory else {"status": "error",
                                                             "error": f"{type(exc).__name__}: {text}"}
    try:
        temporary = work / (_RESULT + ".tmp")
        temporary.write_text(json.dumps(result), encoding="utf-8")
        os.replace(temporary, work / _RESULT)
    except BaseException:
        os._exit(_EXIT_NO_MEMORY if out_of_memory else 1)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
