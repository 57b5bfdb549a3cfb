"""A user deletes their account: the page says what stays before they confirm, their
examples stay anonymised (the release's annotator pseudonym only), and the account
can never sign in again."""

import pytest
from django.contrib.auth import get_user_model

from annotation.exporting import DELETED_ANNOTATOR_KEY, example_record
from annotation.models import AccountAddress, AccountEmail, Example
from core.errors import Forbidden
from crowd.accounts import delete_account
from leaderboard.releases.rows import deleted_pseudonym, pseudonym

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple 42"  # tests/conftest.py's personas


def write(task, user, n):
    return [Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=user,
        inputs={"statement": f"Mine {i}"}, target={"label": "positive"}, fooled=True, metadata={"kept": i})
        for i in range(n)]


def test_the_page_says_what_stays_before_the_user_confirms(demo_tasks, annotator, client):
    write(demo_tasks["sentiment"], annotator, 3)
    client.force_login(annotator)
    page = client.get("/accounts/delete/").content.decode()
    assert 'id="delete-explained"' in page and "The 3 examples you wrote stay" in page and "anonymised" in page
    refused = client.post("/accounts/delete/", {"confirm": "yes"})
    assert refused.status_code == 200 and 'id="delete-error"' in refused.content.decode()  # the form again
    assert get_user_model().objects.get(pk=annotator.pk).username == "annotator"  # nothing deleted


def test_deleting_keeps_the_examples_with_the_release_pseudonym_only(demo_tasks, annotator, client, settings):
    settings.RELEASE_PSEUDONYM_KEY = "a-long-release-pseudonym-key-for-tests"
    task = demo_tasks["sentiment"]
    mine = write(task, annotator, 3)
    expected = pseudonym(annotator.pk)
    AccountEmail.objects.create(user=annotator, email="a@example.org")
    AccountAddress.objects.create(user=annotator, address_hash="f" * 64)
    client.force_login(annotator)
    done = client.post("/accounts/delete/", {"confirm": "delete"})
    assert done.status_code == 200 and 'id="account-deleted"' in done.content.decode()
    for example in Example.objects.filter(pk__in=[e.pk for e in mine]):
        assert example.annotator_id is None
        assert example.metadata[DELETED_ANNOTATOR_KEY] == expected and example.metadata["kept"] in (0, 1, 2)
        assert deleted_pseudonym(example) == expected  # the release names the same writer as before
        record = example_record(example)
        assert DELETED_ANNOTATOR_KEY not in (record["metadata"] or {})
    shell = get_user_model().objects.get(pk=annotator.pk)
    assert shell.username.startswith("deleted-") and shell.email == "" and not shell.is_active
    assert not shell.has_usable_password()
    assert not AccountEmail.objects.filter(user=shell).exists() and not AccountAddress.objects.filter(user=shell)
    assert not client.login(username="annotator", password=PASSWORD)
    assert client.get("/me/").status_code == 302  # signed out


def test_without_a_release_key_the_examples_keep_no_pseudonym(demo_tasks, annotator, settings):
    settings.RELEASE_PSEUDONYM_KEY = ""
    [example] = write(demo_tasks["sentiment"], annotator, 1)
    assert delete_account(annotator) == 1
    example.refresh_from_db()
    assert example.annotator_id is None and DELETED_ANNOTATOR_KEY not in example.metadata


def test_an_mturk_workers_account_is_not_deleted_here(demo_tasks, mturk_worker, client):
    write(demo_tasks["sentiment"], mturk_worker, 1)
    with pytest.raises(Forbidden):
        delete_account(mturk_worker)
    client.force_login(mturk_worker)
    assert "is not deleted" in client.get("/accounts/delete/").content.decode()
    refused = client.post("/accounts/delete/", {"confirm": "delete"})
    assert "is not deleted" in refused.content.decode()
    assert Example.objects.filter(annotator=mturk_worker).count() == 1


def test_deleting_needs_a_sign_in(client):
    assert client.post("/accounts/delete/", {"confirm": "delete"}).status_code == 302
