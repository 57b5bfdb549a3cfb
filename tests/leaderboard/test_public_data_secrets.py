"""What the public may see holds no secret, tried from the outside: a visitor who reads the
data browser, the release listing and downloads, and a HIT's preview looks for the gold
items' answer key and for the leaderboard's test data (``leaderboard.releases.public``,
``annotation.gold``)."""

import re

import pytest
from django.urls import reverse

from annotation import gold
from annotation.models import Example
from crowd.views import _sample
from jobs.models import Job
from leaderboard.models import Release
from leaderboard.releases import browse, service
from leaderboard.releases.rows import released_rows
from tasks.models import Round
from tests.leaderboard.release_data import body

pytestmark = pytest.mark.django_db


def shown_uids(client, **query) -> set[str]:
    page = client.get(reverse("public-examples", args=["nli"]), query)
    assert page.status_code == 200, page.content
    return set(re.findall(r'data-uid="([0-9a-f-]+)"', page.content.decode()))


def release_uids(task, rounds, split) -> set[str]:
    rows = Round.objects.filter(task=task, number__in=rounds).order_by("number")
    return {row["uid"] for chunk in released_rows(task, list(rows), split) for row in chunk.rows}


def make_release(task, user, capture, **options) -> Release:
    with capture(execute=True):
        job = service.start_release(task, rounds=[0, 1], user=user, **options)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    return Release.objects.get(pk=job.result["release"])


def test_a_gold_item_in_use_is_never_public_and_a_retired_one_is_never_served_again(
        release_world, researcher, client, client_for, django_capture_on_commit_callbacks):
    task = release_world.task
    # A gold item made while round 1 was open (its round closed since): a fooling,
    # verified example of the train split, the newest, which the HIT preview would show.
    item = max((e for e in release_world.released if e.round.number == 1 and e.split == "train" and e.fooled),
               key=lambda e: e.pk)
    Example.objects.filter(pk=item.pk).update(gold_verdict="correct")
    before = {r.number: r.usable for r in browse.public_rounds(task)}

    assert str(item.uid) not in shown_uids(client, round=1)
    assert str(item.uid) not in shown_uids(client, round=1, q=item.inputs["hypothesis"])
    assert str(item.uid) not in release_uids(task, [1], "train")
    assert _sample(task) is None or _sample(task)["inputs"] != item.inputs
    release = make_release(task, researcher, django_capture_on_commit_callbacks)
    assert str(item.uid) not in release_uids(task, [1], "train")
    assert release.counts["splits"]["train"]["rows"] == sum(
        1 for e in release_world.released if e.split == "train") - 1

    # Retired by a researcher (the API's DELETE): public like any example, never served again.
    stranger = client_for(release_world.withheld[0].annotator)
    assert stranger.delete(f"/api/examples/{item.pk}/gold/").status_code == 403
    assert client_for(researcher).delete(f"/api/examples/{item.pk}/gold/").status_code == 200
    item.refresh_from_db()
    assert item.gold_retired_at is not None and item.gold_verdict == "correct"  # still evidence
    assert str(item.uid) in shown_uids(client, round=1)
    assert str(item.uid) in release_uids(task, [1], "train")
    assert {r.number: r.usable for r in browse.public_rounds(task)}[1] == before[1] + 1
    assert not gold.gold_items(task).filter(gold_retired_at__isnull=True).exists()
    task.config = {**task.config, "validation": {**task.config.get("validation", {}), "gold_rate": 1.0}}
    task.save()
    assert gold.pick(task, release_world.withheld[0].annotator) is None

    # An example that may have been public (decided, of a closed round) never becomes a gold item.
    shown_before = next(e for e in release_world.released if e.round.number == 1 and e.pk != item.pk)
    refused = client_for(researcher).post(f"/api/examples/{shown_before.pk}/gold/", {"verdict": "correct"},
                                          format="json")
    assert refused.status_code == 409 and "public" in refused.json()["detail"]
    shown_before.refresh_from_db()
    assert shown_before.gold_verdict == ""


def test_the_test_split_is_public_only_once_a_researcher_releases_it_on_purpose(
        release_world, researcher, client, anonymous, django_capture_on_commit_callbacks):
    task = release_world.task
    test_uids = {str(e.uid) for e in release_world.released if e.split == "test"}
    assert test_uids  # rounds 0 and 1 both have test examples
    for number in (0, 1):
        assert not shown_uids(client, round=number) & test_uids
        page = client.get(reverse("public-examples", args=["nli"]), {"round": number, "split": "test"})
        assert 'id="test-withheld"' in page.content.decode() and "data-uid" not in page.content.decode()

    # A release by default leaves the test split out; naming it without saying so is refused.
    ordinary = make_release(task, researcher, django_capture_on_commit_callbacks)
    assert ordinary.splits == ["train", "dev"] and not ordinary.test_split_released
    with pytest.raises(Exception, match="release_test_split"):
        service.start_release(task, rounds=[0, 1], splits=["test"], user=researcher)
    assert not shown_uids(client, round=1) & test_uids

    # A release made before the rule, with a test split nobody released on purpose: the
    # public lists and downloads its other files, never that one.
    legacy = Release.objects.create(
        task=task, version=2, rounds=[0, 1], splits=["train", "test"], counts={"splits": {}},
        files={**ordinary.files, "data/test.parquet": ordinary.files["data/train.parquet"]},
        license="unspecified", location=ordinary.location)
    listed = anonymous.get(reverse("api:release-detail", args=["nli", 2])).json()
    assert "data/test.parquet" not in {f["path"] for f in listed["files"]}
    assert anonymous.get(reverse("release-file", args=["nli", 2, "data/test.parquet"])).status_code == 404
    train = anonymous.get(reverse("release-file", args=["nli", 2, "data/train.parquet"]))
    assert train.status_code == 200 and body(train)
    assert "data/test.parquet" not in client.get(reverse("public-examples", args=["nli"])).content.decode()
    assert not shown_uids(client, round=1) & test_uids and legacy.pk

    # Released on purpose: recorded on the release (who, when), and public from then on.
    on_purpose = make_release(task, researcher, django_capture_on_commit_callbacks, release_test_split=True)
    assert on_purpose.splits == ["train", "dev", "test"] and on_purpose.test_split_released
    assert on_purpose.created_by == researcher and on_purpose.job.params["release_test_split"] is True
    download = anonymous.get(reverse("release-file", args=["nli", on_purpose.version, "data/test.parquet"]))
    assert download.status_code == 200 and body(download)
    assert test_uids <= shown_uids(client, round=0) | shown_uids(client, round=1)
    assert {r.number: r.usable for r in browse.public_rounds(task)}[1] == sum(
        1 for e in release_world.released if e.round.number == 1)


def test_the_hit_preview_never_shows_a_test_split_example(release_world):
    task = release_world.task
    Example.objects.filter(task=task).exclude(split="test").update(fooled=False)
    assert _sample(task) is None  # the only fooling verified examples left are of the test split
