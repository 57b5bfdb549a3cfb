"""The round loop: the round state machine, training data selection, evaluation,
promotion (single and ensemble), failure rollback, and their API."""

import pytest
from django.db import IntegrityError, transaction

from annotation.models import Example
from core.errors import Conflict, InvalidInput
from jobs.models import Job
from leaderboard import promotion, training
from leaderboard.evaluation import has_finished_evaluation, start_evaluation
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import register_model
from tasks import services as task_services
from tasks.models import Round

pytestmark = pytest.mark.django_db

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}
SENTENCES = [("I loved every minute of it.", "positive"), ("A dull, tired mess.", "negative"),
             ("Wonderful staff and great food!", "positive"), ("Never again, awful service.", "negative")]


def add(task, rnd, text, label, split="train", **fields):
    values = {"source": "import", "validation_status": "verified",
              "external_uid": f"{rnd.number}-{split}-{Example.objects.count()}", **fields}
    return Example.objects.create(task=task, round=rnd, split=split, inputs={"statement": text},
                                  target={"label": label}, **values)


@pytest.fixture
def sentiment(demo_tasks):
    return demo_tasks["sentiment"]


@pytest.fixture
def model_a(sentiment, tiny_artifacts):
    return register_model(sentiment, tiny_artifacts["sentiment"], name="model-a")


@pytest.fixture
def model_b(sentiment, other_sentiment_artifact):
    return register_model(sentiment, other_sentiment_artifact, name="model-b")


@pytest.fixture
def jobs(django_capture_on_commit_callbacks):
    """Jobs are sent when their transaction commits; a test's transaction never does,
    so ``with jobs():`` runs what was sent in its block (inline, as tests run jobs)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def evaluated(model, jobs):
    with jobs():
        start_evaluation(model)
    assert has_finished_evaluation(model)
    return model


# --- the state machine -----------------------------------------------------------------


def test_every_round_transition_allowed_and_refused(sentiment, model_a):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    two = task_services.create_round(sentiment)
    assert (two.number, two.status) == (2, Round.Status.DRAFT)

    with pytest.raises(Conflict, match="was never opened"):
        task_services.close_round(two)  # draft -> closed: refused
    with pytest.raises(Conflict, match="no ready target model"):
        task_services.open_round(two)  # draft -> open without a target: refused
    task_services.set_round_targets(two, [model_a])
    task_services.open_round(two)  # draft -> open; the open round closes
    one.refresh_from_db()
    two.refresh_from_db()
    assert (one.status, two.status) == (Round.Status.CLOSED, Round.Status.OPEN)
    assert one.closed_at is not None and two.opened_at is not None
    assert task_services.open_round(two).status == Round.Status.OPEN  # open -> open: nothing changes
    with pytest.raises(Conflict, match="only a draft round's target"):
        task_services.set_round_targets(two, [model_a])  # an open round keeps its target
    with pytest.raises(Conflict, match="not opened again"):
        task_services.open_round(one)  # closed -> open: refused
    task_services.close_round(two)  # open -> closed
    assert task_services.close_round(two).status == Round.Status.CLOSED  # closed -> closed: nothing changes
    assert sentiment.open_round() is None


def test_round_zero_holds_static_data_and_never_opens(sentiment, model_a):
    static = task_services.ensure_static_round(sentiment)
    assert (static.number, static.status, static.is_static) == (0, Round.Status.CLOSED, True)
    assert task_services.ensure_static_round(sentiment) == static
    with pytest.raises(Conflict, match="static data"):
        task_services.open_round(static)
    with pytest.raises(InvalidInput):
        task_services.create_round(sentiment, number=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Round.objects.filter(pk=static.pk).update(status=Round.Status.OPEN)  # the database refuses too


def test_creating_rounds_refuses_taken_numbers_and_foreign_models(demo_tasks, sentiment, tiny_artifacts):
    nli_model = register_model(demo_tasks["nli"], tiny_artifacts["nli"], name="nli-model")
    with pytest.raises(Conflict, match="has a round 1"):
        task_services.create_round(sentiment, number=1)
    with pytest.raises(InvalidInput, match="other tasks"):
        task_services.create_round(sentiment, target_models=[nli_model])
    assert not sentiment.rounds.filter(number=2).exists()


# --- what training learns from ---------------------------------------------------------


def test_training_takes_only_verified_unflagged_unretracted_examples(sentiment, annotator):
    static = task_services.ensure_static_round(sentiment)
    one = sentiment.open_round()
    kept = [add(sentiment, static, "static good", "positive"), add(sentiment, one, "verified", "positive"),
            add(sentiment, one, "verified and fooling", "negative", fooled=True)]
    add(sentiment, static, "static dev", "negative", split="dev")
    add(sentiment, one, "pending", "positive", validation_status="pending")
    add(sentiment, one, "rejected", "positive", validation_status="rejected")
    add(sentiment, one, "flagged status", "positive", validation_status="flagged")
    add(sentiment, one, "flagged", "positive", flagged=True)
    add(sentiment, one, "retracted", "positive", retracted=True)
    add(sentiment, one, "a test example", "positive", split="test")

    rows, summary = training.select_training_rows(sentiment, dev_fraction=0)
    texts = sorted(r["inputs"]["statement"] for r in rows["train"])
    assert texts == sorted(e.inputs["statement"] for e in kept)
    assert [r["inputs"]["statement"] for r in rows["dev"]] == ["static dev"]
    assert summary["counts"] == {"static": {"train": 1, "dev": 1}, "rounds": {"train": 2, "dev": 0}}

    fooling, _ = training.select_training_rows(sentiment, selection="fooling", dev_fraction=0)
    assert sorted(r["inputs"]["statement"] for r in fooling["train"]) == ["static good", "verified and fooling"]
    no_static, _ = training.select_training_rows(sentiment, include_static=False, dev_fraction=0)
    assert sorted(r["inputs"]["statement"] for r in no_static["train"]) == ["verified", "verified and fooling"]


def test_the_dev_hold_out_is_a_fixed_share_by_uid(sentiment):
    one = sentiment.open_round()
    for i in range(200):
        add(sentiment, one, f"sentence {i}", "positive")
    rows, _ = training.select_training_rows(sentiment, dev_fraction=0.2)
    again, _ = training.select_training_rows(sentiment, dev_fraction=0.2)
    assert rows == again
    assert 20 <= len(rows["dev"]) <= 60 and len(rows["train"]) + len(rows["dev"]) == 200
    held = {r["inputs"]["statement"] for r in rows["dev"]}
    assert not held & {r["inputs"]["statement"] for r in rows["train"]}
    other_seed, _ = training.select_training_rows(sentiment, dev_fraction=0.2, seed=1)
    assert {r["inputs"]["statement"] for r in other_seed["dev"]} != held


def test_the_seed_alone_decides_the_partition_not_the_examples_random_uids(sentiment):
    """Examples written afresh (new random uids) from the same source rows split and
    sample the same way under one seed, another way under another seed; a contrastive
    pair (one ``replay_group``) lands on one side."""
    static = task_services.ensure_static_round(sentiment)
    one = sentiment.open_round()

    def write():
        Example.objects.filter(task=sentiment).delete()
        for i in range(60):
            add(sentiment, static, f"static {i}", "positive", external_uid=f"s-{i}")
        for i in range(100):  # written by the replay: no external_uid, the source's id in metadata
            add(sentiment, one, f"one {i}", "negative", external_uid="",
                metadata={"replay_uid": f"r-{i}", "replay_group": f"pair-{i // 2}"})
        uids = set(Example.objects.filter(task=sentiment).values_list("uid", flat=True))
        picks = {}
        for seed in (0, 1):
            rows, _ = training.select_training_rows(sentiment, rounds=[1], rehearse=20, dev_fraction=0.2,
                                                    seed=seed)
            picks[seed] = ({r["inputs"]["statement"] for r in rows["train"]},
                           {r["inputs"]["statement"] for r in rows["dev"]})
        return uids, picks

    first_uids, first = write()
    second_uids, second = write()
    assert not first_uids & second_uids  # every example is new, with a new random uid
    assert first == second  # the same seed: the same dev hold-out and the same rehearsal sample
    assert first[0] != first[1]  # another seed: another partition
    for train, dev in first.values():
        assert dev and not train & dev
        for i in range(0, 100, 2):  # a pair's two sides are both in dev or both out of it
            assert (f"one {i}" in dev) == (f"one {i + 1}" in dev)
    example = Example.objects.filter(task=sentiment, round=one).first()
    assert training.stable_id(example) == example.metadata["replay_uid"]
    assert training.partition_key(example) == example.metadata["replay_group"]
    example.metadata = {}
    assert training.stable_id(example) == training.partition_key(example) == str(example.uid)


def test_a_static_sample_is_fixed_and_bounded(sentiment):
    static = task_services.ensure_static_round(sentiment)
    for i in range(30):
        add(sentiment, static, f"static {i}", "positive")
    rows, summary = training.select_training_rows(sentiment, static_limit=10, dev_fraction=0)
    again, _ = training.select_training_rows(sentiment, static_limit=10, dev_fraction=0)
    assert len(rows["train"]) == 10 and rows == again and summary["static_limit"] == 10


def test_rehearsal_spreads_evenly_over_round_0_and_the_earlier_rounds(sentiment):
    """The cumulative strategy's data: the new round, plus a fixed sample spread evenly over
    round 0 and every round before it, never their held-out dev share nor a later round."""
    static = task_services.ensure_static_round(sentiment)
    one = sentiment.open_round()
    two = task_services.create_round(sentiment, number=2)
    three = task_services.create_round(sentiment, number=3)
    for i in range(40):
        add(sentiment, static, f"static {i}", "positive")
    for i in range(40):
        add(sentiment, one, f"one {i}", "negative")
    for i in range(6):
        add(sentiment, two, f"two {i}", "positive")
    for i in range(12):
        add(sentiment, three, f"three {i}", "negative")
    rows, summary = training.select_training_rows(sentiment, rounds=[3], rehearse=30, dev_fraction=0.2)
    again, _ = training.select_training_rows(sentiment, rounds=[3], rehearse=30, dev_fraction=0.2)
    assert rows == again
    texts = [r["inputs"]["statement"] for r in rows["train"]]
    counts = summary["counts"]["rehearsal"]
    kept_two = [e.inputs["statement"] for e in Example.objects.filter(round=two)
                if not training.held_out(training.partition_key(e), 0.2, 0)]
    # Round 2 has fewer than its share (10): it gives all it has, the rest goes to rounds 0 and 1.
    assert counts["2"] == len(kept_two) and counts["0"] + counts["1"] + counts["2"] == 30
    assert abs(counts["0"] - counts["1"]) <= 1
    assert sum(t.startswith("static") for t in texts) == counts["0"]
    assert sum(t.startswith("one") for t in texts) == counts["1"]
    assert sorted(t for t in texts if t.startswith("two")) == sorted(kept_two)
    held_one = {e.inputs["statement"] for e in Example.objects.filter(round=one)
                if training.held_out(training.partition_key(e), 0.2, 0)}
    assert held_one and not held_one & set(texts)  # an earlier round's dev share stays out of training
    new = [t for t in texts if t.startswith("three")]
    assert len(new) == summary["counts"]["rounds"]["train"] and len(new) + len(rows["dev"]) == 12
    # The first collection round rehearses round 0 only; a bigger sample than there is takes all.
    _, first = training.select_training_rows(sentiment, rounds=[1], rehearse=1000, dev_fraction=0.2)
    assert first["counts"]["rehearsal"] == {"0": 40}
    with pytest.raises(InvalidInput) as caught:
        training.start_training(sentiment, name="x", rounds=[3], rehearse=5, static_limit=5)
    assert "rehearse" in caught.value.errors
    with pytest.raises(InvalidInput):
        training.start_training(sentiment, name="x", rounds=[3], rehearse=-1)
    with pytest.raises(InvalidInput) as caught:
        training.start_training(sentiment, name="x", rounds=[3], backbone=" ")
    assert "backbone" in caught.value.errors
    job = training.start_training(sentiment, name="x", rounds=[3], rehearse=30, backbone="all-MiniLM-L6-v2",
                                  measure=False)
    assert job.params["rehearse"] == 30 and job.params["measure"] is False
    assert job.params["options"]["backbone"] == "all-MiniLM-L6-v2"


def test_rehearsal_sample_shares():
    groups = [list(range(100)), list(range(100, 103)), list(range(200, 250))]
    samples = training.rehearsal_sample(groups, 30, key=lambda x: (x * 7919) % 101)
    assert [len(s) for s in samples] == [14, 3, 13]  # 10 each; round 2's unused 7 go 4 and 3 to the others
    assert all(s == sorted(s) for s in samples)  # each in its group's order
    assert training.rehearsal_sample(groups, 30, key=lambda x: (x * 7919) % 101) == samples
    assert [len(s) for s in training.rehearsal_sample(groups, 1000, key=str)] == [100, 3, 50]
    assert training.rehearsal_sample([[], [1]], 0, key=str) == [[], []]


def test_training_options_and_rounds_are_checked_before_a_job_is_queued(sentiment):
    add(sentiment, sentiment.open_round(), "fine", "positive")
    for options, field in [({"epochs": 0}, "epochs"), ({"lr": -1}, "lr"), ({"batch_size": True}, "batch_size"),
                           ({"rounds": [7]}, "rounds"), ({"selection": "all"}, "selection"),
                           ({"mode": "half"}, "mode"), ({"unknown": 1}, "unknown"), ({"name": " "}, "name"),
                           ({"dev_fraction": 1}, "dev_fraction")]:
        with pytest.raises(InvalidInput) as caught:
            training.start_training(sentiment, **{"name": "x", **options})
        assert field in caught.value.errors, (options, caught.value.errors)
    with pytest.raises(Conflict, match="no usable training examples"):
        training.start_training(sentiment, name="x", selection="fooling")
    assert not Job.objects.exists()


def test_one_training_job_per_task_at_a_time(sentiment):
    add(sentiment, sentiment.open_round(), "fine", "positive")
    first = training.start_training(sentiment, name="first", **TINY)  # queued, not run (nothing commits)
    with pytest.raises(Conflict, match=f"job #{first.pk}"):
        training.start_training(sentiment, name="second", **TINY)
    assert Job.objects.filter(kind=Job.Kind.TRAIN_MODEL).count() == 1


# --- training, failure and rollback ------------------------------------------------------


def test_a_failed_training_leaves_the_round_and_target_untouched(sentiment, model_a, jobs):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    for text, label in SENTENCES * 3:
        add(sentiment, one, text, label)
    add(sentiment, one, "Meh.", "lukewarm")  # a label the task does not have: training fails
    with jobs():
        job = training.start_training(sentiment, name="doomed", dev_fraction=0, **TINY)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "lukewarm" in job.error

    # A failure at registration (here: in the transaction that registers the model)
    # leaves no model row and removes the artifact it had written.
    rows, _ = training.select_training_rows(sentiment, dev_fraction=0)
    rows["train"] = [r for r in rows["train"] if r["label"] != "lukewarm"]

    def refuse(model):
        raise RuntimeError("the job was cancelled while registering")

    with pytest.raises(RuntimeError, match="cancelled while registering"):
        training.train_and_register(sentiment, rows, name="half", training_data={}, on_registered=refuse, **TINY)

    one.refresh_from_db()
    assert one.status == Round.Status.OPEN and list(one.target_models.all()) == [model_a]
    assert sorted(ModelVersion.objects.filter(task=sentiment).values_list("name", flat=True)) == ["model-a"]
    assert not [p for p in model_a.artifact_dir.parent.iterdir() if p.name.startswith(("doomed", "half"))]


@pytest.mark.background_jobs
@pytest.mark.django_db(transaction=True)
def test_a_training_cancelled_while_it_runs_registers_nothing(demo_tasks, tiny_artifacts):
    """The job runs on the embedded background thread; a researcher cancels it from
    another thread while it trains."""
    import time

    from django.db import connection

    from jobs.engine import cancel_job

    if connection.vendor != "postgresql":
        pytest.skip("two threads writing at once are tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI); "
                    "the in-memory SQLite test database locks whole tables")

    sentiment = demo_tasks["sentiment"]
    model_a = register_model(sentiment, tiny_artifacts["sentiment"], name="model-a")
    one = sentiment.open_round()
    one.target_models.add(model_a)
    for text, label in SENTENCES * 10:
        add(sentiment, one, text, label)
    job = training.start_training(sentiment, name="cancelled", dev_fraction=0, max_steps=400, batch_size=4,
                                  epochs=50, evaluate=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status == Job.Status.RUNNING and job.progress >= 2:
            break
        time.sleep(0.05)
    assert job.status == Job.Status.RUNNING, job.error or job.log
    cancel_job(job)
    while job.finished_at is None and time.monotonic() < deadline:
        time.sleep(0.1)
        job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED and job.finished_at is not None and job.progress < 100
    assert "stopped: cancelled" in job.log
    one.refresh_from_db()
    assert one.status == Round.Status.OPEN and list(one.target_models.all()) == [model_a]
    assert list(ModelVersion.objects.filter(task=sentiment).values_list("name", flat=True)) == ["model-a"]
    assert not [p for p in model_a.artifact_dir.parent.iterdir() if p.name.startswith("cancelled")]


def test_train_next_from_the_parent_in_head_only_mode(sentiment, model_a, jobs):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    for text, label in SENTENCES * 3:
        add(sentiment, one, text, label)
        add(sentiment, one, text, label, split="test")
    with jobs():
        job = training.start_training(sentiment, name="child", parent=model_a, mode="head", dev_fraction=0, **TINY)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    child = ModelVersion.objects.get(name="child")
    assert child.parent == model_a
    assert child.metrics["hyperparameters"]["freeze_encoder"] is True
    assert child.training_data["selection"] == "verified" and child.training_data["rounds"] == [1]
    assert has_finished_evaluation(child)  # queued when it was registered
    assert Evaluation.objects.get(model_version=child, round=one).num_examples == 12


# --- promotion -----------------------------------------------------------------------------


def test_promote_a_single_model(sentiment, model_a, model_b, jobs):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    add(sentiment, one, "A test sentence.", "positive", split="test")
    with pytest.raises(Conflict, match="no finished evaluation"):
        promotion.promote(sentiment, model_b)
    assert sentiment.open_round() == one
    evaluated(model_b, jobs)
    import ml
    from registry.services import target_model

    ml.default_cache().clear()
    two = promotion.promote(sentiment, model_b)
    one.refresh_from_db()
    assert (two.number, two.status, one.status) == (2, Round.Status.OPEN, Round.Status.CLOSED)
    assert list(two.target_models.all()) == [model_b] and two.ensemble_mode == Round.EnsembleMode.SINGLE
    assert target_model(model_b).ref() in ml.default_cache()  # loaded before it became the target


def test_promote_an_ensemble_of_the_last_targets(sentiment, model_a, model_b, jobs):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    add(sentiment, one, "A test sentence.", "positive", split="test")
    evaluated(model_b, jobs)
    with pytest.raises(Conflict, match="no finished evaluation"):
        promotion.promote(sentiment, model_b, ensemble_size=2)  # model_a, the earlier target, was never evaluated
    evaluated(model_a, jobs)
    with pytest.raises(Conflict, match="needs 2 earlier target"):
        promotion.promote(sentiment, model_b, ensemble_size=3)
    with pytest.raises(InvalidInput):
        promotion.promote(sentiment, model_b, ensemble_size=9)
    two = promotion.promote(sentiment, model_b, ensemble_size=2)
    assert sorted(m.name for m in two.target_models.all()) == ["model-a", "model-b"]
    assert two.ensemble_mode == Round.EnsembleMode.MEAN

    from annotation.inference import predict_with
    from tasks.targets import round_target_models

    [answer] = predict_with(round_target_models(two), [{"statement": "Lovely."}])
    assert sorted(answer["members"]) == sorted(str(m.pk) for m in (model_a, model_b))


def test_promote_opens_a_prepared_draft_round(sentiment, model_a, model_b, jobs):
    sentiment.open_round().target_models.add(model_a)
    prepared = task_services.create_round(sentiment, description="contexts uploaded")
    add(sentiment, prepared, "A test sentence.", "positive", split="test")
    evaluated(model_b, jobs)
    assert promotion.promote(sentiment, model_b) == prepared
    prepared.refresh_from_db()
    assert prepared.status == Round.Status.OPEN and prepared.description == "contexts uploaded"


def test_promote_refuses_a_tampered_artifact(sentiment, model_a, model_b, tmp_path, jobs):
    import shutil

    sentiment.open_round().target_models.add(model_a)
    add(sentiment, sentiment.open_round(), "A test sentence.", "positive", split="test")
    copy = tmp_path / "copy"
    shutil.copytree(model_b.artifact_dir, copy)
    ModelVersion.objects.filter(pk=model_b.pk).update(artifact_path=str(copy))
    model_b.refresh_from_db()
    evaluated(model_b, jobs)
    with open(copy / "model.safetensors", "r+b") as fh:
        fh.seek(-8, 2)
        fh.write(b"\x00" * 8)
    with pytest.raises(Conflict, match="does not check"):
        promotion.promote(sentiment, model_b)
    assert sentiment.open_round().number == 1


# --- the API ---------------------------------------------------------------------------------


def test_round_lifecycle_api(sentiment, model_a, researcher, annotator, other_researcher, client_for, anonymous):
    sentiment.open_round().target_models.add(model_a)
    base = "/api/tasks/sentiment/rounds/"
    assert anonymous.post(base, {}, format="json").status_code in (401, 403)
    assert client_for(annotator).post(base, {}, format="json").status_code == 403
    assert client_for(other_researcher).post(base, {}, format="json").status_code == 403
    owner = client_for(researcher)
    created = owner.post(base, {"description": "<b>next</b>"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["number"] == 2 and created.json()["status"] == "draft"
    assert owner.post(base, {"number": 2}, format="json").status_code == 409
    assert owner.post(base, {"number": 0}, format="json").status_code == 400
    assert owner.post(base, {"status": "open"}, format="json").json()["status"] == "draft"  # status is read-only
    assert owner.post(f"{base}2/open/").status_code == 409  # no target yet
    assert owner.post(f"{base}2/targets/", {"target_models": [model_a.pk + 1000]}, format="json").status_code == 400
    assert owner.post(f"{base}2/targets/", {"target_models": [model_a.pk]}, format="json").status_code == 200
    assert client_for(annotator).post(f"{base}2/open/").status_code == 403
    opened = owner.post(f"{base}2/open/")
    assert opened.status_code == 200 and opened.json()["status"] == "open"
    assert owner.get(f"{base}1/").json()["status"] == "closed"
    assert owner.post(f"{base}1/open/").status_code == 409
    assert owner.post(f"{base}9/open/").status_code == 404
    assert owner.post(f"{base}2/close/").json()["status"] == "closed"


def test_train_evaluate_promote_api(sentiment, model_a, researcher, annotator, client_for, jobs):
    one = sentiment.open_round()
    one.target_models.add(model_a)
    for text, label in SENTENCES * 3:
        add(sentiment, one, text, label)
    add(sentiment, one, "A test sentence.", "positive", split="test")
    owner = client_for(researcher)
    assert client_for(annotator).post("/api/tasks/sentiment/train-next/", {}, format="json").status_code == 403
    bad = owner.post("/api/tasks/sentiment/train-next/", {"epochs": 0, "selection": "all"}, format="json")
    assert bad.status_code == 400 and {"epochs", "selection"} <= set(bad.json()["errors"])
    with jobs():
        started = owner.post("/api/tasks/sentiment/train-next/",
                             {"name": "api-model", "mode": "head", "from_parent": True, **TINY}, format="json")
    assert started.status_code == 202, started.content
    job = owner.get(f"/api/jobs/{started.json()['id']}/").json()
    assert job["status"] == "succeeded" and job["progress"] == 100 and "training on" in job["log"]
    assert job["queue_position"] is None and job["kind"] == "train_model"
    model = ModelVersion.objects.get(name="api-model")
    assert model.parent == model_a
    detail = owner.get(f"/api/models/{model.pk}/").json()
    assert detail["evaluated"] is True and detail["evaluations"][0]["round"] == 1
    assert client_for(annotator).get(f"/api/models/{model.pk}/").status_code == 404
    assert owner.post("/api/tasks/sentiment/promote/", {"model": model.pk, "ensemble_size": 0},
                      format="json").status_code == 400
    assert owner.post("/api/tasks/sentiment/promote/", {"model": model.pk + 999}, format="json").status_code == 400
    with jobs():
        assert owner.post(f"/api/models/{model.pk}/evaluate/").status_code == 202
    promoted = owner.post("/api/tasks/sentiment/promote/", {"model": model.pk}, format="json")
    assert promoted.status_code == 201 and promoted.json()["number"] == 2
    assert promoted.json()["target_models"] == ["api-model"]
    listed = owner.get("/api/tasks/sentiment/models/").json()["results"]
    assert [m["name"] for m in listed][:2] == ["api-model", "model-a"]
    listed_jobs = owner.get("/api/tasks/sentiment/jobs/").json()["results"]
    assert {j["kind"] for j in listed_jobs} == {"train_model", "evaluate_model"}
    assert client_for(annotator).get("/api/tasks/sentiment/jobs/").status_code == 403


def test_train_next_from_a_parent_needs_a_target_everywhere(sentiment, researcher, client_for):
    add(sentiment, sentiment.open_round(), "fine", "positive")
    owner = client_for(researcher)
    response = owner.post("/api/tasks/sentiment/train-next/", {"from_parent": True}, format="json")
    assert response.status_code == 400 and "from_parent" in response.json()["errors"]
    page = owner.post("/tasks/sentiment/loop/", {"action": "train", "from_parent": "on"}, follow=True)
    assert b"no target model to start from" in page.content
    assert not Job.objects.exists()


def test_a_model_below_the_majority_answer_is_promoted_only_with_the_override(
        sentiment, model_a, model_b, researcher, client_for, jobs):
    """A target worse than always answering the commonest label makes nearly every example
    "fool" it: the service refuses it (API 409, page message) unless told otherwise."""
    one = sentiment.open_round()
    one.target_models.add(model_a)
    static = task_services.ensure_static_round(sentiment)
    for i in range(9):
        add(sentiment, static, f"Lovely thing number {i}.", "positive")
    add(sentiment, static, "Awful.", "negative")
    add(sentiment, static, "A test sentence.", "positive", split="test")
    evaluated(model_b, jobs)
    # Whatever the tiny model scored, the stored score below is what the board reads.
    Evaluation.objects.filter(model_version=model_b, round=static).update(
        metrics={"accuracy": 0.0, "model_error_rate": 1.0}, intervals={"accuracy": [0.0, 0.0]})

    api = client_for(researcher)
    refused = api.post("/api/tasks/sentiment/promote/", {"model": model_b.pk}, format="json")
    assert refused.status_code == 409
    assert refused.json()["code"] == "not_above_majority"
    assert ("model-b scores 0.0% [0.0%, 0.0%] accuracy on the static test set (1 examples), against 100.0% for "
            "always answering the most common label") in refused.json()["detail"]
    assert sentiment.open_round() == one
    page = client_for(researcher).post("/tasks/sentiment/loop/", {"action": "promote", "model": model_b.pk,
                                                                  "confirm": "yes"}, follow=True)
    assert "against 100.0% for always answering the most common label" in page.content.decode()
    assert sentiment.open_round() == one

    accepted = api.post("/api/tasks/sentiment/promote/", {"model": model_b.pk, "allow_below_baseline": True,
                                                          "reason": "a test"}, format="json")
    assert accepted.status_code == 201, accepted.content
    assert [m.pk for m in sentiment.open_round().target_models.all()] == [model_b.pk]
