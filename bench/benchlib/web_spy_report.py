"""``web_spy.py``'s pure part: py-spy's raw samples of the gunicorn web worker grouped by
the layers of ``web_profile_report``, and the RESULTS.md block made from its JSON.

py-spy's raw format (``--format raw``, the collapsed stacks of flamegraph.pl) is one
line per distinct stack: its frames from the outermost to the innermost, separated by
``;``, each ``function (file:line)``, then a space and the number of samples. With
``--idle`` off (py-spy's default) a thread waiting in a system call is not sampled, so
the samples are the worker's time on the CPU.

A sample is filed under the layer of its innermost frame that is not a helper (the
rules of ``web_profile_report.is_helper``: the standard library's generic modules and
Django's utilities take their callers' layer), as cProfile's own time is in the
in-process profile. Service mode runs code the in-process profile never sees; it gets
layers of its own (``SERVICE_RULES``, checked first): gunicorn's HTTP parsing and
sockets, gthread's pool of threads, the PostgreSQL driver, Celery's send, and the Redis client filed by its caller
(``REDIS_CALLERS``): the inference reply wait, the cache behind DRF's throttles, Celery.
"""

from __future__ import annotations

import re

from . import web_profile_report as inproc
from .results import markdown_table

SERVICE_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("gunicorn (HTTP parsing, sockets, the worker's loop)", ("/gunicorn/",)),
    # no model thread in a service-mode web worker: its futures are gthread's pool, a thread
    # taking the next connection (gunicorn hands each request to it)
    ("gthread's thread pool (a thread taking the next request)", ("/concurrent/futures/thread.py",)),
    ("PostgreSQL driver (psycopg)", ("/psycopg/", "/psycopg_binary/", "/psycopg_pool/")),
    ("Celery send (celery, kombu)", ("/celery/", "/kombu/", "/billiard/", "/vine/", "/amqp/")),
    ("Redis client", ("/redis/",)),
]
CELERY = SERVICE_RULES[3][0]
REDIS = SERVICE_RULES[4][0]
# Redis's client time filed by who called it (its innermost frame outside the client):
# the reply wait, the cache (DRF's throttles), or Celery's send; else "Redis client"
REDIS_CALLERS: list[tuple[str, tuple[str, ...]]] = [
    ("Redis: the inference reply wait (core/replies.py)", ("/core/replies.py",)),
    ("Redis: the cache (DRF's throttles through Django's cache)", ("/django/core/cache/", "/core/cache.py")),
    (CELERY, ("/celery/", "/kombu/")),
]
FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


# every layer only service mode has, in the order the sentence names them
SERVICE_LAYERS = list(dict.fromkeys([layer for layer, _ in SERVICE_RULES] + [layer for layer, _ in REDIS_CALLERS]))


def parse_raw(text: str) -> list[tuple[list[tuple[str, int, str]], int]]:
    """``[(frames outermost first, each (file, line, function)), samples)]``; a line that
    is not a stack with a count (blank, a comment) is skipped."""
    stacks = []
    for raw in text.splitlines():
        line = raw.strip()
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for part in stack.split(";"):
            found = FRAME.match(part)
            if found:
                frames.append((found["file"], int(found["line"] or 0), found["name"]))
            else:  # a frame without a file (py-spy's "<unknown>", a thread's name)
                frames.append(("", 0, part))
        stacks.append((frames, int(count)))
    return stacks


def frame_layer(frame: tuple[str, int, str]) -> str:
    path = frame[0].replace("\\", "/")
    for layer, needles in SERVICE_RULES:
        if any(needle in path for needle in needles):
            return layer
    return inproc.file_layer(path)


def is_helper(frame: tuple[str, int, str]) -> bool:
    if not frame[0]:
        return True
    if any(needle in frame[0] for _, needles in SERVICE_RULES for needle in needles):
        return False
    return inproc.is_helper(frame)


def stack_layer(frames: list[tuple[str, int, str]]) -> str:
    """The layer of a sample: its innermost frame that is not a helper's; Redis's client
    by its caller (``REDIS_CALLERS``)."""
    for depth in range(len(frames) - 1, -1, -1):
        if not is_helper(frames[depth]):
            layer = frame_layer(frames[depth])
            return redis_caller(frames[:depth]) if layer == REDIS else layer
    return inproc.OTHER


def redis_caller(outer: list[tuple[str, int, str]]) -> str:
    for frame in reversed(outer):
        path = frame[0].replace("\\", "/")
        if "/redis/" in path:
            continue
        for layer, needles in REDIS_CALLERS:
            if any(needle in path for needle in needles):
                return layer
        return REDIS
    return REDIS


def layers(stacks: list[tuple[list[tuple[str, int, str]], int]]) -> dict[str, int]:
    """Samples per layer, largest first; they add up to every sample."""
    out: dict[str, int] = {}
    for frames, count in stacks:
        layer = stack_layer(frames)
        out[layer] = out.get(layer, 0) + count
    return dict(sorted(out.items(), key=lambda item: -item[1]))


def short_file(path: str) -> str:
    """A frame's file as the in-process profile names it: from site-packages, or the
    standard library's folder, on."""
    path = path.replace("\\", "/")
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            rest = path.split(marker, 1)[1]
            return rest if marker == "/site-packages/" else rest.split("/", 1)[-1]
    return path


def hot_leaves(stacks, limit: int = 15) -> list[dict]:
    """The ``limit`` innermost non-helper frames with the most samples (``file: function``)."""
    counts: dict[str, int] = {}
    for frames, count in stacks:
        for frame in reversed(frames):
            if not is_helper(frame):
                key = f"{short_file(frame[0])}: {frame[2]}"
                counts[key] = counts.get(key, 0) + count
                break
    rows = sorted(counts.items(), key=lambda item: -item[1])[:limit]
    return [{"frame": key, "samples": n} for key, n in rows]


# --- the RESULTS.md block --------------------------------------------------------------

def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def comparison(service: dict[str, float], in_process: dict[str, float], name: str) -> str:
    """One sentence, from the data: the layers service mode adds, and the in-process
    layers' shares beside their service ones."""
    added = [layer for layer in SERVICE_LAYERS if layer in service]
    extra = sum(service[layer] for layer in added)
    common = [layer for layer in in_process if layer in service]
    biggest = sorted(common, key=lambda layer: -in_process[layer])[:3]
    shared = sum(share for layer, share in service.items() if layer not in SERVICE_LAYERS)
    moved = "; ".join(f"{layer} {_pct(service[layer])} "
                      f"({_pct(service[layer] / shared if shared else None)} of the samples outside those layers) "
                      f"against {_pct(in_process[layer])}" for layer in biggest)
    gone = [layer for layer in in_process if layer not in service]
    gone_text = (f" (absent here: {', '.join(gone)}, {_pct(sum(in_process[layer] for layer in gone))} in process)"
                 if gone else "")
    return (f"against the in-process profile `{name}`, the layers only service mode has "
            f"({', '.join(added) or 'none'}) take {_pct(extra)} of this sampling's samples; the "
            f"in-process profile's largest layers, their service share against their in-process one: "
            f"{moved}{gone_text}.")


KINDS = {"active": "threads running or ready to run", "gil": "the thread holding the GIL"}


def block(doc: dict) -> str:
    run, spy, closed = doc["run"], doc["spy"], doc["closed"]
    kinds = [kind for kind in KINDS if kind in spy]
    parts = [
        f"Run at {run['at']} (bench at commit {run['commit']}, load average {run['loadavg'][0]:.2f} at the "
        f"start, {run['cores']} cores): {run['setup']}. py-spy {run['py_spy']} sampled the gunicorn worker "
        "once per closed loop of the two requests (`contexts/next` + `POST examples`):",
    ]
    rows = [[f"{kind}: {KINDS[kind]}", f"{spy[kind]['rate_hz']} Hz, {spy[kind]['duration_s']:g} s",
             str(spy[kind]["samples"]), str(spy[kind]["errors"]), f"{spy[kind].get('behind_s', 0.0):g}",
             str(closed[kind]["annotators"]), str(closed[kind]["accepted"]), str(closed[kind]["errors"])]
            for kind in kinds]
    parts.append(markdown_table(["sampling", "rate, duration", "samples", "sampling errors",
                                 "py-spy behind (s)", "annotators", "accepted", "request errors"], rows))
    in_process = doc.get("in_process") or {}
    base = in_process.get("layers_share", {})
    name = in_process.get("name", "-")
    order = []
    for kind in kinds:
        order += [layer for layer in spy[kind]["layers_share"] if layer not in order]
    order += [layer for layer in base if layer not in order]
    layer_rows = [[layer, *[_pct(spy[kind]["layers_share"].get(layer)) for kind in kinds], _pct(base.get(layer))]
                  for layer in order]
    parts.append("The web worker's samples by layer (share of each sampling's samples), beside the in-process "
                 f"profile's shares (cProfile, `web-profile/{name}.json`):")
    parts.append(markdown_table(["layer", *[f"service, {kind}" for kind in kinds], f"in process (`{name}`)"],
                                layer_rows))
    if base:
        parts.append(" ".join(f"{KINDS[kind][0].upper()}{KINDS[kind][1:]}: "
                              f"{comparison(spy[kind]['layers_share'], base, name)}" for kind in kinds))
    frames = []
    for kind in kinds:
        frames += [row["frame"] for row in spy[kind]["hot"] if row["frame"] not in frames]

    def frame_share(kind: str, frame: str) -> str:
        found = [row["samples"] for row in spy[kind]["hot"] if row["frame"] == frame]
        return _pct(found[0] / (spy[kind]["samples"] or 1)) if found else "-"

    parts.append("The innermost frames with the most samples (the frame a sample's layer comes from; "
                 "\"-\": not among a sampling's hottest):")
    parts.append(markdown_table(["frame", *[f"service, {kind}" for kind in kinds]],
                                [[f"`{frame}`", *[frame_share(kind, frame) for kind in kinds]] for frame in frames]))
    return "\n\n".join(parts) + "\n"
