"""Site accounts: the e-mail address confirmed at sign-up, votes of an unconfirmed
account that never count, and password reset by e-mail, all through Django's own
views and token generator (the test client and mail.outbox)."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.utils import timezone

from annotation import trust, validation
from annotation.accounts import email_tokens
from annotation.models import AccountEmail, Example, Validation
from annotation.serving import assign

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-pass-123"
NEW_PASSWORD = "another-long-pass-456"


def sign_up(client, username, email):
    return client.post("/accounts/signup/", {"username": username, "email": email, "password1": PASSWORD,
                                             "password2": PASSWORD})


def link_in(message, path):
    return re.search(rf"https?://\S+{path}\S+", message.body).group(0)


def test_sign_up_sends_a_link_that_confirms_the_address_once(client):
    assert sign_up(client, "walker", "walker@example.org").status_code == 302
    [message] = mail.outbox
    assert message.to == ["walker@example.org"] and "confirm" in message.subject.lower()
    user = get_user_model().objects.get(username="walker")
    assert user.email == "walker@example.org" and trust.email_unverified(user)
    link = link_in(message, "/accounts/verify/")
    page = client.get(link)
    assert page.status_code == 200 and 'id="email-confirmed"' in page.content.decode()
    assert not trust.email_unverified(user)
    assert AccountEmail.objects.get(user=user).verified_at is not None
    used = client.get(link)  # the token covers the confirmation: a second use is refused
    assert used.status_code == 404 and 'id="email-confirm-error"' in used.content.decode()


def test_a_forged_or_foreign_confirmation_link_confirms_nothing(client, django_user_model):
    sign_up(client, "walker", "walker@example.org")
    victim = django_user_model.objects.get(username="walker")
    link = link_in(mail.outbox[0], "/accounts/verify/")
    uid = link.rstrip("/").split("/")[-2]
    for bad in (f"/accounts/verify/{uid}/forged-token/", "/accounts/verify/!!!/x/",
                f"/accounts/verify/{uid}/{email_tokens.make_token(victim)}x/", "/accounts/verify/OTk5OTk5/abc-def/"):
        assert client.get(bad).status_code == 404, bad
    assert trust.email_unverified(victim)
    # A token made for another address (the account changed it since) no longer works.
    token = email_tokens.make_token(victim)
    AccountEmail.objects.filter(user=victim).update(email="new@example.org")
    assert client.get(f"/accounts/verify/{uid}/{token}/").status_code == 404
    assert trust.email_unverified(victim)


def test_sign_up_without_an_address_may_write_but_says_votes_need_one(client):
    page = client.get("/accounts/signup/").content.decode()
    assert 'name="email"' in page and "votes count only once it is confirmed" in page
    assert sign_up(client, "quiet", "").status_code == 302
    assert mail.outbox == []
    assert trust.email_unverified(get_user_model().objects.get(username="quiet"))


def test_an_unconfirmed_accounts_votes_never_count(demo_tasks, annotator, django_user_model):
    """Enforced where votes are weighed (trust.why_not_counted), for an account old and
    vouched-for enough that nothing else would hold its vote back."""
    from annotation.models import VouchedValidator

    task = demo_tasks["sentiment"]
    voter = django_user_model.objects.create_user("voter", password=PASSWORD,
                                                  date_joined=timezone.now() - timedelta(days=90))
    VouchedValidator.objects.create(task=task, validator=voter)
    AccountEmail.objects.create(user=voter, email="voter@example.org")
    first, second = (Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=annotator,
        inputs={"statement": f"Text {i}"}, target={"label": "positive"}, fooled=True) for i in range(2))
    for example in (first,):
        assign(example, voter)
        validation.give_blind_answer(example.pk, voter, {"label": "positive"})
        validation.validate_example(example.pk, voter, label="correct")
    vote = Validation.objects.get(example=first, validator=voter)
    assert vote.counted is False and vote.not_counted_because == Validation.NotCounted.UNVERIFIED
    first.refresh_from_db()
    assert first.validation_status == Example.ValidationStatus.PENDING and first.validations_correct == 0
    assert "confirm your e-mail address" in trust.reasons([vote])[vote.pk][1]
    # Once confirmed, the same account's next vote counts (the earlier one stays as it was).
    AccountEmail.objects.filter(user=voter).update(verified_at=timezone.now())
    assign(second, voter)
    validation.give_blind_answer(second.pk, voter, {"label": "positive"})
    validation.validate_example(second.pk, voter, label="correct")
    assert Validation.objects.get(example=second, validator=voter).counted is True
    assert Validation.objects.get(example=first, validator=voter).counted is False


def test_password_reset_by_e_mail_through_djangos_views(client, django_user_model):
    user = django_user_model.objects.create_user("resetter", email="resetter@example.org", password=PASSWORD)
    form = client.get("/accounts/password-reset/")
    assert form.status_code == 200 and 'name="email"' in form.content.decode()
    sent = client.post("/accounts/password-reset/", {"email": "resetter@example.org"})
    assert sent.status_code == 302 and sent["Location"] == "/accounts/password-reset/sent/"
    [message] = mail.outbox
    assert message.to == ["resetter@example.org"]
    link = link_in(message, "/accounts/reset/")
    confirm = client.get(link, follow=True)
    assert confirm.status_code == 200 and 'name="new_password1"' in confirm.content.decode()
    done = client.post(confirm.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD,
                                                       "new_password2": NEW_PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD) and not user.check_password(PASSWORD)
    again = client.get(link, follow=True)  # the link worked once
    assert 'id="reset-invalid"' in again.content.decode()
    # An unknown address: the same answer, and no e-mail (nothing tells which addresses exist).
    assert client.post("/accounts/password-reset/", {"email": "nobody@example.org"}).status_code == 302
    assert len(mail.outbox) == 1


def test_mturk_workers_get_no_password_reset(client, mturk_worker):
    mturk_worker.email = "worker@example.org"
    mturk_worker.set_unusable_password()
    mturk_worker.save()
    client.post("/accounts/password-reset/", {"email": "worker@example.org"})
    assert mail.outbox == []


def test_the_validate_page_says_an_unconfirmed_accounts_votes_do_not_count(demo_tasks, django_user_model, client):
    voter = django_user_model.objects.create_user("voter", password=PASSWORD,
                                                  date_joined=timezone.now() - timedelta(days=90))
    row = AccountEmail.objects.create(user=voter, email="voter@example.org")
    client.force_login(voter)
    assert 'id="email-unconfirmed"' in client.get("/tasks/sentiment/validate/").content.decode()
    row.verified_at = timezone.now()
    row.save()
    assert 'id="email-unconfirmed"' not in client.get("/tasks/sentiment/validate/").content.decode()


def test_password_reset_mail_is_limited_per_address(client, django_user_model, settings):
    from django.core.cache import cache

    cache.clear()
    settings.SIGNUPS_PER_ADDRESS = 2
    django_user_model.objects.create_user("resetter", email="resetter@example.org", password=PASSWORD)
    codes = [client.post("/accounts/password-reset/", {"email": "resetter@example.org"}).status_code
             for _ in range(3)]
    assert codes == [302, 302, 429] and len(mail.outbox) == 2
    cache.clear()


def test_the_worker_page_sends_the_confirmation_link_again(client, django_user_model):
    sign_up(client, "walker", "walker@example.org")
    page = client.get("/me/").content.decode()
    assert 'id="email-unverified"' in page and 'id="send-confirmation"' in page
    again = client.post("/accounts/verify/send/")
    assert again.status_code == 302 and again["Location"] == "/me/" and len(mail.outbox) == 2
    assert client.get(link_in(mail.outbox[1], "/accounts/verify/")).status_code == 200
    assert 'id="email-unverified"' not in client.get("/me/").content.decode()
    client.logout()
    assert client.post("/accounts/verify/send/").status_code == 302 and len(mail.outbox) == 2


def test_a_password_reset_ends_every_token_copied_before_it(client, django_user_model, demo_tasks):
    """Someone copied the victim's API token and an annotation session token (a laptop,
    a log, a shared script). The victim resets the password by e-mail: both stop
    working at once, and the victim's new sign-in gets a new token that works."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from annotation import sessions
    from annotation.tokens import make_token

    task = demo_tasks["sentiment"]
    victim = django_user_model.objects.create_user("victim", email="victim@example.org", password=PASSWORD)
    stolen = APIClient().post("/api/auth/token/", {"username": "victim", "password": PASSWORD}).json()["token"]
    by_key, by_session = APIClient(), APIClient()
    by_key.credentials(HTTP_AUTHORIZATION=f"Token {stolen}")
    by_session.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(sessions.start_session(victim, task)))
    assert by_key.get("/api/me/").status_code == 200
    assert by_session.get(f"/api/tasks/{task.slug}/validations/next/").status_code in (200, 204)

    client.post("/accounts/password-reset/", {"email": "victim@example.org"})
    confirm = client.get(link_in(mail.outbox[-1], "/accounts/reset/"), follow=True)
    done = client.post(confirm.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert done.status_code == 302

    assert by_key.get("/api/me/").status_code == 401
    assert not Token.objects.filter(key=stolen).exists()
    ended = by_session.get(f"/api/tasks/{task.slug}/validations/next/")
    assert ended.status_code == 401 and "password changed" in ended.json()["detail"]
    fresh = APIClient().post("/api/auth/token/", {"username": "victim", "password": NEW_PASSWORD}).json()["token"]
    assert fresh != stolen
    again = APIClient()
    again.credentials(HTTP_AUTHORIZATION=f"Token {fresh}")
    assert again.get("/api/me/").status_code == 200


def test_a_sign_in_keeps_the_token_and_a_password_change_anywhere_ends_it(django_user_model):
    """The revocation follows the stored password, not the page: a sign-in (which saves
    the account's last_login) keeps the token; the admin's form or a command's
    set_password ends it; saving the account with the same password does not."""
    from django.test import Client
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("changer", password=PASSWORD)
    token = Token.objects.create(user=user)
    assert Client().login(username="changer", password=PASSWORD)
    user.refresh_from_db()
    assert user.last_login is not None
    user.first_name = "Chang"
    user.save()
    assert Token.objects.filter(pk=token.pk).exists()
    user.set_password(NEW_PASSWORD)
    user.save(update_fields=["password"])
    assert not Token.objects.filter(user=user).exists()
