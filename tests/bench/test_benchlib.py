"""The benchmarks' library (bench/benchlib): numbers, result files, tables, the
Poisson schedule and process control. No servers, no models."""

import json
import statistics
import sys
import time

import numpy as np
import pytest

from bench.benchlib import ROOT, data, procs, results, stats
from bench.benchlib.client import open_loop, poisson_arrivals

# --- stats -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 20, 101, 1000])
@pytest.mark.parametrize("q", [0.0, 0.5, 0.95, 0.99, 1.0])
def test_percentile_is_numpys_nearest_rank(n, q):
    samples = list(np.random.default_rng(n).exponential(0.05, n))
    assert stats.percentile(samples, q) == np.percentile(samples, q * 100, method="nearest")


def test_percentile_by_hand():
    samples = [5, 1, 4, 2, 3, 10, 9, 8, 7, 6]  # sorted: 1..10, rank round(q * 9)
    assert stats.percentile(samples, 0.5) == 5  # round(4.5) = 4: half to even
    assert stats.percentile(samples, 0.95) == 10  # round(8.55) = 9
    assert stats.percentile(samples, 0.9) == 9  # round(8.1) = 8
    assert stats.percentile(samples, 0.0) == 1


def test_summary_ms_by_hand():
    samples = [0.010, 0.020, 0.030, 0.040, 0.100]
    assert stats.summary_ms(samples) == {
        "n": 5,
        "p50_ms": 30.0,
        "p95_ms": 100.0,  # rank round(0.95 * 4) = 4
        "mean_ms": 40.0,
        "max_ms": 100.0,
    }
    with_p99 = stats.summary_ms(samples, p99=True)
    assert list(with_p99) == ["n", "p50_ms", "p95_ms", "mean_ms", "max_ms", "p99_ms"]
    assert with_p99["p99_ms"] == 100.0


def test_summary_ms_even_count_median_and_rounding():
    samples = [0.0011111, 0.0022222, 0.0033333, 0.0044444]
    summary = stats.summary_ms(samples, median_key="median_ms", digits=3, maximum=False)
    assert list(summary) == ["n", "median_ms", "p95_ms", "mean_ms"]
    assert summary["median_ms"] == round(statistics.median(samples) * 1000, 3) == 2.778
    assert summary["p95_ms"] == 4.444
    assert summary["mean_ms"] == pytest.approx(np.mean(samples) * 1000, abs=5e-4)


def test_summary_ms_of_nothing_keeps_its_keys():
    assert stats.summary_ms([], p99=True) == {
        "n": 0,
        "p50_ms": None,
        "p95_ms": None,
        "mean_ms": None,
        "max_ms": None,
        "p99_ms": None,
    }


def test_cosine():
    assert stats.cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert stats.cosine([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert stats.cosine([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(-1.0)
    assert stats.cosine([0.0, 0.0], [1.0, 1.0]) == 1.0
    with pytest.raises(ValueError):
        stats.cosine([1.0], [1.0, 2.0])


def test_repeat_seconds_times_each_call():
    calls = []
    timings = stats.repeat_seconds(lambda i: (calls.append(i), time.sleep(0.01)), 3)
    assert calls == [0, 1, 2]
    assert len(timings) == 3 and all(0.009 < t < 1.0 for t in timings)


# --- results -----------------------------------------------------------------------------


def test_write_json_writes_through_a_renamed_temporary_file(tmp_path):
    path = tmp_path / "out" / "result.json"
    shown = results.write_json(path, {"a": 1, "b": [1.5, None]})
    assert shown == str(path)  # outside the repository: the whole path
    assert path.read_text() == '{\n  "a": 1,\n  "b": [\n    1.5,\n    null\n  ]\n}\n'
    first_inode = path.stat().st_ino
    results.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert path.stat().st_ino != first_inode  # replaced by a rename, never rewritten in place
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no .tmp left


def test_write_json_that_fails_leaves_the_previous_file(tmp_path):
    path = tmp_path / "result.json"
    results.write_json(path, {"kept": True})
    with pytest.raises(TypeError):
        results.write_json(path, {"not json": object()})
    assert json.loads(path.read_text()) == {"kept": True}


def test_write_json_writes_paths_in_the_repository_from_its_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNABENCH_DATA_DIR", str(tmp_path / "data"))
    # The temporary and home folders apart from the checkout, wherever it is (a clone in
    # /tmp would otherwise make its sibling "<tmp>/...": right, but not what this tests).
    monkeypatch.setattr(results.tempfile, "gettempdir", lambda: str(tmp_path / "t"))
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    path = tmp_path / "result.json"
    results.write_json(path, {
        "out": ROOT / "bench" / "results" / "load.json",  # a Path is written as a string
        "command": f"{ROOT}/.venv/bin/gunicorn dynabench.wsgi --worker-tmp-dir /dev/shm",
        "database_url": f"sqlite:///{ROOT}/var/bench/embedded.sqlite3",
        "root": str(ROOT), "sibling": f"{ROOT}-other/x.json",
        "data": [str(tmp_path / "data" / "hatecheck" / "all_annotations.csv")],
        "busy": "17 9.0% /usr/lib/postgresql/16/bin/postgres", "n": 3, "none": None,
    })
    assert json.loads(path.read_text()) == {
        "out": "bench/results/load.json",
        "command": ".venv/bin/gunicorn dynabench.wsgi --worker-tmp-dir /dev/shm",
        "database_url": "sqlite:///var/bench/embedded.sqlite3",  # the same file, from the root
        "root": ".", "sibling": "x.json",  # another checkout is not this one
        "data": ["$DYNABENCH_DATA_DIR/hatecheck/all_annotations.csv"],
        "busy": "17 9.0% postgres", "n": 3, "none": None,
    }


def test_portable_names_the_temporary_and_home_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("DYNABENCH_DATA_DIR", raising=False)
    monkeypatch.setattr(results.tempfile, "gettempdir", lambda: str(tmp_path / "t"))
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    document = {f"{tmp_path}/t/run": [f"open {tmp_path}/t/x.json", f"{tmp_path}/h/.pyenv/bin/python3 -c x",
                                      f"{tmp_path}/tx/y"]}
    assert results.portable(document) == {"<tmp>/run": ["open <tmp>/x.json", "~/.pyenv/bin/python3 -c x", "y"]}


def test_display_path_is_relative_inside_the_repository():
    assert (
        results.display_path(ROOT / "bench" / "results" / "load.json") == "bench/results/load.json"
    )


def test_fixed_table():
    columns = [("measure", "<8"), ("ms", ">7.1f"), ("share", ">6.0%"), ("n", ">4d")]
    table = results.fixed_table(columns, [["bare", 1.25, 1.0, 3], ["api-cold", 17.95, 0.456, 12]])
    assert table.splitlines() == [
        "measure       ms  share    n",
        "bare         1.2   100%    3",
        "api-cold    17.9    46%   12",
    ]
    assert results.fixed_header(columns, sep="") == "measure      ms share   n"


def test_markdown_and_plain_tables():
    rows = [["nli", "a | b"], ["qa", "c"]]
    assert results.markdown_table(["task", "result"], rows) == (
        "| task | result |\n|---|---|\n| nli | a / b |\n| qa | c |"
    )
    assert results.plain_table(["task", "result"], rows, rule=5) == (
        "task  |  result\n-----\nnli  |  a | b\nqa  |  c"
    )


def test_pct():
    assert results.pct(0.4567) == "45.7%"
    assert results.pct(None) == "n/a"


# --- the Poisson schedule and the open loop ----------------------------------------------


def test_poisson_arrivals_keep_their_rate_and_share():
    arrivals = list(poisson_arrivals(rate=50.0, duration=200.0, seed=1, share=0.25))
    offsets = [at for at, _ in arrivals]
    assert len(arrivals) / 200.0 == pytest.approx(50.0, rel=0.03)
    assert offsets == sorted(offsets) and 0 < offsets[0] and offsets[-1] <= 200.0
    gaps = np.diff(offsets)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 50.0, rel=0.05)  # exponential: std == mean
    assert sum(flag for _, flag in arrivals) / len(arrivals) == pytest.approx(0.25, abs=0.02)


def test_poisson_arrivals_repeat_with_the_seed():
    first = list(poisson_arrivals(10.0, 5.0, seed=2, share=0.5))
    assert first == list(poisson_arrivals(10.0, 5.0, seed=2, share=0.5))
    assert first != list(poisson_arrivals(10.0, 5.0, seed=3, share=0.5))
    assert not any(flag for _, flag in poisson_arrivals(10.0, 5.0, seed=2))


def test_open_loop_handles_each_arrival_at_its_time():
    seen = []
    started = time.perf_counter()
    count, wall = open_loop(
        [(0.0, False), (0.05, True), (0.1, False)],
        lambda i, flag: seen.append((i, flag, time.perf_counter() - started)),
        workers=4,
    )
    assert count == 3
    assert [(i, flag) for i, flag, _ in sorted(seen)] == [(0, False), (1, True), (2, False)]
    for i, _, at in sorted(seen):
        assert at >= 0.05 * i - 0.005
    assert 0.1 <= wall < 1.0


# --- data ----------------------------------------------------------------------------------


def test_sample_and_limit_are_seeded():
    items = list(range(100))
    assert data.sample(items, 10, 0, "x") == data.sample(items, 10, 0, "x")
    assert data.sample(items, 10, 0, "x") != data.sample(items, 10, 0, "y")
    assert sorted(data.sample(items, None, 0, "x")) == items
    assert data.limit(items, None, 0, "x") == items  # file order
    assert data.limit(items, 200, 0, "x") == items
    assert data.limit(items, 5, 0, "x") == data.sample(items, 5, 0, "x")


def test_read_sst2(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("sentence\tlabel\na fine film . \t1\n\t0\nnot good\t0\nodd\tx\nlast\t1\n")
    assert data.read_sst2(path) == [
        ("a fine film .", "positive"),
        ("not good", "negative"),
        ("last", "positive"),
    ]
    assert data.read_sst2(path, limit=2) == [
        ("a fine film .", "positive"),
        ("not good", "negative"),
    ]


def test_data_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNABENCH_DATA_DIR", str(tmp_path))
    assert data.data_dir() == tmp_path
    monkeypatch.setenv("DYNABENCH_DATA_DIR", "")
    assert data.data_dir() == ROOT / "var" / "data"


# --- process control -----------------------------------------------------------------------


def _sleeper(processes, tmp_path, name):
    return processes.start(
        name, [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / f"{name}.log"
    )


def test_run_modes_stops_what_each_mode_started(tmp_path):
    started = []

    def run_mode(mode, processes):
        started.append(_sleeper(processes, tmp_path, mode))
        assert started[-1].poll() is None
        return {"mode": mode}

    assert procs.run_modes(["a", "b"], run_mode) == [{"mode": "a"}, {"mode": "b"}]
    assert all(p.poll() is not None for p in started)
    assert started[0].returncode == -15  # SIGTERM, to its process group


def test_run_modes_interrupted_stops_everything_and_answers_none(tmp_path):
    started = []

    def run_mode(mode, processes):
        started.append(_sleeper(processes, tmp_path, mode))
        raise KeyboardInterrupt

    assert procs.run_modes(["a", "b"], run_mode) is None
    assert len(started) == 1 and started[0].poll() is not None


def test_run_modes_error_stops_the_processes_and_raises(tmp_path):
    started = []

    def run_mode(mode, processes):
        started.append(_sleeper(processes, tmp_path, mode))
        raise RuntimeError("the server exited")

    with pytest.raises(RuntimeError, match="the server exited"):
        procs.run_modes(["a"], run_mode)
    assert started[0].poll() is not None


def test_run_json_reads_the_marked_answer():
    cmd = [sys.executable, "-c", "print('noise'); print('BENCH_JSON {\"ok\": 1}')"]
    assert procs.run_json(cmd, {}, timeout=30, what="probe") == {"ok": 1}
    with pytest.raises(RuntimeError, match="probe failed"):
        procs.run_json([sys.executable, "-c", "print('no answer')"], {}, timeout=30, what="probe")


# --- cpu ---------------------------------------------------------------------------------

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cpu_meter_charges_each_group_with_what_its_processes_used():
    """A child that burns 0.6 s of CPU under a parent that only waits is charged to
    the parent's tree, also after it exited; an idle process gets about nothing."""
    import subprocess

    from bench.benchlib import cpu

    parent_code = (
        "import subprocess, sys, time\n"
        "time.sleep(0.5)\n"
        f"child = subprocess.Popen([sys.executable, '-c', {BURN.format(seconds=0.6)!r}])\n"
        "child.wait(); print('done', flush=True); time.sleep(30)\n"
    )
    busy = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)  # both interpreters are up; the child starts later, inside the meter
        meter = cpu.CpuMeter({"busy": lambda: cpu.tree_cpu_seconds(busy.pid),
                              "idle": lambda: cpu.tree_cpu_seconds(idle.pid)})
        meter.start()
        assert busy.stdout.readline().strip() == "done"  # the child burned, exited, was reaped
        assert cpu.descendants(busy.pid) == []
        found = meter.stop(examples=10)
    finally:
        busy.kill(), idle.kill()
        busy.wait(), idle.wait()
        busy.stdout.close()
    assert 0.55 <= found["cpu_s"]["busy"] < 1.5  # the child's 0.6 s and its start-up
    assert found["cpu_s"]["idle"] < 0.05
    assert found["ms_per_example"]["busy"] == pytest.approx(found["cpu_s"]["busy"] * 100, abs=0.5)
    total = sum(found["cpu_s"].values())  # the groups and the rest of the machine
    assert found["ms_per_example"]["total"] == pytest.approx(total * 100, rel=0.05, abs=1)
    assert found["cores"] >= 1 and 0 < found["busy_share"] <= 1.0


def test_cpu_meter_without_examples_gives_no_per_example_figures():
    from bench.benchlib import cpu

    meter = cpu.CpuMeter({"this process": time.process_time})
    meter.start()
    found = meter.stop(examples=0)
    assert found["ms_per_example"] == {"this process": None, "other": None, "total": None}
    assert set(found["cpu_s"]) == {"this process", "other"}


def test_descendants_of_a_process_without_children_and_of_a_gone_one():
    from bench.benchlib import cpu

    assert cpu.descendants(2**22 + 12345) == []  # above any pid_max: no such process
    assert cpu.cpu_seconds(2**22 + 12345) == 0.0


def test_the_benchmarks_read_data_sets_without_django(tmp_path):
    """bench/baselines.py and bench/qa_training.py read the data sets through
    datafiles.readers in a plain Python process: nothing on that path may need
    Django's settings (core.parsers once did, through core.rows)."""
    import os
    import subprocess

    rows = tmp_path / "squad.json"
    rows.write_text(json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "1", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}))
    code = ("import sys; sys.path.insert(0, 'bench'); from benchlib.data import load_records; "
            f"records = load_records('squad', __import__('pathlib').Path({str(rows)!r}), {{}}); "
            "print(len(records), records[0].target['text'], 'django' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DYNABENCH_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "France", "False"]
