"""Progress of a long management command: a bar on a terminal, a few plain lines elsewhere.

``Progress`` draws a tqdm bar when the command's stderr (or else its stdout) is a
terminal. Anywhere else (a pipe, a log file, CI, ``call_command`` with a StringIO) it
writes plain lines to the command's stdout instead, without carriage returns, at most
one per ``every`` percent and per ``min_seconds``, and always the last one, e.g.
``importing mnli.jsonl: 5000/20000 rows (25%)``. ``--no-progress`` (``add_argument``)
or ``-v 0`` silences it; the command's own lines go through ``write`` so that a bar
never breaks them. One bar at a time: ``show`` with a new label ends the last one.

Lower layers take a plain callback ``advance(label, done, total)`` (``show`` is one)
and count with ``counter`` or ``counted``; they need not know where it is shown. No
Django here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

Advance = Callable[[str, float, float | None], None]
T = TypeVar("T")
UNKNOWN_TOTAL_SECONDS = 10.0  # plain lines without a total: one every this many seconds


class _Bar(tqdm):
    monitor_interval = 0  # no monitor thread: the bar is only redrawn when it moves


def add_argument(parser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="Show no progress bar or progress lines (-v 0 does the same).")


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _raw(stream):
    """The file under a Django ``OutputWrapper`` (which would add line endings and styles to the bar)."""
    return getattr(stream, "_out", stream)


class Progress:
    """``out``: where the command writes (its stdout); ``err``: its stderr. ``terminal``:
    None to look (a bar if ``err`` or else ``out`` is a terminal), True for a bar
    (on ``err`` if given, else ``out``), False for plain lines."""

    def __init__(self, out, err=None, *, enabled: bool = True, terminal: bool | None = None,
                 every: float = 10, min_seconds: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.out, self.enabled, self.every, self.min_seconds, self.clock = out, enabled, every, min_seconds, clock
        if terminal is None:
            bar_on = err if err is not None and _isatty(err) else out if _isatty(out) else None
        else:
            bar_on = (err if err is not None else out) if terminal else None
        self.bar_file = _raw(bar_on) if bar_on is not None and enabled else None
        self._bar: tqdm | None = None
        self.label: str | None = None
        self.total: float | None = None
        self.unit, self.done = "", 0.0

    @classmethod
    def for_command(cls, command, options: dict[str, Any]) -> Progress:
        """For a ``BaseCommand`` that called ``add_argument``: off with --no-progress or -v 0."""
        enabled = not options.get("no_progress") and int(options.get("verbosity", 1)) > 0
        return cls(command.stdout, command.stderr, enabled=enabled)

    @property
    def on_terminal(self) -> bool:
        return self.bar_file is not None

    # --- one bar ---------------------------------------------------------------------

    def start(self, label: str, total: float | None = None, unit: str = "") -> None:
        """A new bar at 0 (the last one ends)."""
        self.finish()
        if not self.enabled:
            return
        self.label, self.total, self.unit, self.done = label, total, unit, 0
        if self.bar_file is not None:
            shape = ({"bar_format": "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"}
                     if unit == "%" else {"unit": f" {unit}" if unit else "it"})
            self._bar = _Bar(total=total, desc=label, file=self.bar_file, leave=True, dynamic_ncols=True,
                             mininterval=0.2, **shape)
        else:
            self._step, self._said, self._since = 0, None, self.clock()

    def show(self, label: str, done: float, total: float | None = None, unit: str = "") -> None:
        """``done`` of ``total`` (an ``Advance``): a new bar if the label or total changed."""
        if not self.enabled:
            return
        if label != self.label or total != self.total or unit != self.unit:
            self.start(label, total, unit)
        self._move(done)

    def advance(self, n: float = 1) -> None:
        if self.label is not None:
            self._move(self.done + n)

    def iterate(self, items: Iterable[T], label: str, total: float | None = None, unit: str = "") -> Iterator[T]:
        """``items``, counted as they are read."""
        self.start(label, total, unit)
        for item in items:
            self.advance()
            yield item

    def finish(self) -> None:
        """End the bar; plain: its last state, unless that was the last line."""
        if self.label is None:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        else:
            self._say()
        self.label = None

    # --- output ----------------------------------------------------------------------

    def write(self, line: str) -> None:
        """One of the command's own lines, written above the bar."""
        line = line if line.endswith("\n") else line + "\n"
        if self._bar is None:
            self.out.write(line)
            return
        with self._bar.external_write_mode(file=self.bar_file):
            self.out.write(line)
            if hasattr(self.out, "flush"):
                self.out.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is None:
            self.finish()
        elif self._bar is not None:  # the error says what happened; the bar only stops
            self._bar.close()
            self._bar, self.label = None, None
        else:
            self.label = None

    # --- inside ----------------------------------------------------------------------

    def _move(self, done: float) -> None:
        self.done = done
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            return
        now = self.clock()
        if self.total is None:
            if now - self._since >= UNKNOWN_TOTAL_SECONDS:
                self._say()
        elif done >= self.total:
            self._say()
        else:
            step = int(self._percent() // self.every)
            if step > self._step and now - self._since >= self.min_seconds:
                self._step = step
                self._say()

    def _percent(self) -> int:
        return 100 if not self.total else int(100 * self.done / self.total)

    def _text(self) -> str:
        done = _number(self.done)
        if self.unit == "%":
            return f"{self.label}: {self._percent()}%"
        unit = f" {self.unit}" if self.unit else ""
        if self.total is None:
            return f"{self.label}: {done}{unit}"
        return f"{self.label}: {done}/{_number(self.total)}{unit} ({self._percent()}%)"

    def _say(self) -> None:
        text = self._text()
        if text != self._said:
            self.out.write(text + "\n")
            self._said, self._since = text, self.clock()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def counter(label: str, total: int, advance: Advance | None) -> Callable[[], None]:
    """A function to call once per item done; each call passes ``advance(label, done,
    total)`` on (and creating it passes ``0``). Nothing to count, nothing shown."""
    done = 0
    if advance is not None and total:
        advance(label, 0, total)

    def one_more() -> None:
        nonlocal done
        done += 1
        if advance is not None and total:
            advance(label, done, total)

    return one_more


def counted(items: Iterable[T], label: str, advance: Advance | None) -> Iterator[T]:
    """``items`` for a ``for`` loop; each item counts as done when the loop asks for the
    next one, however its turn ended (``continue`` too)."""
    items = list(items)
    one_more = counter(label, len(items), advance)
    for item in items:
        yield item
        one_more()
