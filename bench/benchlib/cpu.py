"""Where the CPU time of a loaded phase goes: by group of processes, per example.

On a machine whose cores are all busy, throughput is CPU per example. ``CpuMeter``
reads the CPU time (user + system, all threads) that each group of processes used
between ``start()`` and ``stop()`` from ``/proc``, and the machine's own busy time
from ``/proc/stat``; what no group accounts for is reported as ``other`` (a
process the run did not start). Linux only: where
``/proc`` is missing every figure is None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def available() -> bool:
    return (PROC / "stat").exists()


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """User + system CPU seconds process ``pid`` (all its threads) has used, with
    ``reaped_children`` also that of its children that exited and were waited for;
    0 once it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    # Fields after "(comm)": state is the first; utime, stime, cutime and cstime are
    # the 12th to the 15th.
    fields = [int(v) for v in text[text.rindex(")") + 2 :].split()[11:15]]
    return sum(fields if reaped_children else fields[:2]) / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    """The live processes below ``pid`` (children of any of its threads, recursively)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for children in (PROC / str(parent) / "task").glob("*/children"):
            try:
                kids = [int(p) for p in children.read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and the processes below it, those that exited (and were
    waited for) included: a live process's own time, plus what each one's reaped
    children used (which no longer shows under them)."""
    return sum(cpu_seconds(p, reaped_children=True) for p in [pid, *descendants(pid)])


def named_cpu_seconds(names: tuple[str, ...]) -> float:
    """CPU seconds of every process whose command name (``/proc/<pid>/comm``) is one of
    ``names`` (the database and broker servers this run uses but did not start)."""
    total = 0.0
    for comm in PROC.glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in names:
                total += cpu_seconds(int(comm.parent.name))
        except (OSError, ValueError):
            continue
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: everything but idle
    and iowait)."""
    fields = [int(v) for v in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already inside user time
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class CpuMeter:
    """``CpuMeter({"web": lambda: tree_cpu_seconds(pid), ...})``; ``start()``, the load,
    then ``stop(examples)``."""

    def __init__(self, groups: dict[str, Callable[[], float]]):
        self.groups = groups
        self.before: dict[str, float] = {}
        self.started = 0.0
        self.machine_before = 0.0

    def start(self) -> None:
        if not available():
            return
        self.before = {name: read() for name, read in self.groups.items()}
        self.machine_before = machine_busy_seconds()
        self.started = time.perf_counter()

    def stop(self, examples: int) -> dict:
        """CPU seconds by group, and per example in ms; the share of all cores busy."""
        if not self.before:
            return {"cpu_s": None, "ms_per_example": None, "busy_share": None}
        wall = time.perf_counter() - self.started
        machine = machine_busy_seconds() - self.machine_before
        used = {name: max(0.0, read() - self.before[name]) for name, read in self.groups.items()}
        used["other"] = max(0.0, machine - sum(used.values()))
        per = {name: round(s * 1000 / examples, 2) if examples else None for name, s in used.items()}
        per["total"] = round(machine * 1000 / examples, 2) if examples else None
        return {
            "wall_s": round(wall, 2),
            "cores": cores(),
            "cpu_s": {name: round(s, 2) for name, s in used.items()},
            "ms_per_example": per,
            # /proc/stat counts clock ticks and is read a moment apart from the wall clock:
            # on a machine busy on every core the ratio can come out a tick above 1.
            "busy_share": round(min(1.0, machine / (cores() * wall)), 3) if wall > 0 else None,
        }
