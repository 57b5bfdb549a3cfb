import json

import pytest
from django.urls import reverse

from annotation.models import AnnotationSession, Example, Validation
from annotation.sessions import start_session
from crowd.models import WorkerIdentity
from jobs.models import Job
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from tasks.models import Context, Round, Task

TASK_SCOPED = [Task, Round, Context, Job, Example, Validation, ModelVersion, AnnotationSession, Evaluation]


def admin_url(model, view, *args):
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


@pytest.fixture
def populated(demo_tasks, annotator, second_annotator):
    nli = demo_tasks["nli"]
    context = Context.objects.create(task=nli, fields={"premise": "<b>bold</b> premise"})
    example = Example.objects.create(
        task=nli, round=nli.open_round(), context=context, annotator=annotator,
        inputs={"hypothesis": "A <script>alert(1)</script> hypothesis 😀"}, target={"label": "neutral"},
        fooled=True, prediction={"label": "entailment", "probabilities": {}},
    )
    Validation.objects.create(example=example, validator=second_annotator, label="correct")
    model = ModelVersion.objects.create(task=nli, name="r0", artifact_path="nli/r0", sha256="ab" * 32)
    Evaluation.objects.create(model_version=model, round=nli.open_round(), num_examples=3, metrics={"accuracy": 1})
    Job.objects.create(kind=Job.Kind.HEALTH_CHECK, task=nli)
    start_session(annotator, nli)
    return example


@pytest.mark.parametrize("model", TASK_SCOPED, ids=lambda m: m.__name__)
def test_every_model_is_registered_and_renders_for_researchers(populated, client, researcher, model):
    client.force_login(researcher)
    changelist = client.get(admin_url(model, "changelist"))
    assert changelist.status_code == 200
    obj = model.objects.first()
    assert obj is not None
    change = client.get(admin_url(model, "change", obj.pk))
    assert change.status_code == 200
    # Search and filters work without errors.
    assert client.get(changelist.request["PATH_INFO"] + "?q=a").status_code == 200


@pytest.mark.parametrize("model", TASK_SCOPED, ids=lambda m: m.__name__)
def test_researchers_see_only_their_own_tasks_rows(populated, client, other_researcher, model):
    """A staff researcher who owns none of the demo tasks sees none of their rows."""
    client.force_login(other_researcher)
    changelist = client.get(admin_url(model, "changelist"))
    assert changelist.status_code == 200
    assert changelist.context["cl"].result_count == 0
    obj = model.objects.first()
    response = client.get(admin_url(model, "change", obj.pk))
    assert response.status_code == 302  # "does not exist" redirect, nothing shown
    assert str(obj.pk) not in response.get("Location", "").split("/")[-2:-1]


def test_worker_identities_are_for_superusers_only(client, researcher, superuser, mturk_worker):
    client.force_login(researcher)
    assert client.get(admin_url(WorkerIdentity, "changelist")).status_code == 403
    client.force_login(superuser)
    assert client.get(admin_url(WorkerIdentity, "changelist")).status_code == 200


def test_decision_fields_and_validations_are_read_only(populated, client, researcher):
    """Posting a changed fooled, prediction, target, status or counter changes nothing."""
    client.force_login(researcher)
    url = admin_url(Example, "change", populated.pk)
    response = client.post(url, {
        "split": "dev", "metadata": "{}", "fooled": "", "target": json.dumps({"label": "entailment"}),
        "prediction": json.dumps({"label": "neutral"}), "validation_status": "verified",
        "validations_correct": "9", "retracted": "on",
        "validations-TOTAL_FORMS": "1", "validations-INITIAL_FORMS": "1",
        "validations-MIN_NUM_FORMS": "0", "validations-MAX_NUM_FORMS": "1000",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = Example.objects.get(pk=populated.pk)
    assert stored.split == "dev"  # the one field a researcher edits
    assert (stored.fooled, stored.target, stored.prediction["label"]) == (True, {"label": "neutral"}, "entailment")
    assert (stored.validation_status, stored.validations_correct, stored.retracted) == ("pending", 0, False)
    validation = Validation.objects.get(example=populated)
    assert client.post(admin_url(Validation, "change", validation.pk), {"label": "incorrect"}).status_code == 403
    assert client.post(admin_url(Validation, "delete", validation.pk), {"post": "yes"}).status_code == 403
    assert client.get(admin_url(Validation, "add")).status_code == 403
    assert Validation.objects.get(pk=validation.pk).label == "correct"


def test_round_status_moves_only_through_the_actions(populated, client, researcher):
    client.force_login(researcher)
    nli = Task.objects.get(slug="nli")
    first = nli.open_round()
    second = Round.objects.create(task=nli, number=2)
    # The status field is not editable: a posted status is ignored.
    response = client.post(admin_url(Round, "change", second.pk), {
        "status": "open", "ensemble_mode": "single", "description": "",
    })
    assert response.status_code == 302
    assert Round.objects.get(pk=second.pk).status == "draft"
    # The action refuses a round without a target model, with the reason.
    response = client.post(admin_url(Round, "changelist"), {"action": "open_rounds", "_selected_action": [second.pk]},
                           follow=True)
    assert "no ready target model" in response.content.decode()
    assert Round.objects.get(pk=second.pk).status == "draft"
    second.target_models.add(ModelVersion.objects.get(name="r0"))
    client.post(admin_url(Round, "changelist"), {"action": "open_rounds", "_selected_action": [second.pk]})
    assert Round.objects.get(pk=second.pk).status == "open"
    assert Round.objects.get(pk=first.pk).status == "closed"
    client.post(admin_url(Round, "changelist"), {"action": "close_rounds", "_selected_action": [second.pk]})
    assert nli.open_round() is None


def test_unflag_action_calls_the_service(populated, client, researcher):
    Example.objects.filter(pk=populated.pk).update(flagged=True, flag_reason="spam?")
    client.force_login(researcher)
    client.post(admin_url(Example, "changelist"), {"action": "unflag_examples", "_selected_action": [populated.pk]})
    stored = Example.objects.get(pk=populated.pk)
    assert stored.flagged is False and stored.flag_reason == "spam?"  # the reason stays on record


def test_a_researcher_owns_the_task_they_create(client, other_researcher):
    client.force_login(other_researcher)
    response = client.post(admin_url(Task, "add"), {
        "name": "Mine", "slug": "mine", "task_type": "classification", "is_active": "on",
        "config": json.dumps({"context_fields": [], "input_fields": [{"name": "text"}], "model_inputs": ["text"],
                              "labels": [{"name": "a"}, {"name": "b"}]}),
        "rounds-TOTAL_FORMS": "0", "rounds-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302
    assert list(Task.objects.get(slug="mine").owners.all()) == [other_researcher]
    assert client.get(admin_url(Task, "changelist")).context["cl"].result_count == 1


def test_admin_refuses_non_staff_and_anonymous(client, annotator):
    url = reverse("admin:tasks_task_changelist")
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(annotator)
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_admin_shows_a_clear_error_for_a_bad_config(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("admin:tasks_task_add"), {
        "name": "Broken", "slug": "broken", "task_type": "classification",
        "config": json.dumps({"context_fields": [], "input_fields": [{"name": "text"}],
                              "model_inputs": ["text"], "labels": [{"name": "one"}]}),
        "rounds-TOTAL_FORMS": "0", "rounds-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200  # the form again, with the error
    assert "a classification task needs at least two labels" in response.content.decode()
    assert not Task.objects.filter(slug="broken").exists()


def test_the_example_list_exports_as_a_job(populated, client, researcher, settings, tmp_path,
                                           django_capture_on_commit_callbacks):
    settings.STORAGES = {**settings.STORAGES, "job_files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path}}}
    client.force_login(researcher)
    listed = client.get(reverse("admin:annotation_example_changelist") + f"?task__id__exact={populated.task_id}")
    assert f'href="/admin/annotation/example/export/?task__id__exact={populated.task_id}"' in listed.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:annotation_example_export"), {
            "task": populated.task_id, "retracted": "exclude", "flagged": "exclude", "format": "jsonl"})
    assert response.status_code == 302
    job = Job.objects.get(kind=Job.Kind.EXPORT_EXAMPLES)
    assert job.status == "succeeded" and response.url == job.get_absolute_url()
    download = client.get(reverse("job-file", args=[job.pk]))
    assert download.status_code == 200 and download["Content-Disposition"].startswith("attachment")
    lines = b"".join(download.streaming_content).decode().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["uid"] == str(populated.uid)
    assert record["task"] == "nli" and record["round"] == 1
    assert record["inputs"]["hypothesis"] == "A <script>alert(1)</script> hypothesis 😀"
    assert record["context"]["fields"] == {"premise": "<b>bold</b> premise"}
    assert record["validation"] == {"status": "pending", "correct": 0, "incorrect": 0, "flagged": 0}
    assert record["annotator"].startswith("a-") and "annotator" not in record["annotator"]
    assert str(populated.annotator_id) != record["annotator"][2:]
    job_page = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert reverse("job-file", args=[job.pk]) in job_page


def test_admin_change_page_escapes_user_text(populated, client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("admin:annotation_example_change", args=[populated.pk])).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_make_researcher_command(demo_tasks, annotator, client):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("make_researcher", "annotator", "--task", "nli", stdout=out)
    assert "owns: nli" in out.getvalue()
    annotator.refresh_from_db()
    assert annotator.is_staff and annotator.groups.filter(name="Researchers").exists()
    client.force_login(annotator)
    assert client.get(admin_url(Task, "changelist")).context["cl"].result_count == 1
    with pytest.raises(CommandError, match="Unknown task"):
        call_command("make_researcher", "annotator", "--task", "nope")
    with pytest.raises(CommandError, match="No user"):
        call_command("make_researcher", "ghost")


def test_the_admin_lists_only_a_researchers_own_tasks_and_staff_as_co_owners(populated, client, researcher,
                                                                            other_researcher, mturk_worker):
    nli = Task.objects.get(slug="nli")
    Task.objects.filter(slug="hate").update(is_hidden=True)
    nli.owners.add(other_researcher)  # owns nli only
    client.force_login(other_researcher)
    for model in (Round, Example, Validation, AnnotationSession, Evaluation, Context, ModelVersion, Job):
        page = client.get(admin_url(model, "changelist")).content.decode()
        assert "Hate Speech Detection" not in page and "Sentiment Analysis" not in page, model.__name__
    form = client.get(admin_url(Task, "change", nli.pk)).context["adminform"].form
    owner_choices = {u.username for u in form.fields["owners"].queryset}
    assert "researcher" in owner_choices and mturk_worker.username not in owner_choices
    assert "annotator" not in owner_choices


def test_a_round_takes_only_its_own_tasks_models(populated, client, researcher):
    from core.errors import Conflict
    from tasks.services import open_round
    from tasks.targets import open_round_with_models

    nli, sentiment = Task.objects.get(slug="nli"), Task.objects.get(slug="sentiment")
    foreign = ModelVersion.objects.get(name="r0")  # an NLI model
    rnd = sentiment.open_round()
    client.force_login(researcher)
    # An open round's targets are read-only in the admin (a new target is a new round).
    response = client.post(admin_url(Round, "change", rnd.pk), {
        "ensemble_mode": "single", "description": "", "target_models": [foreign.pk]})
    assert response.status_code == 302 and not rnd.target_models.exists()
    draft = Round.objects.create(task=sentiment, number=2)
    response = client.post(admin_url(Round, "change", draft.pk), {
        "ensemble_mode": "single", "description": "", "target_models": [foreign.pk]})
    assert response.status_code == 200 and "must be models of this round" in response.content.decode()
    assert not draft.target_models.exists()
    rnd.target_models.add(foreign)  # written around the admin: the platform still ignores it
    assert open_round_with_models(sentiment) == (sentiment.open_round(), [])
    draft.target_models.add(foreign)
    with pytest.raises(Conflict, match="belong to other tasks"):
        open_round(draft)
    assert nli.open_round() is not None


def test_the_task_forms_rounds_table_names_every_input(populated, client, researcher):
    """The rounds inline is a table whose headers are not labels: each input and select
    of a row carries a name of its own (its field and its round), and the empty row for
    a new round says so. Inputs without a name are what a screen reader announces as
    "edit text" alone."""
    import re

    client.force_login(researcher)
    nli = Task.objects.get(slug="nli")
    page = client.get(admin_url(Task, "change", nli.pk)).content.decode()
    rows = re.findall(r'<(?:input|select)[^>]*name="rounds-(\d+|__prefix__)-(\w+)"[^>]*>', page)
    named = re.findall(r'<(?:input|select)[^>]*name="rounds-(?:\d+|__prefix__)-(?:number|ensemble_mode|DELETE)"[^>]*>',
                       page)
    assert rows and len(named) >= 2
    for tag in named:
        assert 'aria-label="' in tag, tag
    first = nli.rounds.order_by("number").first()
    assert f'aria-label="Number, round {first.number}"' in page
    assert 'aria-label="Ensemble mode, new round"' in page  # the template row the admin copies
    assert f'aria-label="Delete, round {first.number}"' in page  # the formset's own delete box too
