"""The task page's researcher section and the job page, through Django's test client.

Who sees the loop (the task's researchers only), who may start it (the same), the
refusals it shows as messages, a training job started from the page, the job page's
visibility and its cancel / run again, and escaping of what users named or logged.
Jobs run inline (``JOBS_RUN_INLINE``), once the test's transaction "commits"
(``django_capture_on_commit_callbacks``).
"""

import pytest
from django.urls import reverse

from annotation.models import Example
from jobs.models import Job
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import register_model

pytestmark = pytest.mark.django_db

SCRIPT = '<script>alert("x")</script>'
SECTION = 'id="loop-h"'  # the researcher section's heading
TRAIN_ROWS = [("I loved every minute of it.", "positive"), ("A dull, tired mess.", "negative"),
              ("Wonderful staff and great food!", "positive"), ("Never again, awful service.", "negative")]


@pytest.fixture
def sentiment(demo_tasks, tiny_artifact):
    """The sentiment task: round 1 open with a tiny target model, and a candidate."""
    task = demo_tasks["sentiment"]
    artifact = tiny_artifact("sentiment")
    task.open_round().target_models.add(register_model(task, artifact, name="sentiment-target"))
    register_model(task, artifact, name="sentiment-candidate")
    return task


def page_url(task):
    return reverse("task-detail", args=[task.slug])


def action_url(task):
    return reverse("task-action", args=[task.slug])


def signed_in(client, user):
    if user is not None:
        client.force_login(user)
    return client


def add_examples(task, rows, split, rnd=None):
    rnd = rnd or task.open_round()
    for i, (text, label) in enumerate(rows):
        Example.objects.create(task=task, round=rnd, split=split, source="import", validation_status="verified",
                               external_uid=f"{split}-{rnd.number}-{i}", inputs={"statement": text},
                               target={"label": label})


def messages_on(response):
    return [str(m) for m in response.context["messages"]]


# --- who sees the section, who may act ---------------------------------------------


@pytest.mark.parametrize("who", ["anonymous", "annotator", "other_researcher"])
def test_the_research_section_is_hidden_from_everyone_else(sentiment, client, request, who):
    user = None if who == "anonymous" else request.getfixturevalue(who)
    response = signed_in(client, user).get(page_url(sentiment))
    assert response.status_code == 200
    content = response.content.decode()
    assert "<h1>Sentiment Analysis</h1>" in content  # the public page itself
    assert SECTION not in content and "sentiment-candidate" not in content
    assert action_url(sentiment) not in content and "Train next model" not in content
    assert response.context["is_researcher"] is False and "jobs" not in response.context


@pytest.mark.parametrize("who", ["researcher", "superuser"])
def test_the_tasks_researchers_see_the_loop(sentiment, client, request, who):
    response = signed_in(client, request.getfixturevalue(who)).get(page_url(sentiment))
    content = response.content.decode()
    assert SECTION in content and f'action="{action_url(sentiment)}"' in content
    comparison = response.context["comparison"]
    assert [m.name for m in comparison.models] == ["sentiment-target", "sentiment-candidate"]
    assert "sentiment-target <small>(target)</small>" in content
    assert "sentiment-candidate <small>(candidate)</small>" in content
    assert "No evaluations yet." in content
    assert content.count('value="evaluate"') == 2 and content.count('value="promote"') == 1  # not the target
    assert "Evaluate it first: promotion needs a finished evaluation" in content
    assert "Train next model" in content



def test_the_research_sections_queries_do_not_grow_with_models_and_jobs(sentiment, client, researcher):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def extra_candidates(n, start):
        for i in range(start, start + n):  # rows only: the page never loads an artifact
            ModelVersion.objects.create(task=sentiment, name=f"extra-{i}", artifact_path=f"extra-{i}",
                                        sha256="0" * 64)

    def queries():
        with CaptureQueriesContext(connection) as captured:
            response = client.get(page_url(sentiment))
        assert response.status_code == 200
        return len(captured)

    client.force_login(researcher)
    extra_candidates(4, 0)  # 5 candidates: as many as the section shows
    Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=sentiment, status=Job.Status.SUCCEEDED)
    client.get(page_url(sentiment))  # warm the session
    before = queries()
    extra_candidates(6, 4)
    for _ in range(12):
        Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=sentiment, status=Job.Status.SUCCEEDED)
    client.get(page_url(sentiment))  # warm again: new models drop the cached static baseline, as before
    assert queries() == before
    assert client.get(page_url(sentiment)).content.decode().count('value="promote"') == 5

@pytest.mark.parametrize("action", ["train", "evaluate", "promote"])
def test_others_cannot_post_task_actions(sentiment, client, annotator, other_researcher, action):
    candidate = ModelVersion.objects.get(task=sentiment, name="sentiment-candidate")
    data = {"action": action, "model": candidate.pk, "selection": "verified", "mode": "head"}
    response = client.post(action_url(sentiment), data)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={action_url(sentiment)}"
    for user in (annotator, other_researcher):
        client.force_login(user)
        assert client.post(action_url(sentiment), data).status_code == 403
    assert not Job.objects.exists()
    assert list(sentiment.rounds.values_list("number", "status")) == [(1, "open")]


def test_the_action_endpoint_takes_only_posts(sentiment, client, researcher):
    client.force_login(researcher)
    assert client.get(action_url(sentiment)).status_code == 405


def test_a_hidden_tasks_actions_are_not_found_for_others(sentiment, client, annotator, researcher):
    sentiment.is_hidden = True
    sentiment.save(update_fields=["is_hidden"])
    client.force_login(annotator)
    assert client.post(action_url(sentiment), {"action": "train"}).status_code == 404
    client.force_login(researcher)
    assert SECTION in client.get(page_url(sentiment)).content.decode()


# --- promote, evaluate, train from the page -------------------------------------------


def test_promote_is_refused_without_a_finished_evaluation_then_done_after_one(
        sentiment, client, researcher, django_capture_on_commit_callbacks):
    candidate = ModelVersion.objects.get(task=sentiment, name="sentiment-candidate")
    add_examples(sentiment, TRAIN_ROWS, "test")
    client.force_login(researcher)
    response = client.post(action_url(sentiment), {"action": "promote", "model": candidate.pk}, follow=True)
    confirm = reverse("promote-confirm", args=[sentiment.slug, candidate.pk])
    assert response.redirect_chain == [(f"{confirm}?ensemble_size=1", 302)]  # the confirmation first
    assert 'name="confirm"' not in response.content.decode()  # nothing to confirm: it says why
    refusal = response.context["blocked"]
    assert "sentiment/sentiment-candidate has no finished evaluation; evaluate it first" in refusal
    assert refusal in response.content.decode()
    assert list(sentiment.rounds.values_list("number", "status")) == [(1, "open")]

    # Evaluate from the page: the job page follows (the job ran inline).
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(action_url(sentiment), {"action": "evaluate", "model": candidate.pk})
    job = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL)
    assert response.status_code == 302 and response["Location"] == job.get_absolute_url()
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert Evaluation.objects.get(model_version=candidate).num_examples == len(TRAIN_ROWS)
    page = client.get(page_url(sentiment))
    assert page.context["comparison"].evaluated[candidate.pk] is True
    assert "No evaluations yet." not in page.content.decode()

    response = client.post(action_url(sentiment), {"action": "promote", "model": candidate.pk, "confirm": "yes"},
                           follow=True)
    assert messages_on(response) == ["Round 2 is open with sentiment-candidate as its target."]
    assert list(sentiment.rounds.order_by("number").values_list("number", "status")) == [(1, "closed"),
                                                                                         (2, "open")]
    assert list(sentiment.open_round().target_models.all()) == [candidate]


@pytest.mark.parametrize("data, expected", [
    ({"action": "promote"}, "Choose one of this task's models."),
    ({"action": "promote", "model": "not a number"}, "Choose one of this task's models."),
    ({"action": "dance", "model": "CANDIDATE"}, "Unknown action."),
    ({"action": "promote", "model": "CANDIDATE", "ensemble_size": "9"}, "ensemble_size: Must be a whole number"),
    ({"action": "train", "selection": "verified", "mode": "turbo"}, "mode: Must be one of"),
    ({"action": "train", "selection": "everything", "mode": "head"}, "selection: Must be one of"),
])
def test_refusals_are_messages_that_name_the_problem(sentiment, client, researcher, data, expected):
    candidate = ModelVersion.objects.get(task=sentiment, name="sentiment-candidate")
    add_examples(sentiment, TRAIN_ROWS, "train")
    data = {k: candidate.pk if v == "CANDIDATE" else v for k, v in data.items()}
    client.force_login(researcher)
    response = client.post(action_url(sentiment), data, follow=True)
    assert response.redirect_chain == [(page_url(sentiment), 302)]
    [message] = messages_on(response)
    assert message.startswith(expected), message
    assert not Job.objects.exists() and sentiment.rounds.count() == 1


def test_another_tasks_model_is_not_one_of_this_tasks(sentiment, demo_tasks, client, researcher):
    nli_model = ModelVersion.objects.create(task=demo_tasks["nli"], name="nli-model", artifact_path="nli-model",
                                            sha256="0" * 64)
    client.force_login(researcher)
    response = client.post(action_url(sentiment), {"action": "evaluate", "model": nli_model.pk}, follow=True)
    assert messages_on(response) == ["Choose one of this task's models."]
    assert not Job.objects.exists()


def test_train_next_from_the_page_runs_a_job(sentiment, client, researcher, django_capture_on_commit_callbacks):
    add_examples(sentiment, TRAIN_ROWS, "train")
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(action_url(sentiment), {"action": "train", "selection": "verified", "mode": "head"})
    job = Job.objects.get(kind=Job.Kind.TRAIN_MODEL)
    assert response.status_code == 302 and response["Location"] == job.get_absolute_url()
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.task == sentiment and job.created_by == researcher
    assert job.params["mode"] == "head" and job.params["selection"] == "verified" and job.params["parent"] is None
    model = ModelVersion.objects.get(pk=job.result["model_version"])
    assert model.name == "r2-verified" and model.created_by == researcher
    # Its evaluation was queued (and ran) once it was registered.
    assert Job.objects.get(kind=Job.Kind.EVALUATE_MODEL).params["model_version"] == model.pk

    page = client.get(job.get_absolute_url())
    content = page.content.decode()
    assert f"Training job #{job.pk} queued." in messages_on(page)
    assert 'class="status-succeeded"' in content and f'">{model.name}</a></dd>' in content
    assert f"<h1>Train a model #{job.pk}: {model.name}</h1>" in content  # the kind and the model, named
    evaluation = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL)
    assert f"<h1>Evaluate a model #{evaluation.pk}: {model.name}</h1>" in client.get(
        evaluation.get_absolute_url()).content.decode()
    assert 'http-equiv="refresh"' not in content and 'value="rerun"' in content and 'value="cancel"' not in content
    # The task page lists the job and the new candidate.
    task_page = client.get(page_url(sentiment)).content.decode()
    assert job.get_absolute_url() in task_page and f"{model.name} <small>(candidate)</small>" in task_page

    # From the current target's weights, on the verified examples that fooled the model:
    # there are none (the imported rows fooled nothing), so the page says so: nothing new
    # to learn, and, trained anyway, nothing to learn from at all.
    response = client.post(action_url(sentiment), {"action": "train", "selection": "fooling", "mode": "head",
                                                   "from_parent": "on"}, follow=True)
    [refusal] = messages_on(response)
    assert refusal.startswith("Task sentiment has no new usable examples to learn from")
    response = client.post(action_url(sentiment), {"action": "train", "selection": "fooling", "mode": "head",
                                                   "from_parent": "on", "allow_no_new_examples": "on"}, follow=True)
    [refusal] = messages_on(response)
    assert refusal.startswith("Task sentiment has no usable training examples in the chosen rounds")
    with django_capture_on_commit_callbacks(execute=False):  # queued, not run: only its parameters matter
        response = client.post(action_url(sentiment), {"action": "train", "selection": "verified", "mode": "full",
                                                       "from_parent": "on"})
    second = Job.objects.filter(kind=Job.Kind.TRAIN_MODEL).latest("pk")
    assert second != job and response["Location"] == second.get_absolute_url()
    target = ModelVersion.objects.get(name="sentiment-target")
    assert second.params["parent"] == target.pk and second.params["mode"] == "full"


def test_a_second_training_job_while_one_is_active_is_refused(sentiment, client, researcher):
    add_examples(sentiment, TRAIN_ROWS, "train")
    active = Job.objects.create(kind=Job.Kind.TRAIN_MODEL, task=sentiment, created_by=researcher)
    client.force_login(researcher)
    response = client.post(action_url(sentiment), {"action": "train", "mode": "head"}, follow=True)
    [message] = messages_on(response)
    assert f"already has a training job queued: job #{active.pk}" in message
    assert Job.objects.count() == 1


# --- the job page -------------------------------------------------------------------------


def queued_job(task, user, **extra):
    return Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=task, created_by=user, queue="training",
                              celery_task_name="leaderboard.evaluate_model",
                              params={"model_version": 0, "rounds": None, "split": "test"}, **extra)


def test_the_job_page_is_for_the_tasks_researchers_and_the_jobs_creator(sentiment, client, researcher,
                                                                        other_researcher, annotator):
    job = queued_job(sentiment, other_researcher)  # started by someone who is no longer an owner
    url = job.get_absolute_url()
    response = client.get(url)
    assert response.status_code == 302 and response["Location"] == f"{reverse('login')}?next={url}"
    client.force_login(annotator)
    assert client.get(url).status_code == 404
    assert client.post(url, {"action": "cancel"}).status_code == 404
    assert client.get(reverse("job-detail", args=[job.pk + 1000])).status_code == 404

    client.force_login(researcher)
    response = client.get(url)
    assert response.status_code == 200
    content = response.content.decode()
    assert 'value="cancel"' in content and 'http-equiv="refresh"' in content  # active: refreshes itself
    assert "1 in line" in content

    client.force_login(other_researcher)  # the creator sees it, but no longer acts on it
    response = client.get(url)
    assert response.status_code == 200 and 'value="cancel"' not in response.content.decode()
    assert client.post(url, {"action": "cancel"}).status_code == 403
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED


def test_cancel_and_run_again_from_the_job_page(sentiment, client, researcher):
    job = queued_job(sentiment, researcher)
    client.force_login(researcher)
    url = job.get_absolute_url()

    response = client.post(url, {"action": "rerun"}, follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert messages_on(response) == [f"Job #{job.pk} is queued; cancel it or wait for it before running it again."]

    response = client.post(url, {"action": "cancel"}, follow=True)
    assert messages_on(response) == [f"Job #{job.pk} cancelled."]
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED and f"cancelled by {researcher.username}" in job.log
    content = response.content.decode()
    assert 'class="status-cancelled"' in content and 'value="rerun"' in content
    assert 'http-equiv="refresh"' not in content

    response = client.post(url, {"action": "cancel"}, follow=True)
    assert messages_on(response) == [
        f"Job #{job.pk} has cancelled already; only a queued or running job can be cancelled."]

    response = client.post(url, {"action": "rerun"}, follow=True)
    new = Job.objects.get(rerun_of=job)
    assert response.redirect_chain == [(new.get_absolute_url(), 302)]
    assert messages_on(response) == [f"Job #{job.pk} queued again as job #{new.pk}."]
    assert (new.kind, new.params, new.task, new.created_by, new.status) == (
        job.kind, job.params, sentiment, researcher, Job.Status.QUEUED)


def test_a_job_without_a_task_is_for_superusers_only(db, client, researcher, superuser):
    job = Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, created_by=None)
    client.force_login(researcher)
    assert client.get(job.get_absolute_url()).status_code == 404
    client.force_login(superuser)
    response = client.get(job.get_absolute_url())
    assert response.status_code == 200 and 'value="cancel"' in response.content.decode()
    assert "Task <a" not in response.content.decode()


# --- per-annotator statistics -----------------------------------------------------------


def test_per_annotator_stats_name_annotators_to_researchers_only(sentiment, client, researcher, annotator,
                                                                 second_annotator):
    rnd = sentiment.open_round()
    for fooled, status in [(True, "verified"), (True, "pending"), (False, "verified")]:
        Example.objects.create(task=sentiment, round=rnd, annotator=annotator, inputs={"statement": "x"},
                               target={"label": "positive"}, fooled=fooled, validation_status=status)
    content = signed_in(client, researcher).get(page_url(sentiment)).content.decode()
    assert "Annotators, round 1" in content
    [row] = [line for line in content.splitlines() if "<th scope=\"row\">annotator <small>" in line]
    assert "<td>3</td><td>2</td><td>1</td>" in row

    for user in (None, second_annotator):
        client.logout()
        content = signed_in(client, user).get(page_url(sentiment)).content.decode()
        assert "Annotators, round" not in content and "annotator <small>" not in content
        assert ">annotator<" not in content


# --- escaping -------------------------------------------------------------------------------


def test_names_logs_and_errors_are_escaped(sentiment, tiny_artifact, client, researcher, annotator,
                                           django_capture_on_commit_callbacks):
    model = register_model(sentiment, tiny_artifact("sentiment"), name=f"m{SCRIPT}")
    add_examples(sentiment, TRAIN_ROWS, "test")
    job = Job.objects.create(kind=Job.Kind.TRAIN_MODEL, task=sentiment, created_by=researcher,
                             status=Job.Status.FAILED, log=f"[12:00:00] step {SCRIPT}\n",
                             error=f"ValueError: {SCRIPT}", result={"model_version": model.pk})
    client.force_login(researcher)
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    content = client.get(job.get_absolute_url()).content.decode()
    assert SCRIPT not in content
    assert content.count(escaped) == 4  # the log, the error, the model's name in the heading and beside "Model"
    content = client.get(page_url(sentiment)).content.decode()
    assert SCRIPT not in content and f"m{escaped} <small>(candidate)</small>" in content
    assert f'aria-label="Ensemble size for m{escaped}"' in content

    # Evaluated and promoted: the message and the rounds table name it, escaped.
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(action_url(sentiment), {"action": "evaluate", "model": model.pk}, follow=True)
    assert SCRIPT not in response.content.decode() and f"Evaluation of m{escaped} queued" in response.content.decode()
    confirm = client.post(action_url(sentiment), {"action": "promote", "model": model.pk}, follow=True)
    assert SCRIPT not in confirm.content.decode() and f"Promote m{escaped}?" in confirm.content.decode()
    response = client.post(action_url(sentiment), {"action": "promote", "model": model.pk, "confirm": "yes"},
                           follow=True)
    content = response.content.decode()
    assert messages_on(response) == [f"Round 2 is open with m{SCRIPT} as its target."]
    assert SCRIPT not in content and f"Round 2 is open with m{escaped} as its target." in content
    assert f"<td>m{escaped}</td>" in content

    # The admin's evaluation table too.
    researcher_admin = client.get(reverse("admin:registry_modelversion_change", args=[model.pk])).content.decode()
    assert SCRIPT not in researcher_admin and f"m{escaped}" in researcher_admin

