"""A writing batch pays for fooling the round's target, so the target must clear the
task's reference line: the sliding-window baseline for QA, the
majority-class answer for classification. Otherwise publishing is refused, unless a
superuser overrides the rule with a reason, which the batch records.

The QA task's static test set is tests/leaderboard/test_qa_reference.py's two
questions (the line: F1 0.75); the targets are registry rows with stored evaluations
(nothing loads a model here)."""

import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from annotation.models import Example
from core.errors import Forbidden
from crowd import publishing
from crowd.models import Batch
from crowd.publishing import BatchRequest, TargetBelowReference
from tasks import services as task_services
from tests.crowd.test_crowd_admin import PUBLISH
from tests.leaderboard.test_qa_reference import add_static_test_set, registry_row, score

pytestmark = pytest.mark.django_db

MTURK_ASKED = ("GetAccountBalance", "CreateHITType", "CreateHITWithHITType", "CreateHIT")


def request(task, **overrides) -> BatchRequest:
    values = dict(task=task, mode="create", hits=2, assignments_per_hit=1, reward=Decimal("0.50"),
                  bonus_per_example=Decimal("0.25"), examples_per_assignment=2)
    values.update(overrides)
    return BatchRequest(**values)


def asked(fake) -> int:
    return sum(fake.count(op) for op in MTURK_ASKED)


@pytest.fixture
def qa(demo_tasks):
    """The QA task: round 0's two test questions, round 1 open with ``target`` (F1 0.25 [0, 0.5]: below 0.75)."""
    task = demo_tasks["qa"]
    static = add_static_test_set(task)
    target = score(registry_row(task, "qa-target"), static, [0.0, 0.5], (0.0, 0.5))
    task.open_round().target_models.add(target)
    return task, static, target


def test_a_writing_batch_on_a_target_below_the_sliding_window_line_is_refused(qa, crowd, researcher):
    task, _, _ = qa
    with pytest.raises(TargetBelowReference) as refused:
        publishing.publish(request(task), user=researcher)
    assert refused.value.code == "target_below_reference"
    message = refused.value.message
    assert ("Round 1's target qa-target scores 25.0% [0.0%, 50.0%] f1 on the static test set (2 examples), "
            "against 75.0% for the sliding-window baseline") in message
    assert "A superuser may publish it anyway with the override (allow_below_reference)" in message
    assert [p["code"] for p in refused.value.checks["problems"]] == ["not_above_reference"]
    assert not Batch.objects.exists() and asked(crowd) == 0  # refused before MTurk is asked anything


def test_only_a_superuser_with_a_reason_overrides_and_the_batch_records_it(qa, crowd, researcher, superuser):
    task, _, _ = qa
    with pytest.raises(Forbidden, match="Only a superuser"):
        publishing.publish(request(task, allow_below_reference=True, override_reason="please"), user=researcher)
    with pytest.raises(TargetBelowReference, match="needs a stated reason"):
        publishing.publish(request(task, allow_below_reference=True, override_reason="   "), user=superuser)
    with pytest.raises(TargetBelowReference):  # a reason without the override is no override
        publishing.publish(request(task, override_reason="a reason"), user=superuser)
    assert not Batch.objects.exists() and asked(crowd) == 0
    batch = publishing.publish(request(task, allow_below_reference=True, override_reason="  sandbox pilot  "),
                               user=superuser)
    assert batch.status == Batch.Status.PUBLISHED and len(crowd.hits) == 2
    assert batch.reference_override_reason == "sandbox pilot" and batch.reference_overridden_by == superuser
    assert batch.reference_checks["reference"]["value"] == 0.75
    assert [p["code"] for p in batch.reference_checks["problems"]] == ["not_above_reference"]


def test_a_target_clear_of_the_line_publishes_without_override(qa, crowd, researcher):
    task, static, target = qa
    score(target, static, [1.0, 1.0], (0.8, 1.0))
    batch = publishing.publish(request(task), user=researcher)
    assert batch.status == Batch.Status.PUBLISHED
    assert batch.reference_checks["problems"] == [] and batch.reference_override_reason == ""
    assert batch.reference_checks["targets"][0]["clears"] is True


def test_a_validation_batch_is_not_held_to_the_rule(qa, crowd, researcher):
    """Validators judge examples already written, for no bonus: no target is fooled there."""
    task, _, _ = qa
    batch = publishing.publish(request(task, mode="validate", bonus_per_example=Decimal("0")), user=researcher)
    assert batch.status == Batch.Status.PUBLISHED and batch.reference_checks == {}


def test_a_target_not_scored_on_the_static_test_set_cannot_show_it_clears_the_line(qa, crowd, researcher):
    task, static, target = qa
    target.evaluations.all().delete()
    with pytest.raises(TargetBelowReference) as refused:
        publishing.publish(request(task), user=researcher)
    assert [p["code"] for p in refused.value.checks["problems"]] == ["target_not_evaluated"]
    assert "qa-target has no f1 on the static test set" in refused.value.message


def test_a_task_without_a_static_test_set_is_not_held_to_the_rule(demo_tasks, crowd, researcher):
    task = demo_tasks["qa"]
    task.open_round().target_models.add(registry_row(task, "qa-target"))
    assert publishing.publish(request(task), user=researcher).status == Batch.Status.PUBLISHED


def test_a_classification_target_at_the_majority_line_is_refused(demo_tasks, crowd, researcher):
    """Sentiment: training labels 3 positive, 1 negative; test 3 positive, 1 negative: the line is 0.75."""
    task = demo_tasks["sentiment"]
    static = task_services.ensure_static_round(task)
    for i, (split, label) in enumerate([("train", "positive")] * 3 + [("train", "negative")]
                                       + [("test", "positive")] * 3 + [("test", "negative")]):
        Example.objects.create(task=task, round=static, split=split, source="import", validation_status="verified",
                               external_uid=f"s-{i}", inputs={"statement": f"Sentence {i}."}, target={"label": label})
    target = registry_row(task, "sentiment-target")
    ids = list(static.examples.filter(split="test").order_by("pk").values_list("pk", flat=True))
    from jobs.models import Job
    from leaderboard.models import Evaluation

    Evaluation.objects.create(model_version=target, round=static, split="test", num_examples=4,
                              metrics={"accuracy": 0.75}, intervals={"accuracy": [0.75, 1.0]}, example_ids=ids,
                              per_example=[1.0, 1.0, 1.0, 0.0], model_error_rate=0.25)
    Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=task, status=Job.Status.SUCCEEDED,
                       params={"model_version": target.pk, "rounds": None, "split": "test"})
    task.open_round().target_models.add(target)
    with pytest.raises(TargetBelowReference) as refused:
        publishing.publish(request(task), user=researcher)
    assert [p["code"] for p in refused.value.checks["problems"]] == ["not_above_majority"]
    assert "against 75.0% for always answering the most common label" in refused.value.message
    Evaluation.objects.filter(model_version=target).update(intervals={"accuracy": [0.76, 1.0]})
    assert publishing.publish(request(task), user=researcher).status == Batch.Status.PUBLISHED


def test_approval_checks_the_rule_again(qa, crowd, researcher, superuser, settings):
    """A large batch waits for approval; its target falls below the line meanwhile: approval refuses."""
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("1.00")
    task, static, target = qa
    score(target, static, [1.0, 1.0], (0.8, 1.0))
    waiting = publishing.publish(request(task), user=researcher)
    assert waiting.status == Batch.Status.AWAITING_APPROVAL
    score(target, static, [0.0, 0.5], (0.0, 0.5))
    with pytest.raises(TargetBelowReference, match=f"Cancel batch {waiting.pk} and publish it again"):
        publishing.approve(waiting, superuser)
    waiting.refresh_from_db()
    assert waiting.status == Batch.Status.AWAITING_APPROVAL and crowd.count("CreateHITType") == 0


def test_the_publish_form_shows_the_rule_and_offers_the_override_to_superusers_only(qa, crowd, client, researcher,
                                                                                     superuser):
    task, _, _ = qa
    client.force_login(researcher)
    page = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert 'id="publish-targets"' in page and "<code>not_above_reference</code>" in page
    assert 'name="allow_below_reference"' not in page
    refused = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk,
                                                                 "allow_below_reference": "on",
                                                                 "override_reason": "mine"})
    assert refused.status_code == 200 and "the sliding-window baseline" in refused.content.decode()
    assert not Batch.objects.exists()  # the researcher's override fields are not even read

    client.force_login(superuser)
    page = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert 'name="allow_below_reference"' in page and 'name="override_reason"' in page
    no_reason = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk,
                                                                   "allow_below_reference": "on"})
    assert "needs a stated reason" in no_reason.content.decode() and not Batch.objects.exists()
    done = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk,
                                                              "allow_below_reference": "on",
                                                              "override_reason": "piloting the HIT"})
    batch = Batch.objects.get()
    assert done.status_code == 302 and batch.reference_override_reason == "piloting the HIT"
    assert batch.reference_overridden_by == superuser
    detail = client.get(reverse("admin:crowd_batch_change", args=[batch.pk])).content.decode()
    assert "piloting the HIT" in detail


def test_the_command_refuses_and_overrides_with_a_reason(qa, crowd):
    task, _, _ = qa
    arguments = ["mturk_publish", "--task", "qa", "--mode", "create", "--hits", "1", "--assignments", "1",
                 "--reward", "0.50", "--bonus", "0.25", "--yes"]
    with pytest.raises(CommandError, match="the sliding-window baseline"):
        call_command(*arguments, stdout=io.StringIO(), stderr=io.StringIO())
    out = io.StringIO()
    call_command(*arguments, "--override-reference", "checking the HIT page", stdout=out, stderr=io.StringIO())
    batch = Batch.objects.get(pk=int(out.getvalue()))
    assert batch.reference_override_reason == "checking the HIT page" and batch.reference_overridden_by is None
