"""What an endpoint model may spend outside rounds, and one explanation per account.

Evaluations and health checks are counted outside any round (``EndpointUsage`` with
round None) against the endpoint's ``evaluation_budget``, which only a superuser
sets: once it is spent, the health check and a new evaluation are refused before any
call, and an evaluation that runs out part way fails its job with the reason and
leaves the stored evaluations as they were. The rounds' budgets are separate: a spent
evaluation budget does not stop annotators. An endpoint model's "Why?" takes the
account's one explanation slot, as a local model's does."""

from decimal import Decimal

import pytest
from django.conf import settings

from annotation.models import Example
from core import slots
from core.errors import Forbidden
from jobs.models import Job
from leaderboard.evaluation import evaluate_model, start_evaluation
from leaderboard.models import Evaluation
from registry import endpoint_budgets, endpoints
from registry.models import Endpoint, EndpointUsage
from tasks.models import Round
from tests.registry.test_endpoints import chat, chat_model, sentiment, target, write  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def per_call(model, price="0.01"):
    """A price per call only: what an evaluation costs is then its number of calls."""
    Endpoint.objects.filter(model_version=model).update(price_per_call=Decimal(price), price_per_1k_prompt_tokens=None)
    model.endpoint.refresh_from_db()
    return model.endpoint


def add_test_examples(task, round_, texts):
    for i, (text, label) in enumerate(texts):
        Example.objects.create(task=task, round=round_, split="test", inputs={"statement": text},
                               target={"label": label}, source="import", validation_status="verified",
                               external_uid=f"r{round_.number}-{i}")


def spent_outside_rounds(endpoint) -> Decimal:
    usage = EndpointUsage.objects.filter(endpoint=endpoint, round=None).first()
    return usage.cost if usage else Decimal(0)


def test_the_evaluation_budget_is_a_superusers_and_refuses_the_health_check_and_an_evaluation(
        target, sentiment, client_for, researcher, annotator, superuser, chat):  # noqa: F811
    endpoint = per_call(target)
    with pytest.raises(Forbidden):
        endpoint_budgets.set_evaluation_budget(endpoint, "0.01", researcher)
    endpoint_budgets.set_evaluation_budget(endpoint, "0.01", superuser)
    owner = client_for(researcher)
    checked = owner.post(f"/api/models/{target.pk}/health-check/")
    assert checked.status_code == 200, checked.content
    assert spent_outside_rounds(endpoint) == Decimal("0.01")  # its one probe, outside any round
    endpoint.refresh_from_db()
    healthy_at, asked = endpoint.healthy_at, len(chat.requests)

    refused = owner.post(f"/api/models/{target.pk}/health-check/")
    assert refused.status_code == 409 and refused.json()["code"] == "endpoint_budget_spent"
    assert "health check of fake-llm was not run" in refused.json()["detail"]
    assert "evaluation budget" in refused.json()["detail"]
    jobs = Job.objects.count()
    not_started = owner.post(f"/api/models/{target.pk}/evaluate/")
    assert not_started.status_code == 409 and "evaluation budget" in not_started.json()["detail"]
    assert len(chat.requests) == asked and Job.objects.count() == jobs  # no call, no job
    endpoint.refresh_from_db()
    assert endpoint.healthy_at == healthy_at

    # The round's budget is apart: annotators still write against the round's target.
    assert write(client_for(annotator), "A film.").status_code == 201
    assert spent_outside_rounds(endpoint) == Decimal("0.01")

    endpoint_budgets.set_evaluation_budget(endpoint, "0.02", superuser)
    endpoint.refresh_from_db()
    assert endpoints.health_check(endpoint, sentiment.parsed_config)["probes"] == 1
    assert spent_outside_rounds(endpoint) == Decimal("0.02")


def test_an_evaluation_that_runs_out_of_budget_fails_its_job_and_stores_nothing(
        sentiment, chat_model, chat, superuser, django_capture_on_commit_callbacks):  # noqa: F811
    endpoint = per_call(chat_model)
    static = Round.objects.create(task=sentiment, number=0, status=Round.Status.CLOSED)  # the static test set
    first = sentiment.rounds.get(number=1)
    add_test_examples(sentiment, static, [("A delight.", "positive"), ("Dull.", "negative"), ("Lovely.", "positive")])
    add_test_examples(sentiment, first, [("Bad.", "negative"), ("Fine.", "positive")])
    [before] = evaluate_model(chat_model, [static], measure=False)  # no budget yet: 3 calls
    assert before.metrics["accuracy"] == 1.0 and spent_outside_rounds(endpoint) == Decimal("0.03")

    chat.answer = lambda text: "negative"  # what a second evaluation would store, were it stored
    endpoint_budgets.set_evaluation_budget(endpoint, "0.06", superuser)  # round 0's 3 calls, not round 1's
    with django_capture_on_commit_callbacks(execute=True):
        job = start_evaluation(chat_model, rounds=[0, 1], measure=False)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert "evaluation budget of endpoint model fake-llm" in job.error and "is spent" in job.error
    assert "Traceback" not in job.error  # the reason, not a crash
    asked = len(chat.requests)
    assert asked == 3 + 3  # the first evaluation, then round 0 again; round 1 refused before any call
    [after] = Evaluation.objects.filter(model_version=chat_model)  # round 0's as it was, no round 1
    assert after.pk == before.pk and after.metrics == before.metrics and after.job_id is None
    assert spent_outside_rounds(endpoint) == Decimal("0.06")

    endpoint_budgets.set_evaluation_budget(endpoint, None, superuser)  # no limit: it runs to the end
    with django_capture_on_commit_callbacks(execute=True):
        job = start_evaluation(chat_model, rounds=[0, 1], measure=False)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    stored = {e.round.number: e.metrics["accuracy"] for e in Evaluation.objects.filter(model_version=chat_model)}
    assert stored == {0: pytest.approx(1 / 3), 1: 0.5}


def test_a_second_explanation_of_one_account_is_refused_for_an_endpoint_model_too(
        target, client_for, annotator, researcher, chat):  # noqa: F811
    client = client_for(annotator)
    example_id = write(client, "A dull film.").json()["id"]
    url = f"/api/examples/{example_id}/explanation/"
    asked = len(chat.requests)
    with slots.exclusive(settings.INFERENCE_REPLY_URL, f"explain-account:{annotator.pk}", settings.INFERENCE_TIMEOUT):
        # The account's first explanation is still running: a second one is refused at once ...
        refused = client.post(url, {}, format="json")
        assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
        assert "already have an explanation" in refused.json()["detail"]
        assert len(chat.requests) == asked  # no occlusion call made
        assert "explanation" not in Example.objects.get(pk=example_id).metadata
        # ... while another account is not held up by it.
        assert client_for(researcher).post(url, {}, format="json").status_code == 200
    answered = client.post(url, {}, format="json")  # free again
    assert answered.status_code == 200 and answered.json()["method"] == "occlusion"
