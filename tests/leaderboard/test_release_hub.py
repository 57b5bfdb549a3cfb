"""``release_dataset --push``: the folder goes to the Hub (here a fake Hub on a local port,
reached through huggingface_hub's own HTTP calls), and without a token, a Hub or a
network it stays written and the command says so."""

import socket

import pytest
from django.core.management import CommandError, call_command

from leaderboard.models import Release
from leaderboard.releases.files import sha256_of
from tests.fake_hub import FakeHub

pytestmark = pytest.mark.django_db(transaction=True)  # the command waits for its job, run once it commits


def written(folder):
    return {p.relative_to(folder).as_posix(): sha256_of(p) for p in folder.rglob("*") if p.is_file()}


def test_push_uploads_the_folder_to_the_hub(release_world, settings, tmp_path):
    with FakeHub(token="hf_write_token") as hub:
        settings.HF_TOKEN, settings.HF_ENDPOINT = "hf_write_token", hub.url
        out = tmp_path / "release"
        call_command("release_dataset", "--task", "nli", "--rounds", "0,1", "--out", str(out),
                     "--push", "me/dynabench-nli", "--private")
    assert hub.digests("datasets/me/dynabench-nli") == written(out)  # every file, byte for byte
    release = Release.objects.get()
    assert set(written(out)) == set(release.files)
    assert hub.private["datasets/me/dynabench-nli"] is True
    assert hub.commits == [{"repo": "datasets/me/dynabench-nli", "oid": hub.commits[0]["oid"],
                            "summary": "Dynabench release nli v1 (rounds [0, 1])"}]
    assert ("POST", "/api/validate-yaml") in hub.requests  # the Hub checked the card's header


def test_without_a_token_nothing_is_pushed_and_the_folder_is_written(release_world, settings, tmp_path):
    settings.HF_TOKEN = ""
    out = tmp_path / "release"
    with pytest.raises(CommandError, match=f"no HF_TOKEN is configured. The release is written to {out}"):
        call_command("release_dataset", "--task", "nli", "--rounds", "1", "--out", str(out), "--push", "me/nli")
    assert set(written(out)) == set(Release.objects.get().files)


def test_an_unreachable_hub_or_a_refused_token_is_said_plainly(release_world, settings, tmp_path):
    with socket.socket() as probe:  # a port where nothing listens: no network to the Hub
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings.HF_TOKEN, settings.HF_ENDPOINT = "hf_write_token", f"http://127.0.0.1:{closed}"
    with pytest.raises(CommandError, match="cannot be reached .*The release is written to"):
        call_command("release_dataset", "--task", "nli", "--rounds", "1", "--out", str(tmp_path / "a"),
                     "--push", "me/nli")
    with FakeHub(token="another token") as hub:
        settings.HF_ENDPOINT = hub.url
        with pytest.raises(CommandError, match="refused the upload .*401"):
            call_command("release_dataset", "--task", "nli", "--rounds", "1", "--out", str(tmp_path / "b"),
                         "--push", "me/nli")
    assert hub.repos == {}
    assert (tmp_path / "a" / "README.md").is_file() and (tmp_path / "b" / "README.md").is_file()
    with pytest.raises(CommandError, match="not a Hub repository id"):
        call_command("release_dataset", "--task", "nli", "--rounds", "1", "--push", "no-owner")
