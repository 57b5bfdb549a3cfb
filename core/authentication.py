"""API token authentication that does not ignore what it cannot read, and tokens that end.

An API token (``POST /api/auth/token/``) works for ``API_TOKEN_TTL_DAYS`` days from
when it was made; after that it is refused (401) with a message that says so, and the
next ``POST /api/auth/token/`` gives a new one. ``DELETE /api/auth/token/`` revokes the
caller's token at once, and a new password (a reset by e-mail, a change, the admin's
form, ``manage.py changepassword``, a deleted account's unusable one) revokes every
token of the account (``revoke_tokens_on_new_password``): a token copied before the
reset stops working with the old password. Annotation session tokens end with it too,
by their own rule (``annotation.sessions.session_problem``), as do web sessions.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token


def token_expires_at(token: Token) -> datetime:
    return token.created + timedelta(days=settings.API_TOKEN_TTL_DAYS)


def revoke_tokens_on_new_password(sender, instance, update_fields=None, raw=False, **kwargs):
    """``pre_save`` of the user model: when the password stored is about to change,
    the account's API tokens are deleted (one read of the stored hash per save that may
    write the password; a sign-in's save of ``last_login`` reads nothing)."""
    if raw or instance.pk is None:
        return
    if update_fields is not None and "password" not in update_fields:
        return
    stored = sender._default_manager.filter(pk=instance.pk).values_list("password", flat=True).first()
    if stored is not None and stored != instance.password:
        Token.objects.filter(user_id=instance.pk).delete()


def current_token(user) -> Token:
    """``user``'s API token: the one they hold while it lasts, else a new one (an expired
    token is deleted first)."""
    Token.objects.filter(user=user, created__lte=timezone.now() - timedelta(days=settings.API_TOKEN_TTL_DAYS)).delete()
    token, _ = Token.objects.get_or_create(user=user)
    return token


class StrictTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``. DRF's class skips an Authorization header in any
    other form, so a request carrying garbage there could still pass on another
    credential; here any Authorization header must be a valid token (401 otherwise).
    A token older than ``API_TOKEN_TTL_DAYS`` days is refused as expired."""

    def authenticate(self, request):
        header = get_authorization_header(request)
        present = "HTTP_AUTHORIZATION" in request.META
        if present and header.split()[:1] != [self.keyword.encode()]:
            raise exceptions.AuthenticationFailed(
                f"Unsupported Authorization header: send 'Authorization: {self.keyword} <key>' "
                "(keys come from POST /api/auth/token/).")
        return super().authenticate(request)

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if timezone.now() >= token_expires_at(token):
            raise exceptions.AuthenticationFailed(
                f"This API token expired on {token_expires_at(token):%Y-%m-%d %H:%M} UTC (tokens last "
                f"{settings.API_TOKEN_TTL_DAYS} days); get a new one from POST /api/auth/token/.")
        return user, token
