"""What a run reports: progress lines on stderr, JSON written atomically, tables,
and the facts a result records (command line, library versions)."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path, PurePath

from . import ROOT

NAME = Path(sys.argv[0]).stem or "bench"  # the running script: bench/<name>.py


def log(message: str) -> None:
    """A progress line on stderr: ``[<script> HH:MM:SS] message``."""
    print(f"[{NAME} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Progress:
    """``ml.train``'s progress callback: a log line at most every 10% or 60 s (and
    at the end, and for each dev evaluation)."""

    def __init__(self, what: str):
        self.what, self.last_percent, self.last_time = what, -100.0, 0.0

    def __call__(self, percent: float, message: str) -> None:
        now = time.perf_counter()
        if (
            percent - self.last_percent >= 10
            or now - self.last_time >= 60
            or percent >= 100
            or "dev" in message
        ):
            self.last_percent, self.last_time = percent, now
            log(f"{self.what}: train {percent:5.1f}% {message}")


# --- files -----------------------------------------------------------------------------


def display_path(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def write_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_json(path: Path | str, document: dict) -> str:
    """Write ``document`` as indented JSON, its paths made ``portable``; the path as it
    should be printed."""
    write_atomic(path, json.dumps(portable(document), indent=2) + "\n")
    return display_path(path)


# Where a result file is read, this machine's folders mean nothing: a committed result
# names a file in the repository by its path from the repository's root, and the other
# folders a run touches by what they are.
def _folders() -> list[tuple[str, str]]:
    """``(absolute folder, what to write instead)``, the longest first, so that the
    repository wins over a home folder it lies in. The repository's root becomes ""
    (its files relative to it), the data folder ``$DYNABENCH_DATA_DIR``, the temporary
    folder ``<tmp>``, the home folder ``~``."""
    named = [(ROOT, ""), (Path(tempfile.gettempdir()), "<tmp>"), (Path.home(), "~")]
    if os.environ.get("DYNABENCH_DATA_DIR"):
        named.append((Path(os.environ["DYNABENCH_DATA_DIR"]), "$DYNABENCH_DATA_DIR"))
    folders = {}
    for folder, name in named:
        for spelled in (str(folder), str(folder.resolve())):
            if folder.is_absolute() and spelled != "/":
                folders.setdefault(spelled.rstrip("/"), name)
    return sorted(folders.items(), key=lambda item: len(item[0]), reverse=True)


# Any other path under one of these says which machine a run was on, not what it ran:
# only its last part is kept (``/usr/lib/postgresql/16/bin/postgres`` -> ``postgres``).
# /dev, /proc, /sys and /var (``--worker-tmp-dir /dev/shm``) mean the same on every machine.
# The checkout's own top folder is one too (a CI runner's ``/check`` or ``/builds``), so a
# sibling checkout's path is never kept whole.
SHARED_FOLDERS = ("dev", "proc", "sys", "var")
MACHINE_FOLDERS = tuple(dict.fromkeys(
    ("work", "tmp", "home", "root", "Users", "private", "usr", "opt", "srv", "mnt", "media")
    + tuple(top for top in ROOT.resolve().parts[1:2] if top not in SHARED_FOLDERS)
))
_OTHER_PATH = re.compile(r"(?<![\w.~$<>-])/(?:" + "|".join(MACHINE_FOLDERS) + r")(?![\w.-])[^\s'\",;)]*")


def portable_text(text: str) -> str:
    """``text`` with each absolute path in it (a whole string, or one inside a command
    line or a URL) rewritten by ``_folders``: ``/srv/dynabench/.venv/bin/gunicorn --bind
    ...`` becomes ``.venv/bin/gunicorn --bind ...``, ``sqlite:////srv/dynabench/var/db``
    ``sqlite:///var/db``, ``/tmp/run/out.json`` ``<tmp>/run/out.json``, the root alone
    ``.``; what remains under a ``MACHINE_FOLDERS`` folder, its last part."""
    for folder, name in _folders():
        # the folder itself, not the start of a longer name; a "/" after it goes with it
        pattern = re.compile(r"(?<![\w.~$<>-])" + re.escape(folder) + r"(?:/|(?![\w.-]))")
        text = pattern.sub(lambda m, name=name: (name + "/" if name else "") if m[0].endswith("/")
                           else (name or "."), text)
    return _OTHER_PATH.sub(lambda m: m[0].rstrip("/").rsplit("/", 1)[-1], text)


def portable(value):
    """``value`` (a result's JSON, or a part of it) with every string ``portable_text``
    and every ``Path`` a string too; everything else as it is."""
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, str):
        return portable_text(value)
    if isinstance(value, dict):
        return {portable(key): portable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [portable(item) for item in value]
    return value


# --- what a result records -------------------------------------------------------------


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def command_line(argv: list[str] | None = None) -> str:
    """How this run was started, e.g. ``.venv/bin/python bench/load.py --duration 5``
    (``argv``: the options, when main() was called with its own)."""
    options = sys.argv[1:] if argv is None else argv
    return shlex.join([os.path.relpath(sys.executable, ROOT), display_path(sys.argv[0]), *options])


def library_versions(*names: str) -> dict:
    """Python's version and each named distribution's (None where it is not installed)."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


# --- tables ----------------------------------------------------------------------------

Column = tuple[str, str]  # (title, format spec with alignment and width, e.g. ">9.1f")


def _title_spec(spec: str) -> str:
    """The alignment and width of a cell's format spec: what its title is formatted with."""
    return re.match(r"[<>^]?\d*", spec).group(0)


def fixed_header(columns: list[Column], sep: str = " ") -> str:
    return sep.join(format(title, _title_spec(spec)) for title, spec in columns)


def fixed_row(columns: list[Column], cells: list, sep: str = " ") -> str:
    return sep.join(format(cell, spec) for (_, spec), cell in zip(columns, cells, strict=True))


def fixed_table(columns: list[Column], rows: list[list], sep: str = " ") -> str:
    """A fixed-width table: a header of the titles, then one line a row, each cell
    formatted with its column's spec (``"<24"``, ``">9.2f"``, ``">8.0%"``...)."""
    return "\n".join([fixed_header(columns, sep), *(fixed_row(columns, row, sep) for row in rows)])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; a ``|`` inside a cell becomes ``/``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def plain_table(header: list[str], rows: list[list[str]], rule: int = 100) -> str:
    """Cells joined by ``  |  ``, a rule of dashes under the header."""
    return "\n".join(["  |  ".join(header), "-" * rule, *("  |  ".join(row) for row in rows)])
