"""The promotion rules, through the service, the API, the admin
action and the task page: a candidate whose static-test interval does not lie strictly
above the majority line, or that scores below today's target on the same examples, is
promoted only with the override AND a stated reason, which is recorded on the round.

The scores are stored evaluations (no model is scored here): what the rules read is
what a finished evaluation job leaves, so each case sets exactly the numbers it tests.
Round 0's training labels are 9 positive, 1 negative (the majority answer: positive);
its 4 test examples are 3 positive, 1 negative, so the majority line is 0.75.
"""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from annotation.models import Example
from core.errors import Conflict
from jobs.models import Job
from leaderboard import promotion
from leaderboard.models import Evaluation, Promotion
from registry.services import register_model
from tasks import services as task_services
from tasks.models import Round

pytestmark = pytest.mark.django_db

TEST_LABELS = ["positive", "positive", "positive", "negative"]


def _example(task, rnd, split, label, uid):
    return Example.objects.create(task=task, round=rnd, split=split, source="import", validation_status="verified",
                                  external_uid=uid, inputs={"statement": f"Sentence {uid}."},
                                  target={"label": label})


def score(model, static, per_example, interval, *, ids=None):
    """A finished evaluation of ``model``: ``per_example`` on round 0's test examples
    (``ids``: which of them, all by default), its interval as given."""
    ids = ids if ids is not None else list(static.examples.filter(split="test").order_by("pk")
                                           .values_list("pk", flat=True))
    value = sum(per_example) / len(per_example)
    Evaluation.objects.update_or_create(model_version=model, round=static, split="test", defaults={
        "num_examples": len(ids), "metrics": {"accuracy": value}, "intervals": {"accuracy": list(interval)},
        "example_ids": ids, "per_example": per_example, "model_error_rate": 1 - value})
    Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=model.task, status=Job.Status.SUCCEEDED,
                       params={"model_version": model.pk, "rounds": None, "split": "test"})
    return model


@pytest.fixture
def setup(demo_tasks, tiny_artifact):
    """The sentiment task: round 0 with train and test examples, round 1 open with
    ``target`` (1.0 on the test set, evaluated) and a ready ``candidate`` (not yet)."""
    task = demo_tasks["sentiment"]
    static = task_services.ensure_static_round(task)
    for i in range(9):
        _example(task, static, "train", "positive", f"tr-{i}")
    _example(task, static, "train", "negative", "tr-9")
    for i, label in enumerate(TEST_LABELS):
        _example(task, static, "test", label, f"te-{i}")
    artifact = tiny_artifact("sentiment")
    target = register_model(task, artifact, name="the-target")
    task.open_round().target_models.add(target)
    score(target, static, [1.0, 1.0, 1.0, 0.0], (0.5, 1.0))
    candidate = register_model(task, artifact, name="the-candidate")
    return task, static, target, candidate


def checks_of(task, candidate):
    return promotion.promotion_checks(task, candidate)


# --- the service -----------------------------------------------------------------------------


def test_the_majority_line_is_0_75_and_a_clear_better_candidate_is_promoted_without_override(setup, researcher):
    task, static, target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 1.0], (0.8, 1.0))
    checks = checks_of(task, candidate)
    assert checks["majority"] == 0.75 and checks["problems"] == []
    assert checks["targets"][0]["shared"] == {"candidate": 1.0, "target": 0.75, "shared": 4, "same_set": True}
    rnd = promotion.promote(task, candidate, user=researcher)
    assert rnd.number == 2 and list(rnd.target_models.all()) == [candidate]
    record = Promotion.objects.get(round=rnd)
    assert (record.model_version, record.overridden, record.reason, record.user) == (candidate, False, "", researcher)
    assert record.checks["candidate"]["interval"] == [0.8, 1.0] and record.checks["majority"] == 0.75


@pytest.mark.parametrize("low", [0.75, 0.6])
def test_an_interval_at_or_below_the_majority_line_is_refused(setup, low):
    """Equal is not better: an interval whose low end is the majority line does not clear it."""
    task, static, target, candidate = setup
    score(target, static, [1.0, 0.0, 0.0, 0.0], (0.0, 0.75))  # the target is no obstacle here
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (low, 1.0))
    with pytest.raises(Conflict) as refused:
        promotion.promote(task, candidate)
    assert refused.value.code == "not_above_majority"
    message = refused.value.message
    assert f"the-candidate scores 75.0% [{low:.1%}, 100.0%] accuracy" in message
    assert "against 75.0% for always answering the most common label" in message
    assert "allow_below_baseline" in message
    assert task.open_round().number == 1 and not Promotion.objects.exists()


def test_a_candidate_below_todays_target_on_the_same_examples_is_refused(setup):
    task, static, target, candidate = setup
    score(target, static, [1.0, 1.0, 1.0, 1.0], (0.9, 1.0))
    score(candidate, static, [1.0, 1.0, 1.0, 1.0], (0.8, 1.0))  # level with the target: allowed
    assert checks_of(task, candidate)["problems"] == []
    score(candidate, static, [0.0, 1.0, 1.0, 1.0], (0.8, 1.0))  # 0.75 < 1.0 on the same 4
    with pytest.raises(Conflict) as refused:
        promotion.promote(task, candidate)
    assert refused.value.code == "below_target"
    assert ("the-candidate scores 75.0% accuracy against 100.0% for today's target the-target on the same 4 "
            "static test examples") in refused.value.message
    assert task.open_round().number == 1


def test_the_target_is_compared_on_the_examples_both_were_scored_on(setup):
    """The target scored on 2 of the 4 examples (before an import, say): both are compared there."""
    task, static, target, candidate = setup
    ids = list(static.examples.filter(split="test").order_by("pk").values_list("pk", flat=True))
    score(target, static, [1.0, 1.0], (0.5, 1.0), ids=ids[:2])
    score(candidate, static, [0.0, 1.0, 1.0, 1.0], (0.8, 1.0))
    [target_row] = checks_of(task, candidate)["targets"]
    assert target_row["shared"] == {"candidate": 0.5, "target": 1.0, "shared": 2, "same_set": False}
    assert [p["code"] for p in checks_of(task, candidate)["problems"]] == ["below_target"]


def test_a_target_without_a_score_on_the_static_test_set_cannot_be_compared(setup):
    task, static, target, candidate = setup
    Evaluation.objects.filter(model_version=target).delete()
    score(candidate, static, [1.0, 1.0, 1.0, 1.0], (0.8, 1.0))
    with pytest.raises(Conflict) as refused:
        promotion.promote(task, candidate)
    assert refused.value.code == "target_not_comparable"
    assert "evaluate the-target again first" in refused.value.message


@pytest.mark.parametrize("reason", ["", "   \n "])
def test_the_override_without_a_stated_reason_is_refused(setup, reason):
    task, static, target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.5, 1.0))
    with pytest.raises(Conflict, match="stated reason"):
        promotion.promote(task, candidate, allow_below_baseline=True, reason=reason)
    with pytest.raises(Conflict):
        promotion.promote(task, candidate, reason="a reason, but no override")
    assert task.open_round().number == 1 and not Promotion.objects.exists()


def test_the_override_with_a_reason_promotes_and_records_it_on_the_round(setup, researcher):
    task, static, target, candidate = setup
    score(target, static, [1.0, 1.0, 1.0, 1.0], (0.9, 1.0))
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.5, 1.0))
    rnd = promotion.promote(task, candidate, allow_below_baseline=True, reason="  a smoke test of round 2  ",
                            user=researcher)
    record = rnd.promotions.get()
    assert record.overridden is True and record.reason == "a smoke test of round 2"
    assert [p["code"] for p in record.checks["problems"]] == ["not_above_majority", "below_target"]
    assert "rules overridden: a smoke test of round 2" in Round.objects.get(pk=rnd.pk).description


# --- the API --------------------------------------------------------------------------------


def test_the_api_answers_409_naming_both_scores_until_override_and_reason(setup, researcher, client_for):
    task, static, target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.5, 1.0))
    api = client_for(researcher)
    url = "/api/tasks/sentiment/promote/"
    for body in ({"model": candidate.pk}, {"model": candidate.pk, "allow_below_baseline": True},
                 {"model": candidate.pk, "allow_below_baseline": True, "reason": "  "},
                 {"model": candidate.pk, "reason": "because"}):
        refused = api.post(url, body, format="json")
        assert refused.status_code == 409, body
        assert refused.json()["code"] == "not_above_majority"
        detail = refused.json()["detail"]
        assert "the-candidate scores 75.0% [50.0%, 100.0%] accuracy" in detail
        assert "75.0% for always answering the most common label" in detail
        assert "against 100.0% for today's target the-target on the same 4" not in detail  # 75% vs 75%: not below
    assert task.open_round().number == 1
    accepted = api.post(url, {"model": candidate.pk, "allow_below_baseline": True, "reason": "pilot"}, format="json")
    assert accepted.status_code == 201, accepted.content
    assert Promotion.objects.get().reason == "pilot" and Promotion.objects.get().user == researcher


def test_the_api_says_below_target(setup, researcher, client_for):
    task, static, target, candidate = setup
    score(target, static, [1.0, 1.0, 1.0, 1.0], (0.9, 1.0))
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.8, 1.0))  # clears 0.75, below the target's 1.0
    refused = client_for(researcher).post("/api/tasks/sentiment/promote/", {"model": candidate.pk}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "below_target"
    assert "75.0% accuracy against 100.0% for today's target the-target" in refused.json()["detail"]


# --- the admin ------------------------------------------------------------------------------


def test_the_admin_promote_action_refuses_and_the_override_asks_for_a_reason(setup, researcher, client):
    task, static, target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.5, 1.0))
    client.force_login(researcher)
    url = reverse("admin:registry_modelversion_changelist")
    response = client.post(url, {"action": "promote_1", ACTION_CHECKBOX_NAME: [candidate.pk]}, follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert "does not lie above it" in message and "the-candidate scores 75.0% [50.0%, 100.0%]" in message
    assert task.open_round().number == 1

    selected = {"action": "promote_1_below_baseline", ACTION_CHECKBOX_NAME: [candidate.pk]}
    form = client.post(url, selected)
    content = form.content.decode()
    assert form.status_code == 200 and 'name="reason"' in content
    assert "the-target <small>(today's target)</small>" in content and "not_above_majority" in content
    blank = client.post(url, {**selected, "apply": "1", "ensemble_size": 1, "reason": "   "})
    assert blank.status_code == 200 and "This field is required." in blank.content.decode()
    assert task.open_round().number == 1 and not Promotion.objects.exists()

    done = client.post(url, {**selected, "apply": "1", "ensemble_size": 1, "reason": "checking the pipeline"},
                       follow=True)
    assert [str(m) for m in done.context["messages"]] == ["Promoted; the next round is open: 1."]
    record = Promotion.objects.get()
    assert record.overridden and record.reason == "checking the pipeline" and record.round.number == 2


# --- the page -------------------------------------------------------------------------------


def test_the_page_asks_for_confirmation_showing_both_scores_and_the_majority_line(setup, researcher, client):
    task, static, target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.55, 0.95))
    client.force_login(researcher)
    action = reverse("task-action", args=[task.slug])
    confirm = reverse("promote-confirm", args=[task.slug, candidate.pk])
    first = client.post(action, {"action": "promote", "model": candidate.pk})
    assert first.status_code == 302 and first["Location"] == f"{confirm}?ensemble_size=1"
    assert task.open_round().number == 1  # nothing promoted before the confirmation

    page = client.get(first["Location"])
    content = page.content.decode()
    assert "Promote the-candidate?" in content
    assert "0.750 [0.550, 0.950]" in content  # the candidate, with its interval
    assert "the-target <small>(today's target)</small>" in content and "0.750 [0.500, 1.000]" in content
    assert "Majority line" in content and 'name="reason"' in content and 'name="confirm" value="yes"' in content

    refused = client.post(action, {"action": "promote", "model": candidate.pk, "confirm": "yes"}, follow=True)
    assert refused.redirect_chain[-1][0] == f"{confirm}?ensemble_size=1"
    assert "does not lie above it" in " ".join(str(m) for m in refused.context["messages"])
    no_reason = client.post(action, {"action": "promote", "model": candidate.pk, "confirm": "yes",
                                     "allow_below_baseline": "on", "reason": ""}, follow=True)
    assert "stated reason" in " ".join(str(m) for m in no_reason.context["messages"])
    assert task.open_round().number == 1

    done = client.post(action, {"action": "promote", "model": candidate.pk, "confirm": "yes",
                                "allow_below_baseline": "on", "reason": "demo"}, follow=True)
    assert "Round 2 is open with the-candidate as its target." in [str(m) for m in done.context["messages"]]
    assert Promotion.objects.get().reason == "demo"


def test_the_confirmation_page_is_for_the_tasks_researchers(setup, client, annotator):
    task, static, target, candidate = setup
    client.force_login(annotator)
    assert client.get(reverse("promote-confirm", args=[task.slug, candidate.pk])).status_code == 403


def test_the_promotion_log_is_read_only_and_shown_to_the_tasks_researchers_only(setup, researcher, other_researcher,
                                                                               client):
    task, static, _target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.8, 1.0))
    promotion.promote(task, candidate, user=researcher)
    url = reverse("admin:leaderboard_promotion_changelist")
    client.force_login(researcher)
    assert "the-candidate" in client.get(url).content.decode()
    row = Promotion.objects.get()
    assert client.get(reverse("admin:leaderboard_promotion_add")).status_code == 403
    change = reverse("admin:leaderboard_promotion_change", args=[row.pk])
    assert client.post(change, {"reason": "rewritten"}).status_code in (302, 403)
    assert Promotion.objects.get().reason == row.reason
    client.force_login(other_researcher)  # a researcher of other tasks: none of this task's rows
    assert "the-candidate" not in client.get(url).content.decode()
    assert client.get(reverse("admin:leaderboard_promotion_change", args=[row.pk])).status_code in (302, 404)
