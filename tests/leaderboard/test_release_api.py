"""Releases from the API and the admin, and their downloads."""

import hashlib
import re

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from jobs.models import Job
from leaderboard.models import Release
from leaderboard.releases import service
from tests.leaderboard.release_data import body

# --- the API ---------------------------------------------------------------------------


def test_researchers_make_a_release_by_the_api_and_anyone_lists_it(release_world, client_for, researcher, anonymous,
                                                                   django_capture_on_commit_callbacks):
    url = reverse("api:release-list", args=["nli"])
    unasked = client_for(researcher).post(url, {"rounds": [0, 1], "splits": ["train", "test"]}, format="json")
    assert unasked.status_code == 400 and "release_test_split" in unasked.json()["detail"]  # the test split: on purpose
    assert not Job.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        answer = client_for(researcher).post(url, {"rounds": [0, 1], "splits": ["train"], "release_test_split": True},
                                             format="json")
    assert answer.status_code == 202 and answer.json()["kind"] == "release_dataset"
    job = Job.objects.get(pk=answer.json()["id"])
    assert job.status == Job.Status.SUCCEEDED and job.created_by == researcher
    page = client_for(researcher).get(job.get_absolute_url()).content.decode()
    assert '<a href="/tasks/nli/#release-v1">v1</a>' in page and 'value="rerun"' not in page
    listed = anonymous.get(url)
    assert listed.status_code == 200
    [release] = listed.json()["results"]
    assert (release["version"], release["rounds"], release["splits"], release["license"]) == (
        1, [0, 1], ["train", "test"], "unspecified")
    assert release["rows"] == sum(1 for e in release_world.released if e.split in ("train", "test"))
    files = {f["path"]: f for f in release["files"]}
    assert set(files) == {"README.md", "croissant.json", "data/train.parquet", "data/test.parquet"}
    download = anonymous.get(files["data/train.parquet"]["url"])
    assert download.status_code == 200
    assert hashlib.sha256(body(download)).hexdigest() == files["data/train.parquet"]["sha256"]
    detail = anonymous.get(reverse("api:release-detail", args=["nli", 1]))
    assert detail.status_code == 200 and detail.json()["files"] == release["files"]
    assert anonymous.get(reverse("api:release-detail", args=["nli", 2])).status_code == 404


def test_the_api_refuses_with_the_reason(release_world, client_for, researcher, other_researcher, annotator, anonymous):
    url = reverse("api:release-list", args=["nli"])
    assert anonymous.post(url, {"rounds": [1]}, format="json").status_code in (401, 403)
    assert client_for(annotator).post(url, {"rounds": [1]}, format="json").status_code == 403
    assert client_for(other_researcher).post(url, {"rounds": [1]}, format="json").status_code == 403
    me = client_for(researcher)
    answer = me.post(url, {"rounds": [1, 2]}, format="json")
    assert answer.status_code == 409 and "Round 2 of nli is open" in answer.json()["detail"]
    answer = me.post(url, {"rounds": ["one"]}, format="json")
    assert answer.status_code == 400 and all(key.startswith("rounds") for key in answer.json()["errors"])
    answer = me.post(url, {"rounds": [1], "splits": ["validation"]}, format="json")
    assert answer.status_code == 400 and "splits" in str(answer.json()["errors"])
    answer = me.post(url, {"rounds": [9]}, format="json")
    assert answer.status_code == 400 and answer.json()["errors"] == {"rounds": ["Task nli has no round 9."]}
    assert not Job.objects.filter(kind=Job.Kind.RELEASE_DATASET).exists()


# --- downloads --------------------------------------------------------------------------


def test_every_file_downloads_as_it_was_recorded(released, client):
    for name, entry in released.files.items():
        response = client.get(reverse("release-file", args=["nli", 1, name]))
        assert response.status_code == 200, name
        assert hashlib.sha256(body(response)).hexdigest() == entry["sha256"]
        assert response["Content-Disposition"].startswith("attachment;")
    for wrong in ("data/../README.md", "data/other.parquet", "../../secret"):
        assert client.get(reverse("release-file", args=["nli", 1, wrong])).status_code == 404
    assert client.get(reverse("release-file", args=["nli", 7, "README.md"])).status_code == 404


def test_a_release_in_object_storage_downloads_through_a_signed_address(release_world, s3_store, client, tmp_path,
                                                                        django_capture_on_commit_callbacks):
    import requests

    with django_capture_on_commit_callbacks(execute=True):
        service.start_release(release_world.task, rounds=[1])
    release = Release.objects.get()
    assert release.location.startswith(f"s3://{s3_store}/store/releases/nli/v1-")
    response = client.get(reverse("release-file", args=["nli", 1, "data/train.parquet"]))
    assert response.status_code == 302
    fetched = requests.get(response["Location"], timeout=30)
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == release.files["data/train.parquet"]["sha256"]
    written = service.copy_release(release, tmp_path / "copy")
    assert {p.relative_to(tmp_path / "copy").as_posix() for p in written} == set(release.files)


# --- the admin ---------------------------------------------------------------------------


def test_the_admin_makes_a_release_and_shows_it_read_only(release_world, client, researcher,
                                                          django_capture_on_commit_callbacks):
    client.force_login(researcher)
    url = reverse("admin:tasks_task_changelist")
    selected = {"action": "release_dataset", ACTION_CHECKBOX_NAME: [release_world.task.pk]}
    form = client.post(url, selected)
    assert form.status_code == 200 and 'value="Make the release"' in form.content.decode()
    public = {n: sum(1 for e in release_world.released if e.round.number == n and e.split != "test") for n in (0, 1)}
    assert f"closed rounds 0 ({public[0]} verified), 1 ({public[1]} verified)" in form.content.decode()
    refused = client.post(url, {**selected, "apply": "1", "rounds": "1, 2", "splits": ["train"]}, follow=True)
    assert [str(m) for m in refused.context["messages"]] == [
        "Natural Language Inference: Round 2 of nli is open: its examples are still being written and validated, "
        "and nothing from an open round is released. Close the round first (or leave it out)."]
    bad = client.post(url, {**selected, "apply": "1", "rounds": "first", "splits": ["train"]})
    assert bad.status_code == 200 and "Write round numbers separated by commas" in bad.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(url, {**selected, "apply": "1", "rounds": "0, 1", "splits": ["train", "dev", "test"],
                                 "release_test_split": "on"}, follow=True)
    [message] = [str(m) for m in done.context["messages"]]
    assert re.fullmatch(r'Natural Language Inference: release job <a href="/jobs/\d+/">#\d+</a> queued\.', message)
    release = Release.objects.get()
    assert release.splits == ["train", "dev", "test"] and release.test_split_released
    page = client.get(reverse("admin:leaderboard_release_change", args=[release.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert release.files["README.md"]["sha256"] in text and 'name="_save"' not in text
    delete = reverse("admin:leaderboard_release_delete", args=[release.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert Release.objects.filter(pk=release.pk).exists()


def test_another_tasks_researcher_sees_no_release_in_the_admin(released, client, other_researcher):
    client.force_login(other_researcher)
    assert client.get(reverse("admin:leaderboard_release_change", args=[released.pk])).status_code in (302, 403, 404)
    listed = client.get(reverse("admin:leaderboard_release_changelist"))
    assert listed.status_code in (200, 403)
    assert "nli v1" not in listed.content.decode()
