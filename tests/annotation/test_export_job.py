"""The admin's examples list filtered by task and round, and its export: the whole filtered
set of one task (not a page of the list), written by a Job with progress and offered on
the job's page to the task's researchers only."""

import csv
import io
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from annotation import exporting, exports
from annotation.models import Example
from core.errors import Forbidden
from jobs.models import Job
from tasks.models import Round

LIST = "/admin/annotation/example/"
EXPORT = "/admin/annotation/example/export/"
HTML = '<script>alert("x")</script> <b>bold</b> &amp;'
TRICKY = f'Commas, "quotes" and a\nnew line: {HTML}'


@pytest.fixture(autouse=True)
def job_files(settings, tmp_path):
    """The files jobs make go to a folder of this test's own."""
    settings.STORAGES = {**settings.STORAGES, "job_files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path / "job-files"}}}
    return tmp_path / "job-files"


@pytest.fixture
def study(demo_tasks, annotator):
    """NLI round 1: 150 examples (more than a page of the admin's list, 100), 3 retracted and
    3 flagged ones; 10 examples in a second round; 10 hate examples (another task)."""
    nli, hate = demo_tasks["nli"], demo_tasks["hate"]
    round1 = nli.rounds.get(number=1)
    round2 = Round.objects.create(task=nli, number=2, status=Round.Status.DRAFT)
    context = nli.contexts.first()

    def made(task, rnd, n, prefix, **extra):
        return [Example(task=task, round=rnd, context=context if task == nli else None, annotator=annotator,
                        inputs={"hypothesis" if task == nli else "statement": f"{prefix} {i}"},
                        target={"label": "neutral" if task == nli else "hateful"}, external_uid=f"{prefix}-{i}",
                        **extra) for i in range(n)]

    Example.objects.bulk_create([
        *made(nli, round1, 150, "kept"), *made(nli, round1, 3, "retracted", retracted=True),
        *made(nli, round1, 3, "flagged", flagged=True, flag_reason="spam"), *made(nli, round2, 10, "later"),
        *made(hate, hate.open_round(), 10, "hate")])
    first = Example.objects.get(external_uid="kept-0")
    first.inputs = {"hypothesis": TRICKY}
    first.metadata = {"note": HTML, "scores": [1, 2]}
    first.save()
    return {"nli": nli, "hate": hate, "round1": round1, "round2": round2}


def listed(client, params, status=200):
    response = client.get(LIST + "?" + urlencode(params))
    assert response.status_code == status, response.content[:500]
    return response


def round_choices(response) -> list[str]:
    cl = response.context["cl"]
    [spec] = [s for s in cl.filter_specs if s.title == "round"]
    return [c["display"] for c in spec.choices(cl)]


def test_the_round_filter_lists_the_chosen_tasks_rounds_and_filters_by_them(client, researcher, study):
    client.force_login(researcher)
    nli, round1, round2 = study["nli"], study["round1"], study["round2"]
    numbers = list(nli.rounds.order_by("number").values_list("number", flat=True))
    page = listed(client, {"task__id__exact": nli.pk})
    assert round_choices(page) == ["All", *(f"Round {n}" for n in numbers)]
    page = listed(client, {"task__id__exact": nli.pk, "round__id__exact": round2.pk})
    assert {e.external_uid.split("-")[0] for e in page.context["cl"].result_list} == {"later"}
    assert page.context["cl"].result_count == 10
    page = listed(client, {"task__id__exact": nli.pk, "round__number": 1})  # by number, in the URL
    assert page.context["cl"].result_count == 156 and {e.round_id for e in page.context["cl"].result_list} == {
        round1.pk}
    # Without a task: every round of the user's tasks, by task; choosing a task drops the round.
    page = listed(client, {})
    assert "Natural Language Inference, round 2" in round_choices(page)
    page = listed(client, {"round__id__exact": round2.pk})
    cl = page.context["cl"]
    [task_spec] = [s for s in cl.filter_specs if s.title == "task"]
    assert all("round__" not in c["query_string"] for c in task_spec.choices(cl))


def test_a_forged_task_or_round_is_a_clear_400(client, researcher, other_researcher, study):
    nli, hate = study["nli"], study["hate"]
    client.force_login(researcher)
    cases = [
        ({"task__id__exact": "abc"}, "&#x27;abc&#x27; is not the id of a task"),
        ({"task__id__exact": 99999}, "No task #99999 among your tasks"),
        ({"task__id__exact": nli.pk, "round__id__exact": hate.open_round().pk},
         f"No round #{hate.open_round().pk} in task Natural Language Inference"),
        ({"round__id__exact": 99999}, "No round #99999 in your tasks"),
        ({"task__id__exact": nli.pk, "round__number": 7}, "No round 7 in task Natural Language Inference"),
        ({"task__id__exact": nli.pk, "round__number": "1; DROP"}, "is not a round number"),
    ]
    for params, message in cases:
        page = listed(client, params, status=400)
        text = page.content.decode()
        assert message in text and "Traceback" not in text, (params, text[:2000])
        export_page = client.get(EXPORT + "?" + urlencode(params))
        assert export_page.status_code == 400 and message in export_page.content.decode(), params
    # Another researcher's task: not theirs to filter by, nor to list.
    client.force_login(other_researcher)
    assert f"No task #{nli.pk} among your tasks" in listed(client, {"task__id__exact": nli.pk}, 400).content.decode()
    assert listed(client, {}).context["cl"].result_count == 0


def run_export(client, django_capture_on_commit_callbacks, data):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(EXPORT, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    job = Job.objects.get(pk=int(response.url.rstrip("/").rsplit("/", 1)[1]))
    assert response.url == job.get_absolute_url()
    return job


def downloaded(client, job) -> list[dict]:
    response = client.get(reverse("job-file", args=[job.pk]))
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_the_export_job_writes_the_whole_filtered_set_with_progress(client, researcher, study, monkeypatch, job_files,
                                                                    django_capture_on_commit_callbacks):
    monkeypatch.setattr(exporting, "PAGE_SIZE", 40)  # several pages of the exporter too
    client.force_login(researcher)
    nli, round1 = study["nli"], study["round1"]
    # The form comes prefilled from the list's filters.
    form = client.get(EXPORT + "?" + urlencode({"task__id__exact": nli.pk, "round__id__exact": round1.pk,
                                                "retracted__exact": "1"})).context["form"]
    assert (form.initial["task"], form.initial["round"], form.initial["retracted"]) == (nli, round1, "only")
    base = {"task": nli.pk, "round": round1.pk, "retracted": "exclude", "flagged": "exclude", "format": "csv"}
    job = run_export(client, django_capture_on_commit_callbacks, base)
    assert (job.kind, job.status, job.progress, job.task, job.created_by) == (
        "export_examples", "succeeded", 100, nli, researcher)
    assert "finding the CSV columns: 150 examples" in job.log and "exporting: 150 examples" in job.log
    assert job.result["rows"] == 150 and job.result["selection"] == "round 1; retracted and flagged left out"
    rows = downloaded(client, job)
    assert sorted(r["external_uid"] for r in rows) == sorted(f"kept-{i}" for i in range(150))
    [first] = [r for r in rows if r["external_uid"] == "kept-0"]
    assert first["inputs.hypothesis"] == TRICKY and first["metadata.note"] == HTML
    assert (first["metadata.scores.0"], first["metadata.scores.1"], first["target.label"]) == ("1", "2", "neutral")
    page = client.get(job.get_absolute_url()).content.decode()
    assert reverse("job-file", args=[job.pk]) in page and job.result["filename"] in page and "150 examples" in page
    assert client.get(f"/api/jobs/{job.pk}/").json()["file"] == reverse("job-file", args=[job.pk])

    # Asked for: retracted and flagged too; or only the retracted ones; as JSON Lines.
    every = run_export(client, django_capture_on_commit_callbacks,
                       {**base, "retracted": "include", "flagged": "include"})
    assert sorted(r["external_uid"] for r in downloaded(client, every)) == sorted(
        [f"kept-{i}" for i in range(150)] + [f"{kind}-{i}" for kind in ("retracted", "flagged") for i in range(3)])
    only = run_export(client, django_capture_on_commit_callbacks, {**base, "retracted": "only", "format": "jsonl"})
    text = b"".join(client.get(reverse("job-file", args=[only.pk])).streaming_content).decode()
    assert only.result["rows"] == 3 and text.count('"retracted": true') == 3
    # Every round of the task, leaving out the other task's examples.
    whole = run_export(client, django_capture_on_commit_callbacks, {**base, "round": ""})
    assert whole.result["rows"] == 160
    # A file removed from the storage since: 410, saying so.
    job_files.joinpath(whole.result["file"]).unlink()
    gone = client.get(reverse("job-file", args=[whole.pk]))
    assert gone.status_code == 410 and b"was removed" in gone.content


def test_the_export_form_refuses_bad_choices_with_400(client, researcher, study, django_capture_on_commit_callbacks):
    client.force_login(researcher)
    nli, hate = study["nli"], study["hate"]
    cases = [
        ({"task": 99999}, "task", "Select a valid choice"),
        ({"task": nli.pk, "round": hate.open_round().pk}, "round", "is not a round of Natural Language Inference"),
        ({"task": nli.pk, "retracted": "all"}, "retracted", "Select a valid choice"),
        ({"task": nli.pk, "format": "xlsx"}, "format", "Select a valid choice"),
    ]
    for data, field, message in cases:
        response = client.post(EXPORT, {"retracted": "exclude", "flagged": "exclude", "format": "csv", **data})
        assert response.status_code == 400
        assert message in " ".join(response.context["form"].errors[field]), (data, response.context["form"].errors)
    assert not Job.objects.filter(kind=Job.Kind.EXPORT_EXAMPLES).exists()


def test_a_researcher_of_another_task_can_neither_export_nor_see_its_examples(
        client, researcher, other_researcher, study, django_capture_on_commit_callbacks):
    nli = study["nli"]
    client.force_login(researcher)
    job = run_export(client, django_capture_on_commit_callbacks,
                     {"task": nli.pk, "retracted": "exclude", "flagged": "exclude", "format": "csv"})
    client.force_login(other_researcher)
    assert listed(client, {}).context["cl"].result_count == 0
    response = client.post(EXPORT, {"task": nli.pk, "retracted": "exclude", "flagged": "exclude", "format": "csv"})
    assert response.status_code == 400 and "task" in response.context["form"].errors
    assert client.get(EXPORT + f"?task__id__exact={nli.pk}").status_code == 400
    assert Job.objects.filter(kind=Job.Kind.EXPORT_EXAMPLES).count() == 1
    with pytest.raises(Forbidden, match="Only the researchers of task nli can export its examples"):
        exports.start_export(other_researcher, nli, exporting.Selection(task_id=nli.pk))
    download = client.get(reverse("job-file", args=[job.pk]))
    assert download.status_code == 404 and b"No job" in download.content
    assert client.get(job.get_absolute_url()).status_code == 404
    # The researcher who started it, once no longer the task's: no file, and a new export fails.
    nli.owners.remove(researcher)
    client.force_login(researcher)
    assert client.get(reverse("job-file", args=[job.pk])).status_code == 403
    queued = Job.objects.create(kind=Job.Kind.EXPORT_EXAMPLES, task=nli, created_by=researcher,
                                params={"format": "csv"})
    finished = exports.run_export_job(queued.pk)
    assert finished.status == "failed" and "no longer researches task nli" in finished.error
    assert not finished.result


def test_a_failed_or_cancelled_export_leaves_no_file(researcher, study, job_files):
    nli = study["nli"]
    job = Job.objects.create(kind=Job.Kind.EXPORT_EXAMPLES, task=nli, created_by=researcher,
                             params={"format": "csv", "round_number": 9})
    finished = exports.run_export_job(job.pk)
    assert finished.status == "failed" and finished.error == "Task nli has no round 9."
    assert not any(job_files.rglob("*.csv"))
