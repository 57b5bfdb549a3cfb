"""``make run`` with real data present: real-data targets train after the seed ones and
replace them only when they score higher on the same test examples (leaderboard.demo,
``promotion.compare_with_target``).

The "real" files here are SST-2-shaped files the test writes, so the tests run wherever
the suite runs; ``fetch_data`` puts the real ones in the same places.
"""

import random

import pytest
from django.utils.html import escape

from jobs.models import Job
from leaderboard import demo, promotion
from leaderboard.evaluation import start_evaluation
from leaderboard.jobs import wait_for_success
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from tasks.models import Round, Task

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}
WORDS = {"positive": ["great", "lovely", "moving", "superb", "charming"],
         "negative": ["awful", "dull", "clumsy", "tedious", "bland"]}


def write_sst2(folder, rows_per_split: int = 24):
    rng = random.Random(7)
    for name in ("train_full", "dev", "test-labeled"):
        lines = ["sentence\tlabel"]
        for i in range(rows_per_split):
            label = "positive" if i % 2 else "negative"
            lines.append(f"a {rng.choice(WORDS[label])} film number {name}-{i} .\t{1 if label == 'positive' else 0}")
        path = folder / "sst2" / f"{name}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.django_db(transaction=True)
def test_real_data_targets_follow_the_seed_ones_and_replace_them_only_when_better(tmp_path, settings):
    from jobs.engine import resume_queued_jobs

    write_sst2(tmp_path)
    settings.JOBS_RUN_INLINE = False  # as under `make run`: the command leaves the jobs for the server
    demo.bootstrap_demo(slugs=["sentiment", "hate"], train_options=TINY, background=True, real_data=True,
                        data_dir=tmp_path, real_data_limit=20)
    # one training job per task at a time: the real-data job follows the seed one
    seed_job = Job.objects.get(task__slug="sentiment", kind=Job.Kind.TRAIN_MODEL, status=Job.Status.QUEUED)
    assert seed_job.params["name"] == "round0-seed" and seed_job.params["then_train"]["name"] == "round0-real"
    # hate speech has no files here (no davidson/): it keeps its seed job alone
    hate_job = Job.objects.get(task__slug="hate", kind=Job.Kind.TRAIN_MODEL)
    assert "then_train" not in hate_job.params
    # running the command again changes nothing
    demo.bootstrap_demo(slugs=["sentiment", "hate"], train_options=TINY, background=True, real_data=True,
                        data_dir=tmp_path, real_data_limit=20)
    assert Job.objects.count() == 2

    settings.JOBS_RUN_INLINE = True  # the web process's job thread, here in the test's thread
    resume_queued_jobs()
    task = Task.objects.get(slug="sentiment")
    order = [(j.kind, j.params.get("name") or ModelVersion.objects.get(pk=j.params["model_version"]).name)
             for j in Job.objects.filter(task=task).order_by("started_at")]
    assert order == [("train_model", "round0-seed"), ("evaluate_model", "round0-seed"),
                     ("train_model", "round0-real"), ("evaluate_model", "round0-real")], order
    assert not Job.objects.exclude(status=Job.Status.SUCCEEDED).exists(), list(Job.objects.values("kind", "error"))

    seed, real = (ModelVersion.objects.get(task=task, name=name) for name in ("round0-seed", "round0-real"))
    real_job = Job.objects.get(kind=Job.Kind.TRAIN_MODEL, params__name="round0-real")
    assert "round 0 <- SST-2 train, dev and labelled test: 60 rows imported" in real_job.log
    static = Round.objects.get(task=task, number=0)
    imported = task.examples.filter(round=static).exclude(external_uid__startswith="seed-")  # beside the seed set
    assert {split: imported.filter(split=split).count() for split in ("train", "dev", "test")} == \
        {"train": 20, "dev": 20, "test": 20}

    # both scored on the same round-0 test examples, the seed target again after the import
    mine = Evaluation.objects.get(model_version=real, round=static, split="test")
    theirs = Evaluation.objects.get(model_version=seed, round=static, split="test")
    assert mine.num_examples == theirs.num_examples == static.examples.filter(split="test").count()
    evaluation = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=real.pk)
    decision = evaluation.result["promotion"]
    from leaderboard.board import forget, target_scores

    forget(task.pk)
    majority = target_scores(task, [real])[0]["baseline"]  # the majority line on the same examples
    # The promotion rule: higher than the target, and its interval strictly above the majority line.
    better = mine.metrics["accuracy"] > theirs.metrics["accuracy"] and mine.intervals["accuracy"][0] > majority
    assert decision["promote"] is better, decision
    assert f"{mine.metrics['accuracy']:.1%} against the target's {theirs.metrics['accuracy']:.1%}" in \
        decision["reason"]
    assert f"always answering the most common label: {majority:.1%}" in decision["reason"]
    first = Round.objects.get(task=task, number=1)
    if better:  # round 1 had the seed target: a promotion opens round 2 with the real one
        assert first.status == Round.Status.CLOSED
        assert list(Round.objects.get(task=task, number=2).target_models.all()) == [real]
    else:
        assert first.status == Round.Status.OPEN and list(first.target_models.all()) == [seed]


def write_squad(folder, articles: int = 10):
    """A SQuAD-shaped file: articles of a few paragraphs, each question answered by a
    span of its paragraph (``answer_start`` exact)."""
    import json

    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(2):
            place, year = f"Town{a}x{p}", 1900 + 7 * a + p
            context = f"The bridge of {place} was built in {year} by a company of engineers from the coast."
            qas = [{"id": f"{a}-{p}-when", "question": f"When was the bridge of {place} built?",
                    "answers": [{"text": str(year), "answer_start": context.index(str(year))}]},
                   {"id": f"{a}-{p}-who", "question": f"Who built the bridge of {place}?",
                    "answers": [{"text": "a company of engineers",
                                 "answer_start": context.index("a company of engineers")}]}]
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"Article_{a}", "paragraphs": paragraphs})
    path = folder / "squad" / "dev-v1.1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "1.1", "data": data}))


@pytest.mark.django_db(transaction=True)
def test_make_runs_qa_target_trains_on_squad_under_its_time_budget_and_must_clear_the_line(tmp_path, settings):
    """With SQuAD in the data folder, QA's real-data job follows its seed model's: it
    imports every question split by article, trains with the QA recipe under the
    budget of DYNABENCH_QA_TRAINING_MINUTES, and replaces the seed target only if it
    scores higher AND its interval clears the sliding-window line (a two-step model
    does not: the reason says so)."""
    from jobs.engine import resume_queued_jobs

    write_squad(tmp_path)
    settings.JOBS_RUN_INLINE = False
    settings.DYNABENCH_QA_TRAINING_MINUTES = 7
    demo.bootstrap_demo(slugs=["qa"], train_options=TINY, background=True, real_data=True, data_dir=tmp_path)
    seed_job = Job.objects.get(task__slug="qa", kind=Job.Kind.TRAIN_MODEL, status=Job.Status.QUEUED)
    spec = seed_job.params["then_train"]
    assert spec["name"] == "round0-real" and spec["promote_if_better"] is True
    assert spec["import_data"]["format"] == "squad" and spec["import_data"]["limit"] is None  # every question
    assert {key: spec[key] for key in ("lr", "max_minutes")} == {"lr": demo.QA_TRAINING["lr"], "max_minutes": 7}

    settings.JOBS_RUN_INLINE = True
    resume_queued_jobs()
    assert not Job.objects.exclude(status=Job.Status.SUCCEEDED).exists(), list(Job.objects.values("kind", "error"))
    task = Task.objects.get(slug="qa")
    real = ModelVersion.objects.get(task=task, name="round0-real")
    assert real.metrics["hyperparameters"]["max_minutes"] == 7
    static = Round.objects.get(task=task, number=0)
    imported = static.examples.exclude(external_uid__startswith="seed-")
    assert imported.count() == 40  # 10 articles x 2 paragraphs x 2 questions, none twice
    splits = {}
    for example in imported.select_related("context"):  # an article lies in one split
        splits.setdefault(example.context.fields["title"], set()).add(example.split)
    assert len(splits) == 10 and all(len(found) == 1 for found in splits.values()), splits
    decision = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=real.pk).result["promotion"]
    assert decision["promote"] is False, decision
    assert "sliding-window" in decision["reason"] or "reference" in decision["reason"], decision
    assert [m.name for m in task.open_round().target_models.all()] == ["round0-seed"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("score", "promoted"), [(1.0, True), (0.0, False), ("under the majority line", False)])
def test_a_candidate_replaces_the_target_only_if_it_scores_higher(demo_tasks, live_tasks, score, promoted):
    """The rule itself: the candidate's stored round-0 score against the target's, which
    is scored again on the same examples, and against always answering the most common
    label. A candidate at 100% wins; one at 0%, or just under the majority line, does not."""
    from jobs.engine import JobReporter, create_job
    from leaderboard.board import target_scores

    task = live_tasks["sentiment"]
    demo.import_seed_examples(task)
    target = task.open_round().target_models.get()
    candidate = ModelVersion.objects.create(task=task, name="candidate", artifact_path=target.artifact_path,
                                            sha256=target.sha256, status=ModelVersion.Status.READY)
    static = Round.objects.get(task=task, number=0)
    n = static.examples.filter(split="test").count()
    majority = target_scores(task, [target])[0]["baseline"]
    if score == "under the majority line":
        score = majority - 0.001
    Evaluation.objects.create(model_version=candidate, round=static, split="test", num_examples=n,
                              metrics={"accuracy": score}, intervals={"accuracy": [score - 0.01, score]},
                              model_error_rate=1 - score)
    job = create_job(Job.Kind.EVALUATE_MODEL, params={"model_version": candidate.pk}, task=task)
    reporter = JobReporter(job.pk)

    decision = promotion.compare_with_target(candidate, reporter, job)

    assert decision["promote"] is promoted, decision
    assert ("below the majority line" in decision["reason"]) is (score < majority)
    rescored = Evaluation.objects.get(model_version=target, round=static, split="test")
    assert rescored.num_examples == n and rescored.job_id == job.pk
    job.refresh_from_db()
    assert decision["reason"] in job.log


@pytest.mark.django_db(transaction=True)
def test_the_task_page_says_a_real_data_model_is_on_its_way_and_then_what_was_decided(tmp_path, settings, client):
    from jobs.engine import resume_queued_jobs

    write_sst2(tmp_path)
    settings.JOBS_RUN_INLINE = False
    demo.bootstrap_demo(slugs=["sentiment"], train_options=TINY, background=True, real_data=True,
                        data_dir=tmp_path, real_data_limit=20)
    page = client.get("/tasks/sentiment/").content.decode()
    assert "a model is trained on real data: it becomes the target if it scores higher" in page
    assert 'href="/jobs/' not in page  # job pages are for signed-in researchers

    settings.JOBS_RUN_INLINE = True
    resume_queued_jobs()
    page = client.get("/tasks/sentiment/").content.decode()
    assert "trained on real data" not in page
    reason = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, result__has_key="promotion").result["promotion"]["reason"]
    assert f"Last comparison: {escape(reason)}." in page
    target = Round.objects.filter(task__slug="sentiment", status=Round.Status.OPEN).get().target_models.get()
    assert f"<strong>{target.name}</strong>" in page  # which target is live, with its score


@pytest.mark.django_db(transaction=True)
def test_a_score_from_a_smaller_static_test_set_is_not_set_beside_todays_majority_line(tmp_path, client):
    """Between a real-data import and the target's next evaluation, the target's score
    counts fewer examples than the majority line would: the page says so instead of
    comparing them, and promotion waits for a new evaluation."""
    from core.errors import Conflict
    from leaderboard import board
    from leaderboard.static_data import Source, import_static_data, read_static_data

    demo.bootstrap_demo(slugs=["sentiment"], train_options=TINY)
    task = Task.objects.get(slug="sentiment")
    seed = task.open_round().target_models.get()
    [before] = board.target_scores(task, [seed])
    assert before["grown_to"] is None and before["baseline"] is not None

    write_sst2(tmp_path)
    data = read_static_data("sst2", [Source(tmp_path / "sst2/test-labeled.tsv", "test")],
                            labels=task.parsed_config.label_names)
    assert import_static_data(task, data).created == 24
    board.forget(task.pk)
    [after] = board.target_scores(task, [seed])
    assert after["grown_to"] == before["num_examples"] + 24 and after["baseline"] is None
    page = client.get("/tasks/sentiment/").content.decode()
    assert f"the static test set has grown to {after['grown_to']} examples since" in page
    with pytest.raises(Conflict, match="Evaluate it again first"):
        promotion.check_above_baseline(task, seed)

    wait_for_success(start_evaluation(seed), "evaluate", lambda line: None)
    [again] = board.target_scores(task, [seed])
    assert again["grown_to"] is None and again["num_examples"] == after["grown_to"]
    assert again["baseline"] is not None
