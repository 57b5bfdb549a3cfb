"""``web_profile.py``'s pure part: a cProfile of the web thread grouped by layer, and
the RESULTS.md block made from its JSON files (no Django here).

``layers(stats)`` files every function's own time (``tottime``) under one layer, from
the file it is defined in, so the layers add up to the whole profile. A C function
(``len``, ``isinstance``, a ``sqlite3`` cursor's ``execute``) has no file: the SQLite
and JSON ones are layers of their own, and every other one's time goes to the layers
of the functions that called it, in the shares cProfile recorded per caller.
"""

from __future__ import annotations

import pstats

from .results import markdown_table

# (layer, substrings of a function's file); the first that matches wins
LAYER_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("Django ORM (query building, rows to objects)", ("/django/db/",)),
    ("DRF serializers and fields", ("/rest_framework/serializers.py", "/rest_framework/fields.py",
                                    "/rest_framework/relations.py", "/rest_framework/utils/")),
    ("DRF view (auth, permissions, throttles, parse, render)", ("/rest_framework/",)),
    ("middleware", ("/django/middleware/", "/django/contrib/sessions/", "/django/contrib/messages/",
                    "/django/contrib/auth/middleware", "/csp/", "/whitenoise/", "/core/middleware.py",
                    "/core/query_ceiling.py")),
    ("Django handler, URLs, HTTP, signals", ("/django/",)),
    ("JSON (encode, decode)", ("/json/",)),
    ("model (tokenizer, torch)", ("/torch/", "/transformers/", "/tokenizers/", "/ml/")),
    ("our annotation app", ("/annotation/",)),
    ("our core, tasks, registry", ("/core/", "/tasks/", "/registry/", "/jobs/")),
    ("logging", ("/logging/",)),
    ("threads and futures (handing work to the model thread)", ("/threading.py", "/queue.py",
                                                                "/concurrent/")),
]
OTHER = "other (stdlib, libraries)"
SQLITE = "SQLite (the C library, executing SQL)"
JSON_LAYER = "JSON (encode, decode)"


def builtin_layer(name: str) -> str | None:
    """A C function's own layer (SQLite's and JSON's work), or None: its callers'."""
    if "sqlite3" in name or "SQLiteCursorWrapper" in name:
        return SQLITE
    if "_json" in name or "json." in name:
        return JSON_LAYER
    return None


def file_layer(filename: str) -> str:
    path = filename.replace("\\", "/")
    for layer, needles in LAYER_RULES:
        if any(needle in path for needle in needles):
            return layer
    return OTHER


def layers(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per layer, largest first; they add up to the profile's total."""
    out: dict[str, float] = {}

    def add(layer: str, seconds: float) -> None:
        out[layer] = out.get(layer, 0.0) + seconds

    def layer_of(func) -> str:
        filename, _, name = func
        if filename == "~":
            return builtin_layer(name) or OTHER
        return file_layer(filename)

    for func, (_, _, tottime, _, callers) in stats.stats.items():
        filename, _, name = func
        if filename != "~" or builtin_layer(name):
            add(layer_of(func), tottime)
            continue
        # a C function: its own time to its callers' layers, as cProfile split it per caller
        split = {caller: values[2] for caller, values in callers.items()}
        if not split or sum(split.values()) <= 0:
            add(OTHER, tottime)
            continue
        scale = tottime / sum(split.values())
        for caller, seconds in split.items():
            add(layer_of(caller), seconds * scale)
    return dict(sorted(out.items(), key=lambda item: -item[1]))


def hot_functions(stats: pstats.Stats, root: str, limit: int = 20) -> list[dict]:
    """The ``limit`` functions with the most cumulative time whose file is under ``root``
    or in Django or DRF (the stages of a request), with their calls per profile."""
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        path = filename.replace("\\", "/")
        if "/site-packages/" in path:
            where = path.split("/site-packages/", 1)[1]
            if not where.startswith(("django/", "rest_framework/")):
                continue
        elif path.startswith(root) and not path[len(root):].lstrip("/").startswith("bench/"):
            where = path[len(root):].lstrip("/")
        else:
            continue
        rows.append({"function": f"{where}:{line}({name})", "calls": calls,
                     "cumulative_s": cumtime, "own_s": tottime})
    rows.sort(key=lambda row: -row["cumulative_s"])
    return rows[:limit]


# --- the RESULTS.md block --------------------------------------------------------------


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def block(runs: dict[str, dict]) -> str:
    """The block from every run's JSON (``{file stem: document}``), oldest first."""
    ordered = sorted(runs.items(), key=lambda item: item[1]["run"]["at"])
    parts = []
    for stem, doc in ordered:
        run = doc["run"]
        parts.append(
            f"`{stem}`: {run['label']}, at {run['at']} (commit {run['commit']}, load average "
            f"{run['loadavg'][0]:.2f} at the start, {run['cores']} cores): {run['examples']} examples "
            f"(`contexts/next` + `POST examples`) in one process, {run['setup']}.")
    names = [stem for stem, _ in ordered]
    docs = [doc for _, doc in ordered]
    first = docs[0]["cpu"]["web_thread_ms_per_example"]

    def ratio(value) -> str:
        return f"{value:.2f} ({value / first:.2f}x)" if value and first else _ms(value)

    rows = [
        ["web thread CPU ms/example (no profiler)", *[ratio(d["cpu"]["web_thread_ms_per_example"]) for d in docs]],
        ["  of which `GET contexts/next`", *[_ms(d["cpu"]["by_request_ms"]["contexts_next"]) for d in docs]],
        ["  of which `POST examples`", *[_ms(d["cpu"]["by_request_ms"]["post_example"]) for d in docs]],
        ["process CPU ms/example (web thread + model thread)",
         *[_ms(d["cpu"]["process_ms_per_example"]) for d in docs]],
        ["SQL statements/example (BEGIN/COMMIT included)", *[str(d["sql_per_example"]) for d in docs]],
        ["response bytes/example", *[str(d["response_bytes_per_example"]) for d in docs]],
    ]
    parts.append(markdown_table(["measure", *[f"`{name}`" for name in names]], rows))
    all_layers = []
    for doc in docs:
        for layer in doc["profile"]["layers_share"]:
            if layer not in all_layers:
                all_layers.append(layer)
    layer_rows = []
    for layer in all_layers:
        cells = []
        for doc in docs:
            share = doc["profile"]["layers_share"].get(layer)
            if share is None:
                cells.append("-")
            else:
                ms = share * doc["cpu"]["web_thread_ms_per_example"]
                cells.append(f"{ms:.2f} ms ({100 * share:.1f}%)")
        layer_rows.append([layer, *cells])
    parts.append("Where the web thread's CPU goes (cProfile on the thread's CPU clock; each layer's "
                 "share of the profile times the unprofiled ms/example):")
    parts.append(markdown_table(["layer", *[f"`{name}`" for name in names]], layer_rows))
    last_name, last = names[-1], docs[-1]
    total = last["profile"]["total_s"]
    hot_rows = [[f"`{row['function']}`", f"{row['calls'] / last['profile']['examples']:g}",
                 f"{100 * row['cumulative_s'] / total:.1f}%"] for row in last["profile"]["hot"][:15]]
    parts.append(f"The stages of the two requests in `{last_name}` (cumulative time, share of the profile):")
    parts.append(markdown_table(["function", "calls/example", "cumulative"], hot_rows))
    return "\n\n".join(parts) + "\n"
