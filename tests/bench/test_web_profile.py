"""bench/web_profile.py's pure part: a profile's own time filed by layer (helpers under
their callers' layers, the layers adding up to the whole), and the RESULTS.md block
from its JSON files (runs side by side, oldest first, each stage with its reason)."""

import cProfile
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))

from bench.benchlib import web_profile_report as W  # noqa: E402

ORM = "Django ORM (query building, rows to objects)"
SERIALIZERS = "DRF serializers and fields"


class FakeStats:
    """What ``layers`` reads of a ``pstats.Stats``: ``stats``, function -> (cc, nc, tt, ct, callers)."""

    def __init__(self, rows):
        self.stats = rows


def test_helpers_take_their_callers_layers_through_other_helpers_and_the_layers_add_up():
    query = ("/v/site-packages/django/db/models/query.py", 10, "get")
    fields = ("/v/site-packages/rest_framework/serializers.py", 20, "data")
    deepcopy = ("/usr/lib/python3.11/copy.py", 128, "deepcopy")
    isinstance_ = ("~", 0, "<built-in method builtins.isinstance>")
    execute = ("~", 0, "<method 'execute' of 'sqlite3.Cursor' objects>")
    stats = FakeStats({
        query: (1, 1, 2.0, 6.0, {}),
        fields: (1, 1, 1.0, 4.0, {}),
        # deepcopy: its own time 3.0, a third of it under the query, two thirds under the fields
        deepcopy: (3, 3, 3.0, 4.0, {query: (1, 1, 1.0, 1.5, ), fields: (2, 2, 2.0, 2.5),
                                   deepcopy: (1, 1, 0.0, 0.0)}),
        isinstance_: (1, 1, 1.0, 1.0, {deepcopy: (1, 1, 1.0, 1.0)}),  # through the helper above
        execute: (1, 1, 0.5, 0.5, {query: (1, 1, 0.5, 0.5)}),  # SQLite is a layer of its own
    })
    found = W.layers(stats)
    assert found[ORM] == pytest.approx(2.0 + 3.0 / 3 + 1.0 / 3)
    assert found[SERIALIZERS] == pytest.approx(1.0 + 3.0 * 2 / 3 + 1.0 * 2 / 3)
    assert found[W.SQLITE] == pytest.approx(0.5)
    assert sum(found.values()) == pytest.approx(7.5)
    assert list(found) == sorted(found, key=lambda layer: -found[layer])  # largest first


def test_a_real_profile_is_filed_whole():
    def work():
        return sorted(json.dumps({"n": i}) for i in range(2000))

    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    work()
    profiler.disable()
    import pstats

    stats = pstats.Stats(profiler)
    assert sum(W.layers(stats).values()) == pytest.approx(stats.total_tt)


def test_files_go_to_the_first_layer_that_names_them():
    assert W.file_layer("/v/site-packages/django/db/models/sql/compiler.py") == ORM
    assert W.file_layer("/v/site-packages/rest_framework/fields.py") == SERIALIZERS
    assert W.file_layer("/v/site-packages/django/middleware/csrf.py") == "middleware"
    assert W.file_layer("/repo/annotation/services/examples.py") == "our annotation app"
    assert W.is_helper(("/v/site-packages/django/utils/functional.py", 1, "inner"))
    assert not W.is_helper(("/usr/lib/python3.11/json/encoder.py", 1, "encode"))


def run(at, label, web_ms, post_ms, sql, hot):
    return {
        "run": {"label": label, "at": at, "commit": "abc1234", "examples": 10, "idempotency_keys": True,
                "loadavg": [1.0, 1.0, 1.0], "cores": 2, "setup": "in one process"},
        "cpu": {"web_thread_ms_per_example": web_ms, "process_ms_per_example": web_ms * 3,
                "by_request_ms": {"contexts_next": web_ms - post_ms, "post_example": post_ms}},
        "sql_per_example": sql,
        "profile": {"examples": 10, "total_s": 1.0, "profiled_ms_per_example": web_ms * 5,
                    "layers_share": {ORM: 0.75, "middleware": 0.25},
                    "hot": [{"function": f, "calls": c, "cumulative_s": s, "own_s": 0.0} for f, c, s in hot]},
    }


def test_the_block_puts_runs_side_by_side_oldest_first_with_each_stages_reason():
    before = run("2026-01-01T00:00:00Z", "before", 20.0, 12.0, 20.7, [
        ("annotation/tokens.py:40(session_from_token)", 20, 0.3),
        ("annotation/idempotency.py:65(record)", 10, 0.1), ("annotation/idempotency.py:90(record)", 10, 0.12)])
    after = run("2026-01-02T00:00:00Z", "after", 16.0, 9.0, 17.7, [
        ("annotation/tokens.py:41(session_from_token)", 20, 0.25),
        ("annotation/idempotency.py:70(record)", 10, 0.05)])
    block = W.block({"2-after": after, "1-before": before})
    assert block.index("`1-before`: before") < block.index("`2-after`: after")
    assert "| web thread CPU ms/example (no profiler; x the run's before) | 20.00 (1.00x) | 16.00 (0.80x) |" in block
    again = run("2026-01-03T00:00:00Z", "before, again", 30.0, 18.0, 20.7, [])
    later = run("2026-01-04T00:00:00Z", "after, again", 27.0, 16.0, 17.7, [])
    both = W.block({"1-before": before, "2-after": after, "3-before": again, "4-after": later})
    assert "| 20.00 (1.00x) | 16.00 (0.80x) | 30.00 (1.00x) | 27.00 (0.90x) |" in both  # each after by its before
    assert "| SQL statements/example (BEGIN, SAVEPOINT included) | 20.7 | 17.7 |" in block
    assert f"| {ORM} | 15.00 (75.0%) | 12.00 (75.0%) |" in block
    token = [line for line in block.splitlines() if "session_from_token" in line]
    assert token == [f"| `annotation/tokens.py: session_from_token` | 2 | 6.00 | 4.00 | "
                     f"{W.REASONS['annotation/tokens.py: session_from_token']} |"]
    record = [line for line in block.splitlines() if "idempotency.py: record" in line]
    assert len(record) == 1 and "| 2.40 | 0.80 |" in record[0]  # the outer of two of one name


def test_the_committed_runs_render_and_every_run_recorded_its_profile():
    folder = ROOT / "bench" / "results" / "web-profile"
    runs = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))}
    assert len(runs) >= 2, "a run before the changes and one after"
    for doc in runs.values():
        assert sum(doc["profile"]["layers_share"].values()) == pytest.approx(1.0, abs=0.01)
        assert doc["cpu"]["web_thread_ms_per_example"] > 0 and doc["sql_per_example"] > 0
    assert "web thread CPU ms/example" in W.block(runs)
