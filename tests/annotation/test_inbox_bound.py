"""One inbox confirms a bounded number of accounts, from the attacker's side: capitals,
+tags and Gmail's dots spell one inbox many ways, but it confirms ACCOUNTS_PER_INBOX
accounts and no more, a deleted account still counts, and two links used at once
confirm no more than one used after the other."""

import re
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.cache import cache
from django.test import RequestFactory

from annotation import trust
from annotation.accounts import confirmation_link
from annotation.models import AccountEmail
from core.inboxes import inbox_hash, normalise
from crowd.accounts import delete_account

PASSWORD = "a-long-enough-pass-123"


@pytest.fixture(autouse=True)
def _fresh_limits():
    cache.clear()
    yield
    cache.clear()


def sign_up(client, username, email, address):
    response = client.post("/accounts/signup/", {"username": username, "email": email, "password1": PASSWORD,
                                                 "password2": PASSWORD}, REMOTE_ADDR=address)
    assert response.status_code == 302, response.content.decode()[-800:]
    return get_user_model().objects.get(username=username)


def last_link_to(address):
    [message] = [m for m in mail.outbox if m.to == [address]][-1:]
    found = re.search(r"https?://\S+/accounts/verify/\S+", message.body)
    return found.group(0) if found else None


@pytest.mark.parametrize("spelling, inbox", [
    ("Walker@Example.ORG", "walker@example.org"),
    ("walker+dynabench@example.org", "walker@example.org"),
    ("walker+a+b@example.org.", "walker@example.org"),
    ("W.A.L.K.E.R+2@gmail.com", "walker@gmail.com"),
    ("walker@GoogleMail.com", "walker@gmail.com"),
    ("wal.ker@outlook.com", "wal.ker@outlook.com"),  # a dot names another person outside Gmail
    ("walker@bücher.example", "walker@xn--bcher-kva.example"),
    ("+only@example.org", "+only@example.org"),
    ("", ""),
])
def test_the_spellings_of_one_inbox_fold_into_one(spelling, inbox):
    assert normalise(spelling) == inbox


def test_a_second_spelling_of_a_confirmed_inbox_confirms_nothing(db, client, settings):
    """One person, three spellings of one Gmail inbox, three machines: the first account
    is confirmed; the second's link is refused (409, with the reason), so its votes never
    count; the third's e-mail says so and carries no link."""
    settings.ACCOUNTS_PER_INBOX = 1
    first = sign_up(client, "walker", "Walker@Gmail.com", "198.51.100.1")
    second = sign_up(client, "walker2", "w.a.l.k.e.r+two@gmail.com", "198.51.100.2")
    assert client.get(last_link_to("Walker@Gmail.com")).status_code == 200
    assert not trust.email_unverified(first)
    refused = client.get(last_link_to("w.a.l.k.e.r+two@gmail.com"))
    assert refused.status_code == 409
    assert "confirmed 1 account already" in refused.content.decode()
    assert trust.email_unverified(second)
    third = sign_up(client, "walker3", "walker+3@googlemail.com", "198.51.100.3")
    assert last_link_to("walker+3@googlemail.com") is None
    assert "confirmed 1 account already" in mail.outbox[-1].body
    assert trust.email_unverified(third)
    # Nothing on the sign-up page told the attacker that the address is in use.
    assert AccountEmail.objects.filter(inbox=inbox_hash("walker@gmail.com")).count() == 3


def test_a_deleted_account_still_counts_towards_its_inbox(db, client, settings):
    settings.ACCOUNTS_PER_INBOX = 1
    first = sign_up(client, "walker", "walker@example.org", "198.51.100.1")
    assert client.get(last_link_to("walker@example.org")).status_code == 200
    delete_account(get_user_model().objects.get(pk=first.pk))
    again = sign_up(client, "walker-again", "WALKER+new@example.org", "198.51.100.9")
    assert last_link_to("WALKER+new@example.org") is None
    assert "confirmed 1 account already" in mail.outbox[-1].body
    # Asking again gets the same answer; a link made by hand (the token is the site's) is refused.
    mail.outbox.clear()
    client.post("/accounts/verify/send/", REMOTE_ADDR="198.51.100.9")
    [message] = mail.outbox
    assert "/accounts/verify/" not in message.body and "confirmed 1 account already" in message.body
    link = confirmation_link(RequestFactory().get("/"), again)
    assert client.get(link).status_code == 409
    assert trust.email_unverified(again)


def test_the_bound_is_a_setting(db, client, settings):
    settings.ACCOUNTS_PER_INBOX = 2
    for n, spelling in enumerate(("walker@example.org", "walker+2@example.org", "Walker+3@example.org")):
        sign_up(client, f"walker{n}", spelling, f"198.51.100.{n + 1}")
    codes = [client.get(last_link_to(spelling)).status_code if last_link_to(spelling) else None
             for spelling in ("walker@example.org", "walker+2@example.org", "Walker+3@example.org")]
    assert codes == [200, 200, 409]
    assert AccountEmail.objects.filter(verified_at__isnull=False).count() == 2


@pytest.mark.django_db(transaction=True)
def test_links_used_at_once_confirm_no_more_than_the_bound(client, settings):
    """Five spellings of one inbox, their five links opened at the same moment: one
    account is confirmed (the inbox's rows are locked while it is counted)."""
    from django.db import connection
    from django.test import Client

    if connection.vendor != "postgresql":
        pytest.skip("parallel writes need PostgreSQL (set DATABASE_URL); SQLite's test database locks them out")
    settings.ACCOUNTS_PER_INBOX = 1
    spellings = [f"walker+{n}@example.org" for n in range(5)]
    for n, spelling in enumerate(spellings):
        sign_up(client, f"walker{n}", spelling, f"198.51.100.{n + 1}")
    links = [last_link_to(spelling) for spelling in spellings]
    barrier, codes, lock = threading.Barrier(len(links)), [], threading.Lock()

    def open_link(link):
        try:
            barrier.wait()
            code = Client().get(link).status_code
            with lock:
                codes.append(code)
        finally:
            connection.close()

    threads = [threading.Thread(target=open_link, args=(link,)) for link in links]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200, 409, 409, 409, 409]
    assert AccountEmail.objects.filter(verified_at__isnull=False).count() == 1
