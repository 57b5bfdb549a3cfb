"""Sign-up with an e-mail address, and confirming it (``AccountEmail``).

The sign-up page (``core.accounts.signup``) asks for an address here and sends a link
to confirm it. The link carries Django's own kind of token
(``PasswordResetTokenGenerator``, with its own salt and a hash over the address and
whether it was confirmed), so it works once, for that address, until
``PASSWORD_RESET_TIMEOUT``. Until the address is confirmed the account may write,
but its votes never count (``trust.why_not_counted``). An account signed
up without an address has nothing to confirm: its votes never count either, and it
cannot reset its password; the form says so.

One inbox confirms at most ``ACCOUNTS_PER_INBOX`` accounts, however its address is
spelled (``core.inboxes``: case, plus tags and Gmail's dots fold into one inbox), and
deleted accounts keep counting (their row keeps the inbox's keyed hash, never the
address). The bound is checked when a link is used, under a lock on the inbox's rows
(two links used at once confirm no more); the e-mail sent to a full inbox says so
instead of carrying a link. Nothing on the sign-up page tells whether an address is
in use: only its inbox learns it.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.contrib.auth.views import PasswordResetView
from django.core.mail import send_mail
from django.db import transaction
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode
from django.views.decorators.http import require_POST

from core import accounts as core_accounts
from core import inboxes, ratelimit
from core.api import http_status
from core.errors import Conflict, NotFound

from .models import AccountEmail


def mail_by_address() -> ratelimit.Limiter:
    """Messages one address may have us send (password resets, confirmation links
    again): as many as it may sign up accounts (``SIGNUPS_PER_ADDRESS`` per
    ``SIGNUP_WINDOW``), so nobody turns the site into a mail cannon."""
    return ratelimit.Limiter("account-mail-address", settings.SIGNUPS_PER_ADDRESS, settings.SIGNUP_WINDOW)


class ThrottledPasswordResetView(PasswordResetView):
    """Django's password-reset page, refusing (429) past ``mail_by_address``."""

    def post(self, request, *args, **kwargs):
        wait = mail_by_address().take(ratelimit.client_address(request))
        if wait:
            return core_accounts.too_many(request, wait, "password-reset e-mails from this address")
        return super().post(request, *args, **kwargs)


class EmailTokenGenerator(PasswordResetTokenGenerator):
    """Django's token generator for the confirmation link: a token made for one address
    stops working once that address is confirmed or changed."""

    key_salt = "dynabench.annotation.accounts.EmailTokenGenerator"

    def _make_hash_value(self, user, timestamp):
        row = AccountEmail.objects.filter(user=user).first()
        email, confirmed = (row.email, row.verified_at) if row else ("", None)
        return f"{user.pk}{email}{confirmed}{timestamp}"


email_tokens = EmailTokenGenerator()


# The names deleted accounts carry (``crowd.accounts.deleted_name``): nobody signs up with one.
DELETED_PREFIX = "deleted-"


class SignupForm(UserCreationForm):
    email = forms.EmailField(
        required=False, max_length=254, label="E-mail address",
        help_text="We send a link to confirm it. Your validation votes count only once it is confirmed, "
                  "and a forgotten password is reset through it. Without one you may still write examples.")

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")

    def clean_username(self):
        username = super().clean_username()
        if username.casefold().startswith(DELETED_PREFIX):
            raise forms.ValidationError(f'Usernames starting with "{DELETED_PREFIX}" name deleted accounts; '
                                        "choose another.")
        return username


def confirmation_link(request, user) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return request.build_absolute_uri(reverse("verify-email", args=[uid, email_tokens.make_token(user)]))


def confirmed_elsewhere(row: AccountEmail) -> int:
    """How many other accounts ``row``'s inbox has confirmed (deleted ones included)."""
    if not row.inbox:
        return 0
    return (AccountEmail.objects.filter(inbox=row.inbox, verified_at__isnull=False).exclude(pk=row.pk)
            .order_by().count())


def inbox_full_text() -> str:
    limit = settings.ACCOUNTS_PER_INBOX
    return (f"This e-mail inbox has confirmed {limit} account{'s' if limit != 1 else ''} already, the most one inbox "
            "may (however its address is spelled: capitals, +tags and Gmail's dots reach the same inbox). "
            "This account may still write examples, but its validation votes do not count.")


def send_confirmation(request, user) -> bool:
    """Send ``user`` the link to confirm their address; False when there is nothing to
    confirm (no address, or confirmed already). An inbox that confirmed its most
    accounts gets a message that says so, without a link."""
    row = AccountEmail.objects.filter(user=user).first()
    if row is None or not row.email or row.verified_at is not None:
        return False
    if confirmed_elsewhere(row) >= settings.ACCOUNTS_PER_INBOX:
        send_mail("Your e-mail address for Dynabench",
                  f"Hello {user.get_username()},\n\n{inbox_full_text()}\n\nIf you did not sign up, ignore this "
                  "message.\n", None, [row.email])
        return True
    send_mail("Confirm your e-mail address for Dynabench",
              f"Hello {user.get_username()},\n\nopen this link to confirm your address:\n\n"
              f"{confirmation_link(request, user)}\n\nIt works for "
              f"{settings.PASSWORD_RESET_TIMEOUT // 3600} hours. Until you confirm it you may write examples, "
              "but your validation votes do not count.\n\nIf you did not sign up, ignore this message.\n",
              None, [row.email])
    return True


def record_email(user, email: str) -> AccountEmail:
    """The account's address, to be confirmed (a sign-up)."""
    email = (email or "").strip()
    with transaction.atomic():
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        row, _ = AccountEmail.objects.update_or_create(
            user=user, defaults={"email": email, "inbox": inboxes.inbox_hash(email), "verified_at": None})
    return row


def confirm(uidb64: str, token: str) -> AccountEmail:
    """Confirm the address the link was made for (NotFound for a link that is not, or no
    longer, good: a wrong or used token, or one past ``PASSWORD_RESET_TIMEOUT``;
    Conflict when its inbox has confirmed ``ACCOUNTS_PER_INBOX`` other accounts)."""
    try:
        pk = int(urlsafe_base64_decode(uidb64).decode())
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError):
        raise NotFound("This confirmation link is not valid.") from None
    user = get_user_model().objects.filter(pk=pk).first()
    if user is None or not email_tokens.check_token(user, token):
        raise NotFound("This confirmation link is not valid, was used already, or has expired.")
    row = AccountEmail.objects.get(user=user)
    with transaction.atomic():
        # Every row of the inbox locked, in one order: two links of one inbox used at
        # once are counted one after the other.
        if row.inbox:
            list(AccountEmail.objects.select_for_update().filter(inbox=row.inbox).order_by("pk")
                 .values_list("pk", flat=True))
        row.refresh_from_db()
        if row.verified_at is None and confirmed_elsewhere(row) >= settings.ACCOUNTS_PER_INBOX:
            raise Conflict(inbox_full_text())
        AccountEmail.objects.filter(pk=row.pk, verified_at__isnull=True).update(verified_at=timezone.now())
    row.refresh_from_db()
    return row


def _after_signup(request, user):
    record_email(user, request.POST.get("email", ""))
    if send_confirmation(request, user):
        messages.info(request, "We sent you a link to confirm your e-mail address.")


def signup(request):
    return core_accounts.signup(request, form_class=SignupForm, on_created=_after_signup)


def verify_email(request, uidb64: str, token: str):
    try:
        confirm(uidb64, token)
    except (NotFound, Conflict) as exc:
        return render(request, "registration/email_confirm.html", {"ok": False, "message": exc.message},
                      status=http_status(exc))
    return render(request, "registration/email_confirm.html", {"ok": True})


@require_POST
def send_verification(request):
    """Send the confirmation link again (signed in; limited like sign-ups, per address)."""
    if not request.user.is_authenticated:
        return redirect(f"{reverse('login')}?next={reverse('me')}")
    wait = mail_by_address().take(ratelimit.client_address(request))
    if wait:
        return core_accounts.too_many(request, wait, "confirmation e-mails from this address")
    if send_confirmation(request, request.user):
        messages.info(request, "We sent the link again.")
    else:
        messages.info(request, "There is no address to confirm on this account.")
    return redirect("me")
