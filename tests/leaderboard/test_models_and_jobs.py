"""Training, registration and evaluation through Jobs (embedded mode), and the demo models."""

import json
import shutil
import time

import pytest
from django.core.exceptions import ValidationError

from annotation.inference import predict_with
from annotation.models import Example
from core.errors import Conflict
from jobs.models import Job
from leaderboard import training
from leaderboard.evaluation import has_finished_evaluation, start_evaluation
from leaderboard.jobs import run_training_job
from leaderboard.models import Evaluation
from leaderboard.rows import read_seed_rows, untampered
from registry.models import ModelVersion
from registry.services import models_root, register_model
from tasks.models import Round
from tasks.targets import round_target_models

pytestmark = pytest.mark.django_db

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}


def add_examples(task, rnd, rows, split):
    for i, (text, label) in enumerate(rows):
        Example.objects.create(task=task, round=rnd, split=split, source="import", validation_status="verified",
                               external_uid=f"{split}-{rnd.number}-{i}",
                               inputs={"statement": text}, target={"label": label})


SENTENCES = [("I loved every minute of it.", "positive"), ("A dull, tired mess.", "negative"),
             ("Wonderful staff and great food!", "positive"), ("Never again, awful service.", "negative")] * 3


def test_training_job_registers_a_verified_model_and_scores_it(demo_tasks, researcher,
                                                               django_capture_on_commit_callbacks):
    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    add_examples(task, rnd, SENTENCES, "train")
    add_examples(task, rnd, SENTENCES[:4], "dev")
    add_examples(task, rnd, SENTENCES[4:8], "test")
    with django_capture_on_commit_callbacks(execute=True):
        job = training.start_training(task, name="r1-tiny", user=researcher, dev_fraction=0, **TINY)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.progress == 100 and "training on 12 train, 4 dev" in job.log  # never on test examples
    model = ModelVersion.objects.get(task=task, name="r1-tiny")
    assert job.result["model_version"] == model.pk
    assert model.artifact_dir.is_dir() and len(model.sha256) == 64
    assert model.training_data["train"] == {"count": 12, "labels": {"negative": 6, "positive": 6}}
    assert list(model.trained_on_rounds.all()) == [rnd]
    # Its evaluation was queued when it was registered (and ran: jobs run inline in tests).
    first = Evaluation.objects.get(model_version=model, round=rnd)
    assert first.num_examples == 4 and 0 <= first.model_error_rate <= 1
    assert has_finished_evaluation(model)

    # Rerunning the finished job is a no-op; a second model with the same name is refused.
    run_training_job(job.pk)
    assert ModelVersion.objects.filter(task=task).count() == 1
    with pytest.raises(Conflict, match="already has a model named"):
        training.start_training(task, name="r1-tiny")

    # Evaluation per round with progress, through its own job.
    second = Round.objects.create(task=task, number=2)
    add_examples(task, second, SENTENCES[:6], "test")
    with django_capture_on_commit_callbacks(execute=True):
        eval_job = start_evaluation(model)
    eval_job.refresh_from_db()
    assert eval_job.status == Job.Status.SUCCEEDED, eval_job.error
    evaluations = {e.round.number: e for e in Evaluation.objects.filter(model_version=model)}
    assert evaluations[1].num_examples == 4 and evaluations[2].num_examples == 6
    accuracy = evaluations[2].metrics["accuracy"]
    assert evaluations[2].model_error_rate == pytest.approx(1 - accuracy)
    assert "round 2: 6 test examples" in eval_job.log


def test_a_failed_training_job_leaves_no_model(demo_tasks, django_capture_on_commit_callbacks):
    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    Example.objects.create(task=task, round=rnd, split="train", inputs={"statement": "fine"}, source="import",
                           external_uid="bad-1", validation_status="verified",
                           target={"label": "lukewarm"})  # not in the task's label set
    with django_capture_on_commit_callbacks(execute=True):
        job = training.start_training(task, name="broken", dev_fraction=0, **TINY)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert "lukewarm" in job.error
    assert not ModelVersion.objects.filter(task=task).exists()
    leftovers = [p.name for p in models_root().glob("sentiment/*") if "broken" in p.name]
    assert leftovers == []


def test_register_refuses_a_tampered_artifact(demo_tasks):
    task = demo_tasks["hate"]
    rows = read_seed_rows("hate")
    model = training.train_and_register(task, {"train": rows["train"][:8]}, name="m",
                                        training_data={}, **TINY)
    copy_dir = model.artifact_dir.parent / "tampered"
    shutil.copytree(model.artifact_dir, copy_dir)
    meta = json.loads((copy_dir / "metadata.json").read_text())
    with open(copy_dir / "model.safetensors", "r+b") as fh:
        fh.seek(-16, 2)
        fh.write(b"\x00" * 16)

    import ml

    info = ml.ArtifactInfo(path=copy_dir, sha256=meta["sha256"], metadata=meta)
    with pytest.raises(ml.ArtifactError, match="model.safetensors"):
        register_model(task, info, name="tampered")
    assert not ModelVersion.objects.filter(name="tampered").exists()

    # The wrong task's artifact is refused too.
    with pytest.raises(ValidationError, match="not for task sentiment"):
        register_model(demo_tasks["sentiment"], ml.verify_artifact(model.artifact_dir), name="x")


@pytest.mark.django_db(transaction=True)
def test_bootstrap_demo_leaves_four_working_target_models_on_four_boards(client):
    """A fresh demo: the seed splits in round 0, a seed model per task trained on its
    train split, evaluated on its test split, round 1's target and ranked on the board."""
    from leaderboard.demo import bootstrap_demo
    from leaderboard.rows import read_seed_rows

    report = bootstrap_demo(train_options=TINY)
    assert len(report.models_trained) == 4
    for slug in ("nli", "qa", "sentiment", "hate"):
        seed = read_seed_rows(slug)
        static = Round.objects.get(task__slug=slug, number=0)
        for split in ("train", "dev", "test"):
            assert Example.objects.filter(round=static, split=split).count() == len(seed[split]) > 0, (slug, split)
        assert report.examples_imported[slug] == sum(len(rows) for rows in seed.values())
        model = ModelVersion.objects.get(task__slug=slug, name="round0-seed")
        assert has_finished_evaluation(model)
        assert Evaluation.objects.get(model_version=model, round=static).num_examples == len(seed["test"])
        board = client.get(f"/api/tasks/{slug}/leaderboard/").json()
        page = " ".join(client.get(f"/tasks/{slug}/").content.decode().split())
        metric = "f1" if slug == "qa" else "accuracy"
        assert f"<strong>round0-seed</strong>: {metric} " in page
        assert f"on the static test set ({len(seed['test'])} examples; 95% interval " in page
        if slug != "qa":
            assert "for always answering the most common label" in page
        else:
            assert "for the sliding-window baseline" in page
        names = sorted(row["model"]["name"] for row in board["rows"])
        reference = "majority-class baseline" if slug != "qa" else "sliding-window baseline"
        assert names == sorted([reference, "round0-seed"]), board
    inputs = {
        "nli": {"premise": "A man plays a guitar on stage.", "hypothesis": "Someone makes music."},
        "qa": {"passage": "The bridge opened in 1932 after six years of work.",
               "question": "When did the bridge open?"},
        "sentiment": {"statement": "What a delightful little café 😍"},
        "hate": {"statement": "Everyone deserves respect."},
    }
    for slug, row in inputs.items():
        rnd = Round.objects.get(task__slug=slug, number=1)
        assert rnd.target_models.count() == 1
        [result] = predict_with(round_target_models(rnd), [row])
        if slug == "qa":
            assert row["passage"][result["start"]:result["end"]] == result["answer"]
        else:
            labels = rnd.task.parsed_config.label_names
            assert result["label"] in labels
            assert set(result["probabilities"]) == set(labels)
            assert sum(result["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    # A second run trains and imports nothing.
    again = bootstrap_demo(train_options=TINY)
    assert again.models_trained == [] and not again.created_anything
    assert ModelVersion.objects.count() == 4
    assert Example.objects.filter(round__number=0).count() == sum(report.examples_imported.values())


@pytest.mark.django_db(transaction=True)
def test_bootstrap_demo_in_the_background_queues_jobs_that_a_web_process_runs(settings):
    """`make run`: the command returns at once with the jobs queued; the web process
    resumes them (jobs.engine.resume_queued_jobs), and each model becomes round 1's target."""
    from jobs.engine import resume_queued_jobs
    from leaderboard.demo import bootstrap_demo

    settings.JOBS_RUN_INLINE = False  # as under `make run`: jobs would go to this process's background thread
    report = bootstrap_demo(slugs=["sentiment", "hate"], train_options=TINY, background=True)
    assert report.models_trained == []
    queued = Job.objects.filter(kind=Job.Kind.TRAIN_MODEL, status=Job.Status.QUEUED)
    assert sorted(queued.values_list("task__slug", flat=True)) == ["hate", "sentiment"]
    time.sleep(1)  # had the command's process started them, they would be running (and die with it)
    assert queued.count() == 2 and not Job.objects.exclude(status=Job.Status.QUEUED).exists()
    assert not Round.objects.get(task__slug="sentiment", number=1).target_models.exists()
    # Running it again queues nothing twice.
    bootstrap_demo(slugs=["sentiment", "hate"], train_options=TINY, background=True)
    assert queued.count() == 2

    settings.JOBS_RUN_INLINE = True  # the web process's job thread, here in the test's thread
    assert len(resume_queued_jobs()) == 2
    for slug in ("sentiment", "hate"):
        model = ModelVersion.objects.get(task__slug=slug, name="round0-seed")
        assert [m.pk for m in Round.objects.get(task__slug=slug, number=1).target_models.all()] == [model.pk]
        assert Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=model.pk).status == "succeeded"
    assert not Job.objects.filter(status__in=Job.ACTIVE).exists()


@pytest.mark.background_jobs
@pytest.mark.django_db(transaction=True)
def test_on_the_background_thread_a_models_evaluation_follows_its_training_at_once(demo_tasks):
    """`make run` queues four trainings; each model's evaluation (queued by its training job)
    runs next, not after the other trainings, so the first target is ready in one training's time."""
    from jobs.engine import resume_queued_jobs, wait_for_background_jobs
    from leaderboard.demo import bootstrap_demo

    bootstrap_demo(slugs=["sentiment", "hate"], train_options=TINY, background=True)
    assert len(resume_queued_jobs()) == 2  # on this process's background job thread
    # Wait on the thread, not by reading the jobs table while it writes: the in-memory
    # SQLite test database fails a read and a write that meet ("database table is locked").
    assert wait_for_background_jobs(300), "the background jobs did not finish in 300 s"
    assert Job.objects.count() == 4
    order = [(job.kind, job.task.slug) for job in Job.objects.order_by("started_at")]
    assert order == [("train_model", "sentiment"), ("evaluate_model", "sentiment"),
                     ("train_model", "hate"), ("evaluate_model", "hate")], order
    assert not Job.objects.exclude(status=Job.Status.SUCCEEDED).exists()
    assert Round.objects.get(task__slug="sentiment", number=1).target_models.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_job_left_running_by_a_stopped_server_runs_again_when_the_next_one_starts(demo_tasks, settings):
    """Ctrl-C during `make run`'s first minutes: the training job stays "running" in the
    database. The next web process finds it silent, queues it again and runs it."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.engine import claim, resume_queued_jobs
    from leaderboard.demo import bootstrap_demo

    bootstrap_demo(slugs=["sentiment"], train_options=TINY, background=True)
    job = Job.objects.get(kind=Job.Kind.TRAIN_MODEL)
    assert claim(job.pk) == 1  # the stopped process had started it ...
    Job.objects.filter(pk=job.pk).update(progress=7, heartbeat_at=timezone.now() - timedelta(minutes=5))
    fresh = Job.objects.create(kind=Job.Kind.HEALTH_CHECK, status=Job.Status.RUNNING, celery_task_name="x",
                               heartbeat_at=timezone.now())  # ... and another process beats: left alone
    settings.JOBS_RUN_INLINE = True
    assert resume_queued_jobs() == [job.pk]
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED and job.attempts == 2, job.log
    assert "queued again" in job.log
    fresh.refresh_from_db()
    assert fresh.status == Job.Status.RUNNING
    model = ModelVersion.objects.get(task__slug="sentiment", name="round0-seed")
    assert list(Round.objects.get(task__slug="sentiment", number=1).target_models.all()) == [model]


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_with_no_test_examples_fails_and_says_so(demo_tasks, tiny_artifacts):
    task = demo_tasks["sentiment"]
    model = register_model(task, tiny_artifacts["sentiment"], name="nothing-to-score")
    job = start_evaluation(model)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    # A refusal with its reason (a domain error), not a crash: the message alone, no traceback
    assert job.error.startswith("No usable test examples in round(s) 1 of task sentiment"), job.error
    assert "import_dataset --round 0 --split test" in job.error and "Traceback" not in job.error
    assert not has_finished_evaluation(model)


def test_written_examples_whose_signature_fails_are_left_out_of_training(demo_tasks, annotator):
    """An example edited after the model answered (its label, its text or ``fooled``)
    no longer matches its signature: training and evaluation leave it out."""
    from annotation.examples import example_signature

    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    written = []
    for text, label in SENTENCES[:3]:
        example = Example(task=task, round=rnd, split="train", annotator=annotator, inputs={"statement": text},
                          target={"label": label}, prediction={"label": label, "probabilities": {}},
                          model_predictions={}, fooled=False)
        example.signature = example_signature(example)
        example.save()
        written.append(example)
    add_examples(task, rnd, SENTENCES[3:5], "train")  # imported: no signature, kept
    Example.objects.filter(pk=written[1].pk).update(target={"label": "negative" if SENTENCES[1][1] == "positive"
                                                             else "positive"})
    Example.objects.filter(pk=written[2].pk).update(fooled=True)
    Example.objects.filter(task=task).update(validation_status="verified")
    kept = untampered(training.training_examples(task))
    assert [e.pk for e in kept if e.source == "annotation"] == [written[0].pk]
    assert sum(e.source == "import" for e in kept) == 2
