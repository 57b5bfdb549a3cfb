# Long on purpose: one security boundary, the child that checks an upload and its confinement (limits,
# bubblewrap), read top to bottom.
"""Checking an uploaded model in a child process that cannot take its parent down,
and, inside bubblewrap, cannot reach anything of the server's either.

:func:`check_in_child` runs :func:`ml.submissions.unpack_submission` (unpacking,
loading, the first forward passes, saving) in a fresh Python interpreter,
``python -m ml.sandbox``, and never in the calling process:

- **isolation** (:class:`Sandbox`, the default): the child runs inside bubblewrap
  (``bwrap``, Debian's package ``bubblewrap``, 0.8 or newer), a tool made to confine a
  process with Linux namespaces.  The child sees a file system of its own that is
  read-only except for its work folder: the system's programs and libraries
  (``/usr`` and its links), the Python installation and virtual environment it runs
  in, the ``ml`` package's code, the uploaded archive (read-only) and the work folder
  (the only place it can write).  Nothing else exists there: no ``var/`` (database,
  keys, models, job files), no data sets, no home folders, no ``/etc`` beyond the
  dynamic linker's files, no ``/tmp``, no sockets of local services.  It has a network
  namespace of its own with nothing but a loopback device on which nothing listens:
  no address, local or public, can be reached (nor an abstract Unix socket).  Its own process
  namespace (its ``/proc`` shows only itself: not its parent's environment), its own
  IPC and host name, no capabilities, no nested user namespaces; it dies with its
  parent.  The folders named in :attr:`Sandbox.private` are checked to be outside
  everything the child is shown.  Where bubblewrap is missing, or cannot create the
  sandbox here, the check refuses to run (:class:`SandboxUnavailable`) rather than
  run unconfined; :func:`sandbox_problem` says why beforehand;
- **memory**: the child limits its own address space (``RLIMIT_AS``) before it
  imports anything heavy.  A model whose loading needs more fails inside the child
  (``MemoryError``, a refused allocation, or the child dies); the parent reports
  it as a refusal with the limit, and lives on;
- **time**: the parent kills the child's process group once ``seconds`` of wall
  time have passed; the child's CPU time is bounded as well (``RLIMIT_CPU``);
- **the rest**: no core dumps; no GPU (``CUDA_VISIBLE_DEVICES`` is empty: the check
  runs on CPU, and CUDA's address-space reservations do not fit under a memory
  limit); a fixed number of torch threads and at most two glibc malloc arenas, so
  the address space a check needs does not grow with the machine's cores; an
  environment of allowlisted variables only (no database URL, secret key or cloud
  credential reaches the child); the child dies with its parent
  (``PR_SET_PDEATHSIG`` on Linux, and bubblewrap's ``--die-with-parent``), so a worker
  killed mid-check leaves no orphan.

A fresh interpreter rather than a fork: a process that has run torch and forks
gets a child that hangs on its first forward pass, and a daemonic worker process
(Celery's prefork pool) may not start ``multiprocessing`` children.  The child's
answer comes back as JSON in a file (never a pickle); the parent reads what the
child left only as regular files (never through a link, never a FIFO) and refuses
a saved model that holds a link or a special file.

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
import stat
import subprocess
import sys
import sysconfig
import tempfile
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
#: Its home and cache folders are its own temporary folder.
_INHERITED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "VIRTUAL_ENV", "SYSTEMROOT")
#: The most of a control file (the result, a progress read, the output's tail) the parent reads.
_CONTROL_BYTES = 64 * 1024
#: The system's programs and libraries, shown read-only: folders are bound, links (a
#: merged /usr) recreated as they are.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The only files of /etc shown: the dynamic linker's and the links it may follow.
_SYSTEM_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
#: Where the child finds its work folder and the archive inside the sandbox.
SANDBOX_WORK = Path("/sandbox/work")
SANDBOX_ARCHIVE = Path("/sandbox/upload.zip")
#: bubblewrap reports a signal that ended the sandboxed process as 128 + the signal.
_SIGNALLED = 128
_OUT_OF_MEMORY_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory", "failed to map segment",
                        "bad_alloc", "failed to allocate", "memoryerror")


class CheckLimitExceeded(SubmissionRejected):
    """The check needed more memory or time than its child process is given."""


class SandboxError(MLError):
    """The check could not be run or gave no answer that can be read: a problem on
    our side (the child could not start, or crashed for no reason the limits explain)."""


class SandboxUnavailable(SandboxError):
    """The check refuses to run: its sandbox (bubblewrap) is not installed, cannot
    create its namespaces on this machine, or would show the child a private folder.
    ``reason`` says which, for the operator; nothing was run."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Sandbox:
    """The child's isolation by bubblewrap (see the module's docstring)."""

    #: The bubblewrap program: a name looked up on ``PATH`` (``bwrap``) or a path.
    program: str = "bwrap"
    #: Folders the child must never see (``var/``, the data sets, the models folder):
    #: the check refuses to run if anything it would show the child, read-only or
    #: not, holds one of them.  The work folder and the archive may lie inside them.
    private: tuple[str, ...] = ()


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
    sandbox: Sandbox | None = Sandbox(),  # noqa: B008  (frozen, immutable)
    progress: Callable[[str], None] | None = None,
    waiting: Callable[[], None] | None = None,
    poll_seconds: float = 0.5,
) -> ArtifactInfo:
    """Check the upload at ``zip_path`` for ``spec`` in a child process; returns the
    verified :class:`ArtifactInfo` of ``work_dir/artifact``.

    The child runs inside ``sandbox`` (bubblewrap); ``sandbox=None`` runs it
    unconfined, with the web user's rights and network: for a development machine
    without bubblewrap only, never for uploads from people you do not trust.

    Raises :class:`SubmissionRejected` with the reason (the model is refused, or it
    needed more than ``child`` allows: :class:`CheckLimitExceeded`),
    :class:`SandboxUnavailable` (nothing was run) or :class:`SandboxError`.
    ``progress`` gets the child's line at the end of each stage; ``waiting`` is called
    every ``poll_seconds`` while the child runs (a job's heartbeat): whatever it raises
    stops the check, and the child is killed.
    """
    work = Path(work_dir).absolute()
    archive = Path(zip_path).absolute()
    program = _locate(sandbox.program) if sandbox is not None else None
    work.mkdir(parents=True, exist_ok=True)
    dest = work / ARTIFACT
    if dest.exists():
        raise ArtifactError(f"artifact directory {dest} already exists")
    # Where the child finds them: in the sandbox, at paths of its own that say nothing of the server's.
    seen_work, seen_archive = (work, archive) if program is None else (SANDBOX_WORK, SANDBOX_ARCHIVE)
    request = {
        "archive": str(seen_archive),
        "dest": str(seen_work / ARTIFACT),
        "spec": spec.to_dict(),
        "limits": asdict(limits),
        "bounds": asdict(bounds),
        "memory_bytes": int(child.memory_bytes),
        "cpu_seconds": math.ceil(child.seconds * max(child.threads, 1)) + 10,
        # Inside the sandbox the child's parent is bubblewrap, which dies with this process.
        "parent_pid": os.getpid() if program is None else None,
    }
    command = _child_command(seen_work / _REQUEST)
    accepted = False
    try:
        with open(work / _OUTPUT, "wb") as output, tempfile.TemporaryFile() as status:
            if program is not None:  # before anything is written for the child: a refusal runs nothing
                command = _sandbox_argv(program, sandbox, work, archive, command, status.fileno())
            (work / _REQUEST).write_text(json.dumps(request), encoding="utf-8")
            (work / _TEMPORARY).mkdir(exist_ok=True)
            process = subprocess.Popen(
                command, cwd=work, env=_child_environment(child, seen_work), stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                pass_fds=(status.fileno(),) if program is not None else (),
            )
            try:
                _wait(process, child, work / _PROGRESS, progress, waiting, poll_seconds)
            finally:
                _kill(process, _sandboxed_pid(status) if program is not None else None)
            returncode = process.returncode
            if program is not None:
                if _sandboxed_pid(status) is None:  # bubblewrap gave up before it started the child
                    raise SandboxUnavailable(f"bubblewrap could not set up the sandbox: {_bwrap_message(work)}")
                if _SIGNALLED < returncode <= _SIGNALLED + 64:
                    returncode = _SIGNALLED - returncode
        result = _outcome(returncode, work, child)
        _check_plain_tree(dest)
        info = verify_artifact(dest, result["sha256"])
        accepted = True
        return info
    finally:
        _tidy(work, keep_artifact=accepted)


def _child_command(request: Path) -> list[str]:
    """The child: this Python, running this module on the request file."""
    return [sys.executable, "-P", "-X", "faulthandler", "-m", "ml.sandbox", str(request)]


# --- the sandbox -------------------------------------------------------------------------


def _locate(program: str) -> str:
    """The bubblewrap executable ``program`` names (a name on ``PATH`` or a path), or
    :class:`SandboxUnavailable` saying how to install it."""
    found = shutil.which(program) if program else None
    if found is None:
        raise SandboxUnavailable(
            f"the sandbox program {program!r} (bubblewrap) is not installed or not executable, so submitted models "
            "are not checked: install it (Debian or Ubuntu: apt-get install bubblewrap) or name its path")
    return os.path.abspath(found)


def sandbox_problem(sandbox: Sandbox = Sandbox()) -> str | None:  # noqa: B008  (frozen, immutable)
    """Why a check could not run inside ``sandbox`` on this machine, or None when it
    can: bubblewrap is found and starts this Python inside the same confinement a
    check gets (a few milliseconds)."""
    try:
        program = _locate(sandbox.program)
        with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryFile() as status:
            argv = _sandbox_argv(program, sandbox, Path(scratch), None, [sys.executable, "-I", "-S", "-c", ""],
                                 status.fileno())
            result = subprocess.run(argv, env={}, cwd=scratch,
                                    stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                                    pass_fds=(status.fileno(),))
            started = _sandboxed_pid(status) is not None
    except SandboxUnavailable as exc:
        return exc.reason
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not be run: {exc}"
    if not started or result.returncode != 0:
        text = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
        return f"bubblewrap could not set up the sandbox: {text[:300] or f'status {result.returncode}'}"
    return None


def _sandbox_argv(program: str, sandbox: Sandbox, work: Path, archive: Path | None, command: list[str],
                  status_fd: int) -> list[str]:
    """bubblewrap's command line that runs ``command`` confined, ``work`` its only
    writable folder (at :data:`SANDBOX_WORK`) and ``archive`` (read-only, at
    :data:`SANDBOX_ARCHIVE`) the one file of the caller's it sees."""
    links, shown = _read_only_views()
    files = [(os.path.realpath(archive), str(SANDBOX_ARCHIVE))] if archive is not None else []
    writable = [(os.path.realpath(work), str(SANDBOX_WORK))]
    for source, target in [*shown, *files, *writable]:
        _refuse_private(source, target, sandbox.private)
    argv = [program, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--hostname", "sandbox", "--json-status-fd", str(status_fd)]
    for link, target in links:
        argv += ["--symlink", target, link]
    for source, target in shown:
        argv += ["--ro-bind", source, target]
    for name in _SYSTEM_ETC:
        argv += ["--ro-bind-try", name, name]
    for source, target in files:
        argv += ["--ro-bind", source, target]
    for source, target in writable:
        argv += ["--bind", source, target]
    return [*argv, "--dev", "/dev", "--proc", "/proc", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir",
            str(SANDBOX_WORK), "--",
            *command]


def _read_only_views() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What the child is shown read-only: the system's links (``/bin -> usr/bin``) and
    its folders, the Python installation and virtual environment this process runs
    in (each at the path this process knows it by), and the ``ml`` package's folder.
    Returns ``(links, binds)``, binds as ``(source, target)`` in mounting order."""
    links: list[tuple[str, str]] = []
    binds: list[tuple[str, str]] = []
    for name in _SYSTEM:
        if os.path.islink(name):
            links.append((name, os.readlink(name)))
        elif os.path.isdir(name):
            binds.append((os.path.realpath(name), name))
    paths = sysconfig.get_paths()
    wanted = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable),
              *(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths),
              str(Path(__file__).resolve().parent)]  # ml/: the child imports nothing else of the project
    for path in wanted:
        path = os.path.abspath(path)
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            continue
        for link, target in links:  # /lib64/x is /usr/lib64/x in the child as here
            if Path(path).is_relative_to(link):
                path = os.path.normpath(os.path.join(os.path.dirname(link), target, os.path.relpath(path, link)))
        if any(Path(path).is_relative_to(target) and Path(real).is_relative_to(source) for source, target in binds):
            continue  # shown already, and it is the same folder there
        inside = any(Path(path).is_relative_to(target) for _, target in binds)
        binds.append((real, real if inside else path))
    binds.sort(key=lambda bind: len(Path(bind[1]).parts))  # a folder before what is bound inside it
    return links, binds


def _refuse_private(source: str, target: str, private: tuple[str, ...]) -> None:
    for folder in private:
        for secret in {os.path.abspath(folder), os.path.realpath(folder)}:
            if Path(secret).is_relative_to(source) or Path(secret).is_relative_to(target):
                raise SandboxUnavailable(
                    f"the sandbox would show the check {target}, which holds the private folder {folder}; move "
                    "the Python installation, the code or that folder so they do not overlap")


def _sandboxed_pid(status) -> int | None:
    """The sandboxed process's id from bubblewrap's status file, or None if it never started one."""
    try:
        status.seek(0)
        text = status.read(_CONTROL_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    decoder, position = json.JSONDecoder(), 0
    while (start := text.find("{", position)) >= 0:
        try:
            value, position = decoder.raw_decode(text, start)
        except ValueError:
            return None
        if isinstance(value, dict) and isinstance(value.get("child-pid"), int):
            return value["child-pid"]
    return None


def _bwrap_message(work: Path) -> str:
    """bubblewrap's own complaint (the child never ran, so the output is all bubblewrap's)."""
    text = (_read_regular(work / _OUTPUT) or b"").decode("utf-8", "replace").strip()
    return " ".join(text.split())[:300] or "it gave no reason"


# --- the parent's side -------------------------------------------------------------------


def _child_environment(child: ChildLimits, work: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    root = str(Path(__file__).resolve().parent.parent)  # the folder that holds ml/
    threads = str(max(int(child.threads), 1))
    temporary = str(work / _TEMPORARY)
    env.update(
        PYTHONPATH=root, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", TMPDIR=temporary, HOME=temporary,
        XDG_CACHE_HOME=temporary, HF_HOME=temporary,
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
        data = _read_regular(self.path, self.offset)
        if not data:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").strip()[:300]
            if text:
                self.progress(text)


def _kill(process: subprocess.Popen, sandboxed: int | None) -> None:
    """End the child and anything it started (its own process group), if still running;
    with a sandbox, wait until the processes inside it (``sandboxed``: the first of
    them, which bubblewrap's death takes down with the rest) are gone too."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while sandboxed is not None and _alive(sandboxed) and time.monotonic() < deadline:
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X")  # a zombie has stopped; its reaper is not us


def _read_regular(path: Path, offset: int = 0) -> bytes | None:
    """At most :data:`_CONTROL_BYTES` of ``path`` from ``offset`` if it is a regular
    file; None otherwise.  The child could have put a link (to a file of the server's)
    or a FIFO (an ``open`` that never returns) in its place: neither is followed."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        return os.pread(descriptor, _CONTROL_BYTES, offset)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _check_plain_tree(folder: Path) -> None:
    """Refuse a saved model that holds anything but folders and regular files: the
    check never saves a link, so one there points at a file of the server's."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            raise SubmissionRejected("the check left something other than a folder where the model is saved; refused")
        for root, folders, files in os.walk(folder):
            for name in [*folders, *files]:
                mode = os.lstat(os.path.join(root, name)).st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    raise SubmissionRejected(
                        f"the saved model holds {name!r}, which is a link or a special file, not a regular file; "
                        "refused")
    except OSError as exc:
        raise SubmissionRejected(f"the saved model cannot be read back ({exc.strerror}); refused") from exc


def _outcome(returncode: int, work: Path, child: ChildLimits) -> dict:
    """The child's answer: the accepted artifact's digest, or the refusal raised."""
    memory = (f"checking the model needed more than the memory limit of {child.memory_bytes // MIB:,} MB "
              "(loading it and running it once); a smaller model, or one saved in a smaller dtype, may fit")
    try:
        result = json.loads((_read_regular(work / _RESULT) or b"").decode("utf-8"))
    except ValueError:
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
        size = os.lstat(work / _OUTPUT).st_size
    except OSError:
        size = 0
    tail = (_read_regular(work / _OUTPUT, max(size - 4000, 0)) or b"").decode("utf-8", "replace")
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


def _die_with_parent(parent_pid: int | None) -> None:
    """Linux: the kernel kills this process when its parent dies (``parent_pid``, if
    given, is the parent it must still have: one that died first is not waited for)."""
    if not sys.platform.startswith("linux"):
        return

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != int(parent_pid):  # the parent died before the line above
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
    _die_with_parent(request["parent_pid"])
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
