"""Deleting an account, from the attacker's side: the page says what stays before the
user confirms; the person is wiped (name, address, password, tokens) but the row, its
address hashes and its links stay, so a deleted account's successor at the same
address is still the same person (it cannot validate the deleted writer's examples
nor approve the deleted creator's batch), and every record that named the account
keeps a stable pseudonym, the admin's delete included."""

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from rest_framework.authtoken.models import Token

from annotation import serving, trust, validation
from annotation.exporting import example_record
from annotation.models import AccountAddress, AccountEmail, Example, Validation, VouchedValidator
from core.errors import Forbidden
from core.inboxes import inbox_hash
from crowd import budgets, publishing
from crowd.accounts import delete_account, deleted_name
from crowd.models import Batch, CrowdBudget
from leaderboard.releases.rows import pseudonym

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple 42"  # tests/conftest.py's personas
NEW_PASSWORD = "a-long-enough-pass-123"
HOME = "2001:db8:77:1::10"  # the attacker's IPv6 /64: each visit may come from another address in it
HOME_AGAIN = "2001:db8:77:1::beef"
ELSEWHERE = "198.51.100.44"


@pytest.fixture(autouse=True)
def _no_limits_left_over():
    cache.clear()
    yield
    cache.clear()


def write(task, user, n):
    return [Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=user,
        inputs={"statement": f"Mine {i}"}, target={"label": "positive"}, fooled=True, metadata={"kept": i})
        for i in range(n)]


def sign_up(client, username, address, email=""):
    """An account made on the sign-up page from ``address`` (which signs it in there)."""
    response = client.post("/accounts/signup/", {"username": username, "email": email, "password1": NEW_PASSWORD,
                                                 "password2": NEW_PASSWORD}, REMOTE_ADDR=address)
    assert response.status_code == 302, response.content.decode()[-800:]
    return get_user_model().objects.get(username=username)


def test_the_page_says_what_stays_before_the_user_confirms(demo_tasks, annotator, client):
    write(demo_tasks["sentiment"], annotator, 3)
    client.force_login(annotator)
    page = client.get("/accounts/delete/").content.decode()
    assert 'id="delete-explained"' in page and "The 3 examples you wrote stay" in page and "pseudonym" in page
    refused = client.post("/accounts/delete/", {"confirm": "yes"})
    assert refused.status_code == 200 and 'id="delete-error"' in refused.content.decode()  # the form again
    assert get_user_model().objects.get(pk=annotator.pk).username == "annotator"  # nothing deleted


def test_deleting_wipes_the_person_and_keeps_the_row_its_links_and_its_releases_pseudonym(
        demo_tasks, annotator, client, settings):
    settings.RELEASE_PSEUDONYM_KEY = "a-long-release-pseudonym-key-for-tests"
    task = demo_tasks["sentiment"]
    mine = write(task, annotator, 3)
    before = pseudonym(annotator.pk)
    AccountEmail.objects.create(user=annotator, email="Ann+work@Example.org", inbox=inbox_hash("ann@example.org"))
    AccountAddress.objects.create(user=annotator, address_hash="f" * 64)
    token = Token.objects.create(user=annotator)
    annotator.first_name, annotator.email = "Ann", "ann@example.org"
    annotator.save()
    client.force_login(annotator)
    done = client.post("/accounts/delete/", {"confirm": "delete"})
    assert done.status_code == 200 and 'id="account-deleted"' in done.content.decode()
    shell = get_user_model().objects.get(pk=annotator.pk)
    assert shell.username == deleted_name(annotator.pk) and shell.username.startswith("deleted-")
    assert (shell.email, shell.first_name, shell.is_active, shell.has_usable_password()) == ("", "", False, False)
    assert not Token.objects.filter(pk=token.pk).exists()
    row = AccountEmail.objects.get(user=shell)
    assert row.email == "" and row.inbox == inbox_hash("ann@example.org")  # the address erased, its inbox counted
    assert AccountAddress.objects.filter(user=shell, address_hash="f" * 64).exists()  # the same-person link
    for example in Example.objects.filter(pk__in=[e.pk for e in mine]):
        assert example.annotator_id == shell.pk and example.metadata["kept"] in (0, 1, 2)
        assert pseudonym(example.annotator_id) == before  # releases name the same writer as before
        assert "Ann" not in str(example_record(example))
    assert not client.login(username="annotator", password=PASSWORD)
    assert client.get("/me/").status_code == 302  # signed out


def test_a_deleted_writers_new_account_at_the_same_address_still_counts_as_the_writer(demo_tasks, client):
    """The writer signs up, writes, deletes the account and signs up again from another
    address of the same IPv6 /64: the new account may not validate what the deleted
    one wrote, and the queue never serves it; a stranger elsewhere is served it."""
    task = demo_tasks["sentiment"]
    writer = sign_up(client, "writer", HOME)
    [example] = write(task, writer, 1)
    assert client.post("/accounts/delete/", {"confirm": "delete"}, REMOTE_ADDR=HOME).status_code == 200
    again = sign_up(client, "writer-again", HOME_AGAIN)
    assert trust.counts_as_writer(again, Example.objects.get(pk=example.pk))
    assert serving.next_for(task, again) is None
    with pytest.raises(Forbidden, match="counts as the writer"):
        validation.give_blind_answer(example.pk, again, {"label": "positive"})
    with pytest.raises(Forbidden, match="counts as the writer"):
        validation.validate_example(example.pk, again, label="correct")
    assert not Validation.objects.filter(validator=again).exists()
    stranger = sign_up(client, "stranger", ELSEWHERE)
    assert serving.next_for(task, stranger).pk == example.pk  # the queue serves it to another person


def test_a_deleted_creators_new_account_cannot_approve_the_batch(live_tasks, side, client, superuser, settings):
    """A researcher publishes a batch over the threshold, deletes the account, and signs
    up again from the same /64; the new account is made a superuser. It is still the
    creator: it cannot approve. Another superuser, elsewhere, can."""
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("0.50")
    task = live_tasks["sentiment"]
    creator = sign_up(client, "creator", HOME)
    task.owners.add(creator)
    batch = side.publish(task, user=creator)
    assert batch.status == Batch.Status.AWAITING_APPROVAL
    assert client.post("/accounts/delete/", {"confirm": "delete"}, REMOTE_ADDR=HOME).status_code == 200
    again = sign_up(client, "creator-again", HOME_AGAIN)
    again.is_staff = again.is_superuser = True
    again.save()
    assert "counts as its creator" in publishing.may_approve(batch, again)
    with pytest.raises(Forbidden, match="counts as its creator"):
        publishing.approve(batch, again)
    assert Batch.objects.get(pk=batch.pk).status == Batch.Status.AWAITING_APPROVAL
    assert publishing.approve(batch, superuser).status == Batch.Status.PUBLISHED  # a second person


def test_a_second_account_at_the_creators_address_is_not_a_second_person(live_tasks, crowd, django_user_model,
                                                                         settings):
    """Without any deletion: two accounts seen at one address are one person, for the
    approval and for what the same person published alone in the day."""
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("1.00")
    task = live_tasks["sentiment"]
    first = django_user_model.objects.create_user("lab-a", password=PASSWORD, is_staff=True)
    second = django_user_model.objects.create_user("lab-b", password=PASSWORD, is_staff=True, is_superuser=True)
    for account in (first, second):
        task.owners.add(account)
        trust.record_address(account, "203.0.113.9")
    request = dict(task=task, mode="create", hits=1, assignments_per_hit=1, reward=Decimal("0.60"))
    assert publishing.publish(publishing.BatchRequest(**request), user=first).status == Batch.Status.PUBLISHED
    # The second account's batch adds to the first's: together over the threshold, it waits.
    assert budgets.published_alone(task, True, second) > 0
    waiting = publishing.publish(publishing.BatchRequest(**request), user=second)
    assert waiting.status == Batch.Status.AWAITING_APPROVAL
    big = publishing.publish(publishing.BatchRequest(**{**request, "hits": 3}), user=first)
    with pytest.raises(Forbidden, match="counts as its creator"):
        publishing.approve(big, second)


def test_the_admins_delete_keeps_the_row_and_every_record_names_it_by_its_pseudonym(
        demo_tasks, researcher, annotator, superuser, client):
    task = demo_tasks["sentiment"]
    CrowdBudget.objects.create(task=task, amount=Decimal("5.00"), set_by=researcher)
    vouched = trust.vouch(task, annotator, researcher)
    batch = Batch.objects.create(task=task, round=task.open_round(), mode="create", sandbox=True, title="t",
                                 description="d", hits=1, assignments_per_hit=1, reward=Decimal("0.10"),
                                 created_by=researcher, status=Batch.Status.CANCELLED)
    client.force_login(superuser)
    # Django's own delete (the page and the list's action) would remove the row and blank these records.
    assert client.post(f"/admin/auth/user/{researcher.pk}/delete/", {"post": "yes"}).status_code == 403
    listing = client.get("/admin/auth/user/").content.decode()
    assert "delete_selected" not in listing and "delete_accounts" in listing
    done = client.post("/admin/auth/user/", {"action": "delete_accounts", "_selected_action": [researcher.pk]})
    assert done.status_code == 302
    name = deleted_name(researcher.pk)
    batch.refresh_from_db()
    assert batch.created_by_id == researcher.pk and str(batch.created_by) == name
    assert str(VouchedValidator.objects.get(pk=vouched.pk).vouched_by) == name
    assert str(CrowdBudget.objects.get(task=task).set_by) == name
    shell = get_user_model().objects.get(pk=researcher.pk)
    assert (shell.is_active, shell.is_staff, shell.email, shell.has_usable_password()) == (False, False, "", False)
    assert get_user_model().objects.filter(username=name).count() == 1
    # Deleting again (by another superuser, or itself) changes no name: the pseudonym is stable.
    delete_account(shell, by=superuser)
    assert get_user_model().objects.get(pk=researcher.pk).username == name


def test_the_admin_refuses_to_delete_a_workers_account_or_its_own(demo_tasks, mturk_worker, superuser, client):
    client.force_login(superuser)
    client.post("/admin/auth/user/", {"action": "delete_accounts", "_selected_action": [mturk_worker.pk,
                                                                                        superuser.pk]})
    assert get_user_model().objects.get(pk=mturk_worker.pk).is_active
    assert get_user_model().objects.get(pk=superuser.pk).is_active
    with pytest.raises(Forbidden):
        delete_account(superuser, by=mturk_worker)


def test_nobody_signs_up_under_a_deleted_accounts_name(db, client):
    page = client.post("/accounts/signup/", {"username": "deleted-0123456789abcdef", "password1": NEW_PASSWORD,
                                             "password2": NEW_PASSWORD}, REMOTE_ADDR=ELSEWHERE)
    assert page.status_code == 200 and "name deleted accounts" in page.content.decode()
    assert not get_user_model().objects.filter(username__startswith="deleted-").exists()


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
