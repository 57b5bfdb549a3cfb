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

# Why each stage of the two requests is there (by file and function; a stage not named
# here shows no reason): the account of the web thread's time that RESULTS.md gives.
REASONS = {
    "django/core/handlers/wsgi.py: __call__": "the whole request; the rows below are parts of it",
    "core/middleware.py: middleware": "wraps the rest (its own work: one charset check)",
    "core/middleware.py: __call__": "wraps the rest (its own work: arming the query ceiling)",
    "django/core/handlers/base.py: _get_response": "URL resolution and the view",
    "annotation/api.py: post": "`POST examples`: parse, check, write, answer",
    "annotation/api.py: get": "`GET contexts/next`",
    "annotation/idempotency.py: run": "the write with its Idempotency-Key",
    "annotation/api.py: write": "the service call",
    "annotation/examples.py: create_example":
        "checks, the model's answer, then one transaction: the round's lock (a round closed meanwhile "
        "stores nothing), the example, its counters and model link, the session's counters",
    "rest_framework/views.py: perform_authentication": "authentication, on every request",
    "annotation/tokens.py: authenticate": "the session token",
    "annotation/tokens.py: session_from_token":
        "the token's session with its user, task and last context, one query on every request, "
        "no cache: a revoked token or a changed password stops at once",
    "annotation/contexts.py: next_context":
        "the candidates with the open round (one query), then the serving counted and remembered "
        "on the session (one transaction)",
    "annotation/contexts.py: _choose": "the candidates' query: the least used contexts of the open round",
    "annotation/models.py: save": "the example's row, with its round's and writer's counters",
    "tasks/targets.py: open_round_with_models": "the open round and its ready target models, one query",
    "annotation/models.py: _tally_example": "the round's and the writer's counters",
    "annotation/models.py: apply": "the counters' two UPDATEs",
    "annotation/models.py: _bump": "one counter UPDATE",
    "annotation/sessions.py: bump": "the session's counters, updated and read back (exact across tabs)",
    "annotation/contexts.py: servable_contexts": "building the candidates' query (the ORM's Python side)",
    "annotation/idempotency.py: replay": "a retry's recorded answer, looked up by its key",
    "annotation/idempotency.py: record": "the answer recorded in the write's transaction",
    "annotation/api.py: <lambda>": "the answer's body (DRF serializer)",
    "rest_framework/serializers.py: data": "the answers' bodies (DRF fields)",
    "rest_framework/serializers.py: is_valid": "the body's shape, with field-level messages",
    "core/query_ceiling.py: execute": "the per-statement query ceiling, around each statement",
    "rest_framework/views.py: check_throttles": "the rate limits",
    "rest_framework/views.py: finalize_response": "headers and content negotiation",
    "rest_framework/response.py: rendered_content": "JSON rendering",
}


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _stage(function: str) -> str:
    """``path:line(name)`` as ``path: name``, without the line (lines move; the account is by
    function)."""
    path, _, rest = function.partition(":")
    return f"{path}: {rest.split('(', 1)[1].rstrip(')')}" if "(" in rest else function


def block(runs: dict[str, dict]) -> str:
    """The block from every run's JSON (``{file stem: document}``), oldest first."""
    ordered = sorted(runs.items(), key=lambda item: item[1]["run"]["at"])
    parts = []
    for stem, doc in ordered:
        run = doc["run"]
        keyed = " with an Idempotency-Key" if run.get("idempotency_keys") else ""
        parts.append(
            f"`{stem}`: {run['label']}, at {run['at']} (bench at commit {run['commit']}, load average "
            f"{run['loadavg'][0]:.2f} at the start, {run['cores']} cores): {run['examples']} examples "
            f"(`contexts/next` + `POST examples`{keyed}) in one process, {run['setup']}.")
    names = [stem for stem, _ in ordered]
    docs = [doc for _, doc in ordered]
    # each run against the last "before" run up to it (itself, for a "before" run): a
    # before and an after taken one after the other saw the same load on the machine
    baselines, baseline = [], docs[0]["cpu"]["web_thread_ms_per_example"]
    for doc in docs:
        if doc["run"]["label"].lower().startswith("before"):
            baseline = doc["cpu"]["web_thread_ms_per_example"]
        baselines.append(baseline)

    def ratio(value, base) -> str:
        return f"{value:.2f} ({value / base:.2f}x)" if value and base else _ms(value)

    rows = [
        ["web thread CPU ms/example (no profiler; x the run's before)",
         *[ratio(d["cpu"]["web_thread_ms_per_example"], base) for d, base in zip(docs, baselines, strict=True)]],
        ["of which `GET contexts/next`", *[_ms(d["cpu"]["by_request_ms"]["contexts_next"]) for d in docs]],
        ["of which `POST examples`", *[_ms(d["cpu"]["by_request_ms"]["post_example"]) for d in docs]],
        ["process CPU ms/example (the model thread too)", *[_ms(d["cpu"]["process_ms_per_example"]) for d in docs]],
        ["SQL statements/example (BEGIN, SAVEPOINT included)", *[f"{d['sql_per_example']:g}" for d in docs]],
        ["profiled ms/example (cProfile's cost included)", *[_ms(d["profile"]["profiled_ms_per_example"])
                                                             for d in docs]],
    ]
    header = ["measure", *[f"`{name}`" for name in names]]
    parts.append(markdown_table(header, rows))
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
            ms = None if share is None else share * doc["cpu"]["web_thread_ms_per_example"]
            cells.append("-" if share is None else f"{ms:.2f} ({100 * share:.1f}%)")
        layer_rows.append([layer, *cells])
    parts.append("Where the web thread's CPU goes, by layer (ms/example: each layer's share of the profile "
                 "times the unprofiled figure):")
    parts.append(markdown_table(["layer", *header[1:]], layer_rows))
    last = docs[-1]
    # a function's name without its line can stand for two (a closure and a method of the
    # same name): the row is the larger, the outer one
    order = list(dict.fromkeys(_stage(row["function"]) for row in last["profile"]["hot"]))
    stage_rows = []
    for stage in order:
        cells = []
        calls = None
        for doc in docs:
            found = [row for row in doc["profile"]["hot"] if _stage(row["function"]) == stage]
            if not found:
                cells.append("-")
                continue
            row = max(found, key=lambda r: r["cumulative_s"])
            share = row["cumulative_s"] / doc["profile"]["total_s"]
            cells.append(f"{share * doc['cpu']['web_thread_ms_per_example']:.2f}")
            calls = row["calls"] / doc["profile"]["examples"]
        stage_rows.append([f"`{stage}`", f"{calls:.3g}" if calls is not None else "-", *cells,
                           REASONS.get(stage, "")])
    parts.append("The stages of the two requests (cumulative ms/example, each stage's share of the profile "
                 "times the unprofiled figure; nested: a row includes the rows it calls), and why each is there:")
    parts.append(markdown_table(["stage", "calls/example", *header[1:], "why"], stage_rows))
    return "\n\n".join(parts) + "\n"
