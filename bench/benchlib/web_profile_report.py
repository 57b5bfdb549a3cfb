"""``web_profile.py``'s pure part: a cProfile of the web thread grouped by layer, and
the RESULTS.md block made from its JSON files (no Django here).

``layers(stats)`` files every function's own time (``tottime``) under one layer, from
the file it is defined in, so the layers add up to the whole profile. A helper has no
layer of its own: a C function (``len``, ``isinstance``; but SQLite's and JSON's are
layers), the standard library's generic modules (``copy``, ``inspect``, ``abc``) and
``django.utils``. Its time goes to the layers of the functions that called it, in the
shares cProfile recorded per caller (through helpers that called it, up to the first
function with a layer): ``copy.deepcopy`` under a query's clone is the ORM's time, under
a serializer's fields the serializers'.
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
    ("Django handler, URLs, HTTP, signals, auth", ("/django/",)),
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


# where a function's own layer is that of its callers: the standard library's generic
# modules (not json, threading, logging) and Django's utilities
HELPER_PATHS = ("/django/utils/", "/asgiref/")
STDLIB_KEPT = ("/json/", "/threading.py", "/queue.py", "/concurrent/", "/logging/")


def is_helper(func) -> bool:
    filename, _, name = func
    if filename == "~":
        return builtin_layer(name) is None
    path = filename.replace("\\", "/")
    if any(needle in path for needle in HELPER_PATHS):
        return True
    stdlib = "site-packages/" not in path and ("/lib/python3" in path or path.startswith("<frozen"))
    return stdlib and not any(needle in path for needle in STDLIB_KEPT)


def own_layer(func) -> str:
    filename, _, name = func
    return (builtin_layer(name) or OTHER) if filename == "~" else file_layer(filename)


def layers(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per layer, largest first; they add up to the profile's total."""
    shares: dict[tuple, dict[str, float]] = {}  # a function -> its time's layers, as fractions

    def share_of(func, seen: frozenset) -> dict[str, float]:
        if func in shares:
            return shares[func]
        if not is_helper(func) or func not in stats.stats:
            found = {own_layer(func): 1.0}
        else:
            callers = {c: v[2] for c, v in stats.stats[func][4].items() if c != func and c not in seen}
            total = sum(callers.values())
            if total <= 0:  # called only by itself or round a cycle of helpers
                callers = {c: v[3] for c, v in stats.stats[func][4].items() if c != func and c not in seen}
                total = sum(callers.values())
            found = {}
            if total <= 0:
                found = {OTHER: 1.0}
            for caller, weight in callers.items():
                if weight <= 0:
                    continue
                for layer, fraction in share_of(caller, seen | {func}).items():
                    found[layer] = found.get(layer, 0.0) + fraction * weight / total
        if not seen:  # a result reached round a cycle depends on the path: keep only the top one
            shares[func] = found
        return found

    out: dict[str, float] = {}
    for func, (_, _, tottime, _, _) in stats.stats.items():
        for layer, fraction in share_of(func, frozenset()).items():
            out[layer] = out.get(layer, 0.0) + tottime * fraction
    return dict(sorted(out.items(), key=lambda item: -item[1]))


# the framework's stages of a request shown beside our code's (file suffix, function)
STAGES = {
    ("rest_framework/views.py", "perform_authentication"), ("rest_framework/views.py", "check_permissions"),
    ("rest_framework/views.py", "check_throttles"), ("rest_framework/views.py", "finalize_response"),
    ("rest_framework/response.py", "rendered_content"), ("rest_framework/serializers.py", "is_valid"),
    ("rest_framework/serializers.py", "data"), ("rest_framework/request.py", "_parse"),
    ("django/core/handlers/base.py", "_get_response"), ("django/core/handlers/wsgi.py", "__call__"),
}


def hot_functions(stats: pstats.Stats, root: str, limit: int = 25) -> list[dict]:
    """The ``limit`` functions with the most cumulative time among the repository's own
    (not bench/'s) and the framework's ``STAGES``, with their calls per profile."""
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        path = filename.replace("\\", "/")
        if "/site-packages/" in path:
            where = path.split("/site-packages/", 1)[1]
            if (where, name) not in STAGES:
                continue
        elif path.startswith(root + "/") and not path[len(root) + 1:].startswith("bench/"):
            where = path[len(root) + 1:]
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
            f"(`contexts/next` + `POST examples`{' with an Idempotency-Key' if run.get('idempotency_keys') else ''}) "
            f"in one process, {run['setup']}.")
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
                 f"{100 * row['cumulative_s'] / total:.1f}%"] for row in last["profile"]["hot"][:25]]
    parts.append(f"The stages of the two requests in `{last_name}` (cumulative time, share of the profile):")
    parts.append(markdown_table(["function", "calls/example", "cumulative"], hot_rows))
    return "\n\n".join(parts) + "\n"
