"""The processes a run starts, and the machine they share.

Every server, worker or helper process starts in a session of its own and is
stopped by process group (SIGTERM, then SIGKILL after 20 s), after each mode, on
an error, on Ctrl-C and on SIGTERM: ``run_modes`` is the shape of such a main.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import BENCH, ROOT
from .client import Client
from .results import log, utc_now

PYTHON = sys.executable
BIN = Path(sys.executable).parent
JSON_MARK = "BENCH_JSON "  # a helper process's answer: the last stdout line so marked


def module_command(module: str, *args: str) -> list[str]:
    """The command that runs ``benchlib/<module>.py`` as a program; its environment
    needs ``module_env``."""
    return [PYTHON, "-m", f"benchlib.{module}", *args]


def module_env(env: dict) -> dict:
    """``env`` with bench/ on PYTHONPATH, after the working directory (the repository):
    the project's apps come before bench/'s scripts of the same names."""
    paths = [str(BENCH), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


class Processes:
    """Everything this run starts, stopped by process group on exit."""

    def __init__(self):
        self.running: list[tuple[str, subprocess.Popen, object]] = []

    def start(
        self, name: str, cmd: list[str], env: dict, log_path: Path, pipe: bool = False
    ) -> subprocess.Popen:
        """Start ``cmd`` in the repository, output to ``log_path``; with ``pipe``, JSON
        lines on its stdin and stdout, only stderr to the log."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop_all()
        if pipe:
            streams = {
                "stdin": subprocess.PIPE,
                "stdout": subprocess.PIPE,
                "stderr": log_file,
                "text": True,
                "bufsize": 1,
            }
        else:
            streams = {"stdout": log_file, "stderr": subprocess.STDOUT}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, **streams)
        self.running.append((name, proc, log_file))
        log(f"started {name} (pid {proc.pid}): {shlex.join(cmd)}")
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Stop one process this run started (its whole process group)."""
        for entry in list(self.running):
            if entry[1] is proc:
                self._stop(*entry)
                self.running.remove(entry)

    def stop_all(self) -> None:
        for entry in reversed(self.running):
            self._stop(*entry)
        self.running.clear()

    @staticmethod
    def _stop(name: str, proc: subprocess.Popen, log_file) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop in 20 s; killing its process group")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        log_file.close()


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_modes(modes: list[str], run_mode: Callable[[str, Processes], dict]) -> list[dict] | None:
    """``run_mode(mode, procs)`` for each mode, everything it started stopped after it
    (also on an error, Ctrl-C or SIGTERM). The modes' results; None when interrupted."""
    procs = Processes()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    results = []
    try:
        for mode in modes:
            try:
                results.append(run_mode(mode, procs))
            finally:
                procs.stop_all()
    except KeyboardInterrupt:
        log("interrupted: servers stopped, nothing written")
        return None
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, previous)
    return results


def run_json(cmd: list[str], env: dict, timeout: float, what: str) -> dict:
    """Run ``cmd`` to the end; the JSON of its last ``BENCH_JSON`` line."""
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(JSON_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(JSON_MARK) :])


def answer_json(document: dict) -> None:
    """A helper process's answer to ``run_json``."""
    print(JSON_MARK + json.dumps(document), flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _exited(what: str, proc: subprocess.Popen, log_path: Path) -> RuntimeError:
    return RuntimeError(f"{what} exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")


def wait_http(port: int, proc: subprocess.Popen, log_path: Path, timeout: float = 90.0) -> float:
    """Until ``GET /healthz`` answers 200; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise _exited("the server", proc, log_path)
        try:
            client = Client(port, {}, timeout=5)
            status, _, _ = client.request("GET", "/healthz")
            client.close()
            if status == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(
        f"the server did not answer /healthz in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


def wait_worker(
    proc: subprocess.Popen, log_path: Path, children: int, timeout: float = 120.0
) -> float:
    """Until the worker logs 'ready' and each prefork child has warmed its model cache
    (``worker_process_init``; other pools load the model on first use: the warm-up
    requests do that)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise _exited("the Celery worker", proc, log_path)
        text = log_path.read_text(errors="replace")
        if " ready." in text and (
            text.count("a target model loaded") >= children
            or "warming up target models failed" in text
        ):
            return time.monotonic() - started
        time.sleep(0.25)
    raise RuntimeError(
        f"the Celery worker was not ready in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


def busy_processes(limit: int = 6) -> list[str]:
    """The processes using at least 5% of a core, busiest first (not this one)."""
    out = subprocess.run(
        ["ps", "-eo", "pid,pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True
    )
    rows = []
    for line in out.stdout.splitlines()[1:]:
        parts = line.split(None, 3)
        if len(parts) == 4 and float(parts[1]) >= 5.0 and int(parts[0]) != os.getpid():
            rows.append(f"{parts[0]} {parts[1]}% {parts[3][:100]}")
    return rows[:limit]


def machine_load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {
        "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "busy_processes": busy_processes(),
        "at": utc_now(),
    }


def reset_postgres(url: str) -> None:
    """Drop the database that ``url`` names (its connections forced out) and create it."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres", scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def flush_redis(*urls: str) -> None:
    import redis

    for url in urls:
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
