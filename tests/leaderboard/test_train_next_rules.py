"""Train next: with no new usable examples it is refused (409
``no_new_examples``, nothing queued) unless asked for, and the page says so first; the
next model follows the seed model's recipe unless the researcher changes it, and the
job page shows that recipe. The evaluation job page shows its result, and after a
promotion the task page compares against the new target, not the one before.

Jobs are queued, not run (no ``django_capture_on_commit_callbacks``): what is checked
is what was queued, with which options.
"""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse
from django.utils import timezone

from annotation.models import Example
from jobs.models import Job
from leaderboard import cycle, promotion
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import register_model
from tasks import services as task_services

pytestmark = pytest.mark.django_db

SEED_RECIPE = {"epochs": 6, "batch_size": 8, "lr": 1e-4, "seed": 0, "max_steps": None, "weight_decay": 0.01}


def example(task, rnd, split, label, uid):
    return Example.objects.create(task=task, round=rnd, split=split, source="import", validation_status="verified",
                                  external_uid=uid, inputs={"statement": f"Sentence {uid}."},
                                  target={"label": label})


@pytest.fixture
def setup(demo_tasks, tiny_artifact):
    """Sentiment: round 0 with train examples, round 1 open with the seed model as its
    target (trained here on the recipe above, on round 0 only), no collected examples."""
    task = demo_tasks["sentiment"]
    static = task_services.ensure_static_round(task)
    for i, label in enumerate(["positive", "negative"] * 3):
        example(task, static, "train", label, f"tr-{i}")
    seed = register_model(task, tiny_artifact("sentiment"), name="round0-seed")
    ModelVersion.objects.filter(pk=seed.pk).update(
        metrics={**seed.metrics, "hyperparameters": SEED_RECIPE},
        training_data={"rounds": [], "counts": {"static": {"train": 6, "dev": 0}, "rounds": {"train": 0, "dev": 0}}})
    task.open_round().target_models.add(seed)
    return task, static, ModelVersion.objects.get(pk=seed.pk)


# --- no new usable examples ------------------------------------------------------------------


def test_the_api_refuses_train_next_with_no_new_examples_and_queues_nothing(setup, researcher, client_for):
    task, static, seed = setup
    api = client_for(researcher)
    refused = api.post("/api/tasks/sentiment/train-next/", {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "no_new_examples"
    assert "no new usable examples" in refused.json()["detail"]
    assert "today's target round0-seed learned from 0 of them" in refused.json()["detail"]
    assert not Job.objects.exists()
    not_a_bool = api.post("/api/tasks/sentiment/train-next/", {"allow_no_new_examples": "sure"}, format="json")
    assert not_a_bool.status_code == 400 and not Job.objects.exists()

    accepted = api.post("/api/tasks/sentiment/train-next/", {"allow_no_new_examples": True}, format="json")
    assert accepted.status_code == 202, accepted.content
    assert Job.objects.get().kind == Job.Kind.TRAIN_MODEL


def test_a_new_verified_example_lets_train_next_through_and_one_the_target_learned_does_not(setup, researcher,
                                                                                             client_for):
    task, static, seed = setup
    example(task, task.open_round(), "train", "positive", "r1-0")
    assert cycle.new_examples(task) == {"available": 1, "learned": 0, "new": 1, "target": "round0-seed"}
    # A target that learned from that one example: nothing new again.
    ModelVersion.objects.filter(pk=seed.pk).update(training_data={"counts": {"rounds": {"train": 1, "dev": 0}}})
    assert cycle.new_examples(task)["new"] == 0
    api = client_for(researcher)
    assert api.post("/api/tasks/sentiment/train-next/", {}, format="json").status_code == 409
    example(task, task.open_round(), "train", "negative", "r1-1")
    assert api.post("/api/tasks/sentiment/train-next/", {}, format="json").status_code == 202


def test_the_page_says_so_before_queueing_and_refuses_without_the_box(setup, researcher, client):
    task, static, seed = setup
    client.force_login(researcher)
    page = client.get(reverse("task-detail", args=[task.slug])).content.decode()
    assert 'id="no-new-examples"' in page and 'name="allow_no_new_examples"' in page
    assert "today's target round0-seed learned from 0" in page
    action = reverse("task-action", args=[task.slug])
    refused = client.post(action, {"action": "train", "selection": "verified", "mode": "full"}, follow=True)
    assert "no new usable examples" in " ".join(str(m) for m in refused.context["messages"])
    assert not Job.objects.exists()
    queued = client.post(action, {"action": "train", "selection": "verified", "mode": "full",
                                  "allow_no_new_examples": "on"})
    job = Job.objects.get()
    assert queued.status_code == 302 and queued["Location"] == job.get_absolute_url()

    example(task, task.open_round(), "train", "positive", "r1-0")
    assert 'id="no-new-examples"' not in client.get(reverse("task-detail", args=[task.slug])).content.decode()


def test_the_admin_train_next_refuses_without_the_box(setup, researcher, client):
    task, static, seed = setup
    client.force_login(researcher)
    url = reverse("admin:tasks_task_changelist")
    selected = {"action": "train_next_model", ACTION_CHECKBOX_NAME: [task.pk]}
    form = client.post(url, selected).content.decode()
    assert "No new usable examples" in form
    response = client.post(url, {**selected, "apply": "1", "selection": "verified", "mode": "full"}, follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert "no new usable examples" in message and not Job.objects.exists()
    client.post(url, {**selected, "apply": "1", "selection": "verified", "mode": "full",
                      "allow_no_new_examples": "on"})
    assert Job.objects.count() == 1


# --- the recipe ---------------------------------------------------------------------------


@pytest.fixture
def no_step_cap(settings):
    settings.TRAINING_MAX_STEPS = None  # a deployment's cap would join every job's options


def test_the_next_model_follows_the_seed_recipe_unless_changed(setup, researcher, no_step_cap):
    task, static, seed = setup
    job = cycle.train_next(task, allow_no_new_examples=True, user=researcher)
    assert job.params["options"] == {"epochs": 6, "batch_size": 8, "lr": 1e-4, "seed": 0}
    assert job.params["recipe"] == {"from": "round0-seed", "changed": []}
    Job.objects.all().delete()

    changed = cycle.train_next(task, allow_no_new_examples=True, epochs=2, user=researcher)
    assert changed.params["options"] == {"epochs": 2, "batch_size": 8, "lr": 1e-4, "seed": 0}
    assert changed.params["recipe"] == {"from": "round0-seed", "changed": ["epochs"]}


def test_without_a_seed_model_the_library_defaults_stand(setup, researcher, no_step_cap):
    task, static, seed = setup
    ModelVersion.objects.filter(pk=seed.pk).update(metrics={})  # no training record: nothing to follow
    assert cycle.seed_recipe(task) == ({}, None)
    job = cycle.train_next(task, allow_no_new_examples=True, user=researcher)
    assert job.params["options"] == {} and job.params["recipe"] == {"from": None, "changed": []}


def test_the_job_page_shows_the_recipe(setup, researcher, client, no_step_cap):
    task, static, seed = setup
    job = cycle.train_next(task, allow_no_new_examples=True, epochs=2, user=researcher)
    client.force_login(researcher)
    content = client.get(job.get_absolute_url()).content.decode()
    assert "<h2 id=\"recipe-h\">Recipe</h2>" in content
    assert "epochs 2, batch size 8, lr 0.0001, seed 0; full fine-tuning." in content
    assert "The seed model round0-seed's recipe, with epochs set for this job." in content


# --- the evaluation job's result, and the task page after a promotion ------------------------------


def _evaluation_job(model, status=Job.Status.SUCCEEDED, **result):
    return Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=model.task, status=status,
                              params={"model_version": model.pk, "rounds": None, "split": "test"},
                              result=result, finished_at=timezone.now() if status == Job.Status.SUCCEEDED else None)


def test_the_evaluation_job_page_shows_its_result(setup, researcher, client):
    task, static, seed = setup
    running = _evaluation_job(seed, status=Job.Status.RUNNING)
    client.force_login(researcher)
    assert 'id="result-h"' not in client.get(running.get_absolute_url()).content.decode()

    job = _evaluation_job(seed)
    for i, label in enumerate(["positive", "negative"]):
        example(task, static, "test", label, f"te-{i}")
    Evaluation.objects.create(model_version=seed, round=static, split="test", num_examples=2, job=job,
                              metrics={"accuracy": 0.5}, intervals={"accuracy": [0.0, 1.0]}, model_error_rate=0.5)
    content = client.get(job.get_absolute_url()).content.decode()
    assert 'id="result-h"' in content
    assert "0.500 [0.000, 1.000]</td><td>2</td><td>0.500</td>" in content


def test_after_a_promotion_the_task_page_compares_against_the_new_target(setup, researcher, client, tiny_artifact):
    """An automatic comparison made against the seed target ("the target stays") is not
    shown once a researcher has promoted another model: it names the target of then."""
    task, static, seed = setup
    for i, label in enumerate(["positive", "positive", "negative"]):
        example(task, static, "test", label, f"te-{i}")
    ids = list(static.examples.filter(split="test").order_by("pk").values_list("pk", flat=True))
    real = register_model(task, tiny_artifact("sentiment"), name="round0-real")
    _evaluation_job(real, promotion={"promote": False, "reason": "round0-real 40.0% against the target's 66.7%"})
    candidate = register_model(task, tiny_artifact("sentiment"), name="r2-verified")
    for model, per_example in ((seed, [1.0, 0.0, 0.0]), (candidate, [1.0, 1.0, 1.0])):
        Evaluation.objects.create(model_version=model, round=static, split="test", num_examples=3,
                                  metrics={"accuracy": sum(per_example) / 3}, intervals={"accuracy": [0.9, 1.0]},
                                  example_ids=ids, per_example=per_example)
        _evaluation_job(model)
    client.force_login(researcher)
    before = client.get(reverse("task-detail", args=[task.slug]))
    assert "Last comparison: round0-real 40.0% against the target&#x27;s 66.7%." in before.content.decode()

    promotion.promote(task, candidate, user=researcher)
    after = client.get(reverse("task-detail", args=[task.slug]))
    content = after.content.decode()
    assert [t["model"] for t in after.context["target_scores"]] == [candidate]
    assert after.context["targets"] == [candidate] and after.context["comparison"].models[0] == candidate
    assert "r2-verified <small>(target)</small>" in content and "round0-seed <small>(target)</small>" not in content
    assert "Last comparison:" not in content
