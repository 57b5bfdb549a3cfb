"""Dynamic batching, the explanation lane and warm-up.

The Batcher on its own (batches form, each request gets its own slice, one bad
input fails alone, a caller who gave up is skipped), then with the real models:
batched answers equal one-at-a-time answers for classification, QA and
ensembles; then the warming-up answer and the explanation lane.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from annotation import inference, runtime
from annotation.batching import Batcher


class Gated:
    """A run function that records its batches; its first pass holds until ``open()``,
    so that the requests submitted meanwhile pile up (deterministic batches)."""

    def __init__(self, fail_on=None):
        self.fail_on = fail_on
        self.seen = []
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, key, rows):
        self.seen.append((key, list(rows)))
        self.started.set()
        self.gate.wait(10)
        if self.fail_on is not None and self.fail_on in rows:
            raise ValueError(f"bad row {self.fail_on!r}")
        return [f"{key}:{row}" for row in rows]

    def hold(self, batcher, key="m"):
        """Submit a first request and wait until its pass is running (and held)."""
        future = batcher.submit(key, ["first"])
        assert self.started.wait(5)
        return future


def test_requests_waiting_together_share_one_pass_and_get_their_own_answers():
    run = Gated()
    batcher = Batcher(run, window=0.01, max_rows=32)
    first = run.hold(batcher)
    futures = [batcher.submit("m", [f"r{i}", f"s{i}"]) for i in range(5)]
    run.gate.set()
    assert first.result(timeout=5) == ["m:first"]
    assert [f.result(timeout=5) for f in futures] == [[f"m:r{i}", f"m:s{i}"] for i in range(5)]
    assert [len(rows) for _, rows in run.seen] == [1, 10]  # the five waiting requests: one pass
    assert batcher.stats.largest == 10 and batcher.stats.requests == 6


def test_a_batch_takes_one_model_at_a_time_and_never_more_rows_than_the_maximum():
    run = Gated()
    batcher = Batcher(run, window=0.0, max_rows=4)
    blocker = run.hold(batcher, key="x")
    futures = [batcher.submit("m" if i % 2 else "e", [str(i), str(i)]) for i in range(6)]
    run.gate.set()
    blocker.result(timeout=5)
    for i, future in enumerate(futures):
        key = "m" if i % 2 else "e"
        assert future.result(timeout=5) == [f"{key}:{i}", f"{key}:{i}"]
    batches = run.seen[1:]
    # e0+e2 (full at 4 rows), m1+m3, then e4 and m5 each alone: oldest first, never mixed
    assert [(key, rows) for key, rows in batches] == [("e", ["0", "0", "2", "2"]), ("m", ["1", "1", "3", "3"]),
                                                      ("e", ["4", "4"]), ("m", ["5", "5"])]
    for key, rows in batches:  # each batch: one model's rows only
        assert all(int(row) % 2 == (key == "m") for row in rows)


def test_one_bad_input_fails_only_its_own_request():
    run = Gated(fail_on="bad")
    batcher = Batcher(run, window=0.0, max_rows=32)
    blocker = run.hold(batcher)
    good = [batcher.submit("m", [f"ok{i}"]) for i in range(3)]
    bad = batcher.submit("m", ["bad"])
    run.gate.set()
    blocker.result(timeout=5)
    assert [f.result(timeout=5) for f in good] == [["m:ok0"], ["m:ok1"], ["m:ok2"]]
    with pytest.raises(ValueError, match="bad row 'bad'"):
        bad.result(timeout=5)
    assert batcher.stats.retried_alone == 4  # the failed pass of four, each request again alone


def test_a_request_whose_caller_gave_up_is_not_run_and_calls_run_in_turn():
    run = Gated()
    batcher = Batcher(run, window=0.0, max_rows=32)
    blocker = run.hold(batcher)
    dropped = batcher.submit("m", ["dropped"])
    assert dropped.cancel()
    order = []
    loaded = batcher.call(lambda: order.append(threading.current_thread().name) or "loaded")
    kept = batcher.submit("m", ["kept"])
    run.gate.set()
    assert blocker.result(timeout=5) == ["m:first"] and kept.result(timeout=5) == ["m:kept"]
    assert loaded.result(timeout=5) == "loaded" and order == ["dynabench-batcher"]
    assert all("dropped" not in rows for _, rows in run.seen)
    with pytest.raises(ValueError):
        Batcher(run, window=-1)


# --- with the real models ------------------------------------------------------------------

SENTIMENT = ["What a lovely film.", "Dreadful.", "It was fine, I suppose, for a rainy afternoon in March.",
             "Not bad at all, honestly 😍!!", "A", "The plot drags but the acting is superb and moving."]
QA = [{"passage": "The Eiffel Tower is in Paris. It was finished in 1889.", "question": "When was it finished?"},
      {"passage": "Maria lives in Lisbon with her two cats.", "question": "Where does Maria live?"},
      {"passage": "Water boils at 100 degrees at sea level. " * 30, "question": "At what temperature?"}]


def _concurrently(models, rows):
    """Each row its own request, all submitted at once to the model thread."""
    messages = [m.message() for m in models]
    runtime.ensure_loaded(messages)
    barrier = threading.Barrier(len(rows))

    def one(row):
        barrier.wait()
        return runtime.predict_batched(messages, [row])[0]

    with ThreadPoolExecutor(len(rows)) as pool:
        return list(pool.map(one, rows))


def _same(batched, alone):
    assert batched.get("label") == alone.get("label") and batched.get("answer") == alone.get("answer")
    for label, p in alone.get("probabilities", {}).items():
        assert batched["probabilities"][label] == pytest.approx(p, abs=1e-4)
    if "score" in alone:
        assert batched["score"] == pytest.approx(alone["score"], abs=1e-4)


@pytest.mark.django_db
def test_batched_answers_equal_one_at_a_time_answers(live_tasks, other_sentiment_artifact):
    from annotation.runtime import predict_refs
    from registry.services import TargetModel, register_model, target_model
    from tasks.targets import open_round_with_models

    cases = []
    sentiment = open_round_with_models(live_tasks["sentiment"])[1]
    cases.append((sentiment, [{"statement": text} for text in SENTIMENT]))
    cases.append((open_round_with_models(live_tasks["nli"])[1],
                  [{"premise": "Two dogs run on a beach.", "hypothesis": h} for h in ("Animals are outside.",
                                                                                     "Cats sleep.", "Dogs.")]))
    cases.append((open_round_with_models(live_tasks["qa"])[1], QA))
    other = register_model(live_tasks["sentiment"], other_sentiment_artifact, name="other")
    ensemble = [*sentiment, target_model(other)]
    cases.append((ensemble, [{"statement": text} for text in SENTIMENT]))
    assert all(isinstance(m, TargetModel) for models, _ in cases for m in models)
    before = runtime.model_thread().stats.largest
    for models, rows in cases:
        alone = [predict_refs([m.message() for m in models], [row])[0] for row in rows]
        batched = _concurrently(models, rows)
        for b, a in zip(batched, alone, strict=True):
            _same(b, a)
            if len(models) > 1:  # an ensemble: every member's own answer is kept
                assert set(b["members"]) == {str(m.id) for m in models}
                for key, member in a["members"].items():
                    _same(b["members"][key], member)
    assert runtime.model_thread().stats.largest > max(before, 1)  # requests did share passes


@pytest.mark.django_db
def test_a_bad_input_among_concurrent_requests_fails_alone(live_tasks):
    from core.errors import InvalidInput
    from tasks.targets import open_round_with_models

    models = open_round_with_models(live_tasks["sentiment"])[1]
    rows = [{"statement": "Good."}, {"statement": ""}, {"statement": "Bad."}, {"statement": "Fine."}]
    runtime.ensure_loaded([m.message() for m in models])
    barrier = threading.Barrier(len(rows))

    def one(row):
        barrier.wait()
        try:
            return inference.predict_with(models, [row])[0]["label"]
        except InvalidInput as exc:
            return f"refused: {exc}"

    with ThreadPoolExecutor(len(rows)) as pool:
        answers = list(pool.map(one, rows))
    assert answers[1].startswith("refused") and "statement" in answers[1]
    assert all(a in ("positive", "negative") for i, a in enumerate(answers) if i != 1)


@pytest.mark.django_db
def test_a_model_still_loading_answers_503_warming_up_then_serves(live_tasks, client_for, annotator, settings):
    import ml
    from annotation.models import Example
    from tasks.targets import open_round_with_models

    task = live_tasks["sentiment"]
    [model] = open_round_with_models(task)[1]
    ml.default_cache().clear()
    settings.INFERENCE_WARMUP_WAIT = 0.0
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    body = {"context": context["id"], "inputs": {"statement": "Lovely."}, "target": {"label": "positive"}}
    inference._prefetched.clear()
    ml.default_cache().clear()  # serving the context queued a load: start from nothing again
    response = client.post("/api/tasks/sentiment/examples/", body, format="json")
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "warming_up" and "warming up" in response.json()["detail"]
    assert int(response["Retry-After"]) >= 1
    assert Example.objects.count() == 0  # nothing stored
    for future in runtime.load_in_background([model]):
        future.result(timeout=120)  # the load that request queued
    assert model.ref() in ml.default_cache()
    response = client.post("/api/tasks/sentiment/examples/", body, format="json")
    assert response.status_code == 201, response.content
    # A broken artifact is not "warming up": it says what failed.
    from registry.services import TargetModel

    settings.INFERENCE_WARMUP_WAIT = 60
    broken = TargetModel(model.id, "broken", "/nonexistent/artifact", model.sha256)
    with pytest.raises(inference.InferenceFailed, match="ArtifactError"):
        inference.predict_with([broken], [{"statement": "Anything."}])


@pytest.mark.django_db
def test_the_web_process_loads_the_open_rounds_models_at_start(live_tasks, monkeypatch):
    import importlib

    monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "1")  # what the reload would set, put back after

    import ml

    ml.default_cache().clear()
    from tasks.targets import open_rounds_target_models

    refs = [m.ref() for m in open_rounds_target_models()]
    import dynabench.wsgi

    importlib.reload(dynabench.wsgi)  # what a fresh gunicorn worker or runserver does
    runtime.model_thread().call(lambda: None).result(timeout=300)
    assert all(ref in ml.default_cache() for ref in refs) and len(refs) == 4


@pytest.mark.django_db
def test_an_embedded_web_process_leaves_a_core_to_its_request_threads_unless_told_otherwise(monkeypatch):
    import importlib

    import dynabench.wsgi

    monkeypatch.setenv("DYNABENCH_WARM_UP", "0")
    monkeypatch.delenv("DYNABENCH_TORCH_THREADS", raising=False)  # put back as it was after the test
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    importlib.reload(dynabench.wsgi)  # what a fresh gunicorn worker or runserver does
    assert os.environ["DYNABENCH_TORCH_THREADS"] == "7"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.delenv("DYNABENCH_TORCH_THREADS")
    importlib.reload(dynabench.wsgi)
    assert os.environ["DYNABENCH_TORCH_THREADS"] == "1"
    monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "2")
    importlib.reload(dynabench.wsgi)
    assert os.environ["DYNABENCH_TORCH_THREADS"] == "2"


@pytest.mark.django_db
def test_an_explanation_does_not_hold_up_the_predictions_behind_it(live_tasks):
    from tasks.targets import open_round_with_models

    [model] = open_round_with_models(live_tasks["qa"])[1]
    inputs = {"passage": "Water boils at 100 degrees at sea level. " * 20,
              "question": "At what temperature does water boil?"}
    runtime.ensure_loaded([model.message()])
    done = {}
    explaining = threading.Thread(target=lambda: done.setdefault(
        "explanation", (inference.explain_with(model, inputs, None, 20), time.monotonic())))
    explaining.start()
    time.sleep(0.05)  # the explanation is running on its own thread
    predicted = []
    for _ in range(3):
        inference.predict_with([model], [inputs])
        predicted.append(time.monotonic())
    explaining.join(timeout=120)
    explanation, finished = done["explanation"]
    assert explanation["n_steps"] == 20
    assert max(predicted) < finished  # three predictions answered while it was still explaining


@pytest.mark.django_db
def test_a_threads_or_solo_worker_warms_its_models_when_ready_but_a_prefork_parent_does_not(live_tasks,
                                                                                            monkeypatch):
    """worker_ready in a prefork parent must not touch torch (its children load theirs
    in worker_process_init, after the fork); solo and threads workers load there, and
    the receiver returns only once the models are loaded: the worker's loop, which
    takes the first task, starts after it."""
    import ml
    from annotation import startup as worker_signals
    from tasks.targets import open_rounds_target_models

    refs = [m.ref() for m in open_rounds_target_models()]
    monkeypatch.setattr(worker_signals, "_main_pid", os.getpid())  # as worker_init recorded it in the worker

    class Controller:
        def __init__(self, pool):
            self.pool_cls = pool

    class Consumer:  # what worker_ready sends: the consumer, its controller holding the pool class
        def __init__(self, pool):
            self.controller = Controller(pool)

    for pool, loads in (("celery.concurrency.prefork:TaskPool", False), ("celery.concurrency.solo:TaskPool", True),
                        ("celery.concurrency.thread:TaskPool", True)):
        ml.default_cache().clear()
        worker_signals.load_models_in_solo_worker(sender=Consumer(pool))
        assert all(ref in ml.default_cache() for ref in refs) is loads and len(refs) == 4, pool
        runtime.model_thread().call(lambda: None).result(timeout=300)  # whatever was queued has run
        assert all(ref in ml.default_cache() for ref in refs) is loads, pool


def test_a_worker_waits_for_its_models_within_a_limit_and_past_a_failed_load(caplog):
    from concurrent.futures import Future

    from annotation.startup import wait_for_models

    failed, loaded, never = Future(), Future(), Future()
    failed.set_exception(RuntimeError("broken artifact"))
    loaded.set_result(None)
    started = time.monotonic()
    wait_for_models([failed, loaded, never], limit=0.3)  # a failure is passed over; the stuck load is given up on
    assert 0.25 <= time.monotonic() - started < 5
    assert "still loading after 0.3 s: taking tasks anyway" in caplog.text


def test_a_pass_giving_the_wrong_number_of_answers_fails_its_requests_instead_of_misaligning_them():
    run = Gated()
    short = lambda key, rows: run(key, rows)[:-1] if len(rows) > 0 else []  # noqa: E731 - one answer short
    batcher = Batcher(short, window=0.0, max_rows=32)
    blocker = batcher.submit("m", ["first"])
    assert run.started.wait(5)
    waiting = [batcher.submit("m", [f"r{i}"]) for i in range(3)]
    run.gate.set()
    for future in [blocker, *waiting]:
        with pytest.raises(RuntimeError, match="gave 0 results for 1 rows"):
            future.result(timeout=5)


@pytest.mark.django_db
def test_a_failed_load_answers_for_itself_until_the_artifact_changes(live_tasks, tmp_path):
    import shutil

    import ml
    from registry.services import TargetModel
    from tasks.targets import open_round_with_models

    [model] = open_round_with_models(live_tasks["sentiment"])[1]
    path = tmp_path / "later"
    broken = TargetModel(model.id, "later", str(path), model.sha256)
    with pytest.raises(inference.InferenceFailed, match="ArtifactError"):
        inference.predict_with([broken], [{"statement": "Anything."}])
    [kept] = runtime.load_in_background([broken])
    assert kept.done() and kept.exception() is not None  # the failure, answered again without a new load
    with pytest.raises(inference.InferenceFailed, match="ArtifactError"):
        inference.predict_with([broken], [{"statement": "Anything."}])
    shutil.copytree(model.path, path)  # the artifact appears: the next request loads it
    [result] = inference.predict_with([broken], [{"statement": "Anything."}])
    assert result["label"] in ("positive", "negative") and broken.ref() in ml.default_cache()


def test_lower_priority_work_waits_while_a_pass_runs_and_goes_on_when_the_thread_is_idle():
    run = Gated()
    batcher = Batcher(run, window=0.0, max_rows=32)
    assert batcher.wait_until_idle(0.01)  # no thread yet: idle
    first = run.hold(batcher)
    queued = batcher.submit("m", ["next"])
    assert not batcher.wait_until_idle(0.05)  # a pass is running: it gives up after the timeout
    woke = {}
    waiter = threading.Thread(target=lambda: woke.setdefault("idle", batcher.wait_until_idle(10)))
    waiter.start()
    time.sleep(0.05)
    assert "idle" not in woke  # still waiting: the pass is held
    run.gate.set()
    waiter.join(5)
    assert woke == {"idle": True}  # woken once both passes were done
    assert first.result(timeout=5) == ["m:first"] and queued.result(timeout=5) == ["m:next"]


def test_an_explanation_gives_way_before_each_of_its_passes(live_tasks, settings):
    """Each integration pass (EXPLANATION_PASS_STEPS steps) and the prediction's pass
    first calls give_way; the chunked integration gives the unchunked attributions."""
    import ml
    from tasks.targets import open_round_with_models

    [model] = open_round_with_models(live_tasks["sentiment"])[1]
    message = model.message()
    inputs = {"statement": "a warm, funny and moving film"}
    calls = []
    real = runtime.give_way
    settings.EXPLANATION_PASS_STEPS = 5
    try:
        runtime.give_way = lambda: calls.append(time.monotonic()) or real()
        chunked = runtime.explain_ref(message, inputs, None, 20)
    finally:
        runtime.give_way = real
    # Once for the prediction and once before each of the four gradient passes; not
    # before Captum's forwards without gradients (layer values, convergence delta).
    assert len(calls) == 1 + 20 // 5
    whole = ml.explain(runtime.ref(message), inputs, n_steps=20)
    assert [w["text"] for w in chunked["words"]] == [w["text"] for w in whole["words"]]
    for a, b in zip(chunked["words"], whole["words"], strict=True):
        assert a["attribution"] == pytest.approx(b["attribution"], abs=1e-4)


def test_a_qa_explanation_gives_way_once_for_its_windows_and_once_per_gradient_pass(live_tasks, settings):
    """A long passage has several windows: their prediction passes give way once
    together, not once each (a backlog of 200 ms waits per window otherwise)."""
    from tasks.targets import open_round_with_models

    [model] = open_round_with_models(live_tasks["qa"])[1]
    passage = " ".join(f"Sentence {i} says that the river near town {i} floods in spring." for i in range(80))
    calls = []
    real = runtime.give_way
    settings.EXPLANATION_PASS_STEPS = 5
    try:
        runtime.give_way = lambda: calls.append(1) or real()
        explained = runtime.explain_ref(model.message(), {"passage": passage, "question": "Which river?"},
                                                 None, 10)
    finally:
        runtime.give_way = real
    assert explained["passage_window"][0] > 0 or explained["passage_window"][1] < len(passage)  # windows were cut
    assert len(calls) == 1 + 10 // 5


@pytest.mark.django_db
def test_a_full_explanation_lane_refuses_at_once_and_frees_its_places(live_tasks, client_for, annotator, settings):
    """EXPLANATION_QUEUE_MAX explanations waiting or running: one more gets a 503 with
    Retry-After at once (not after INFERENCE_TIMEOUT), nothing is stored, and the
    place frees when the work ahead finishes."""
    from annotation.models import Example

    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    created = client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": "a warm and funny film"},
        "target": {"label": "positive"}}, format="json").json()
    settings.EXPLANATION_QUEUE_MAX = 1
    gate = threading.Event()
    ahead = runtime.ExplanationLane().submit(gate.wait, 30)  # the lane's one place, taken
    try:
        started = time.monotonic()
        refused = client.post(f"/api/examples/{created['id']}/explanation/", {"n_steps": 5}, format="json")
        assert time.monotonic() - started < 5
        assert refused.status_code == 503, refused.content
        assert refused["Retry-After"] == "5"
        assert "explanations are already waiting" in refused.json()["detail"]
        assert refused.json()["code"] == "busy"  # told apart from a timeout (code "unavailable")
        assert "explanation" not in Example.objects.get(pk=created["id"]).metadata
    finally:
        gate.set()
    assert ahead.result(timeout=10) is True
    wait_for_free_places()  # the place frees in the future's done callback, just after its result
    explained = client.post(f"/api/examples/{created['id']}/explanation/", {"n_steps": 5}, format="json")
    assert explained.status_code == 200, explained.content
    assert Example.objects.get(pk=created["id"]).metadata["explanation"]["n_steps"] == 5


def test_an_explanation_that_times_out_gives_its_place_back(settings):
    """A request that stops waiting cancels its explanation if it has not started: the
    place is free again (the lane would otherwise fill up with abandoned work)."""
    settings.EXPLANATION_QUEUE_MAX = 2
    gate = threading.Event()
    lane = runtime.ExplanationLane()
    running = lane.submit(gate.wait, 30)
    queued = lane.submit(gate.wait, 30)
    with pytest.raises(runtime.LaneFull):
        lane.submit(gate.wait, 30)
    assert queued.cancel()  # what _wait does when the request times out
    third = lane.submit(lambda: "ran")  # its place was given back
    gate.set()
    assert running.result(timeout=10) is True and third.result(timeout=10) == "ran"
    wait_for_free_places()


def wait_for_free_places(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while runtime.explanations_waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runtime.explanations_waiting() == 0
