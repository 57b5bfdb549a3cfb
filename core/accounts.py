"""Sign-up, sign-in and API tokens, with limits against guessing and bulk sign-ups.

- Sign-in (the page, the admin's and ``POST /api/auth/token/``): after
  ``LOGIN_FAILURES_PER_ACCOUNT`` failed attempts on an account, or
  ``LOGIN_FAILURES_PER_ADDRESS`` from an address, within
  ``LOGIN_FAILURE_WINDOW`` seconds, they answer 429 with ``Retry-After`` until the
  window ends, without checking the password. A try is counted before its password
  is checked, in one atomic step (``ratelimit.login_attempt``): tries sent in
  parallel get no more checks than the limit. A success clears the account's count.
- Sign-up: at most ``SIGNUPS_PER_ADDRESS`` attempts per address per ``SIGNUP_WINDOW``.
- Signing out ends the annotation sessions (and their tokens) opened in that
  sign-in; a password change ends all of the user's (see ``annotation``).
"""

from django.contrib import admin
from django.contrib.auth import login, user_logged_in
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import LoginView
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from . import ratelimit
from .authentication import current_token, token_expires_at
from .fields import StrictCharField
from .parsers import BoundedJSONParser


def too_many(request, wait: int, what: str):
    response = render(request, "too_many_requests.html", {"wait": wait, "what": what}, status=429)
    response["Retry-After"] = str(wait)
    return response


class ThrottledLoginView(LoginView):
    """Django's sign-in page, refusing (429) after too many failures."""

    def post(self, request, *args, **kwargs):
        wait = ratelimit.login_attempt(request, request.POST.get("username"))
        if wait:
            return too_many(request, wait, "failed sign-ins")
        return super().post(request, *args, **kwargs)  # a wrong password stays counted

    def form_valid(self, form):
        ratelimit.login_succeeded(self.request, form.get_user().get_username())
        return super().form_valid(form)


def admin_login(request, extra_context=None):
    """The admin's sign-in, under the same lockout as the site's and the API's."""
    username = request.POST.get("username") if request.method == "POST" else None
    if username is not None:
        wait = ratelimit.login_attempt(request, username)
        if wait:
            return too_many(request, wait, "failed sign-ins")
    response = admin.site.login(request, extra_context)
    # The form again (200): the credentials did not sign in, and the try stays counted.
    if username is not None and response.status_code != 200 and request.user.is_authenticated:
        ratelimit.login_succeeded(request, username)
    return response


class CredentialsSerializer(AuthTokenSerializer):
    """A username and password as typed: text, never trimmed (the schema says so too)."""

    username = StrictCharField(label="Username", write_only=True, trim_whitespace=False)
    password = StrictCharField(label="Password", style={"input_type": "password"}, trim_whitespace=False,
                               write_only=True)
    expires_at = serializers.DateTimeField(read_only=True, help_text="When the token stops working "
                                           "(API_TOKEN_TTL_DAYS after it was made); then ask for a new one.")


class ThrottledObtainAuthToken(ObtainAuthToken):
    """``POST /api/auth/token/``: an API token for a username and password, with when it
    expires (the same token until then; a new one after). Wrong credentials are 401; 429
    after too many failures (the same counts as the sign-in page). ``DELETE`` revokes the
    caller's token."""

    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]
    serializer_class = CredentialsSerializer

    def post(self, request, *args, **kwargs):
        username = request.data.get("username") if hasattr(request.data, "get") else None
        wait = ratelimit.login_attempt(request, username)
        if wait:
            raise exceptions.Throttled(wait, detail=f"Too many failed sign-ins; try again in {wait} s.")
        credentials = self.get_serializer(data=request.data)
        try:
            credentials.is_valid(raise_exception=True)
        except exceptions.ValidationError as exc:
            if exc.get_codes() != {"non_field_errors": ["authorization"]}:
                ratelimit.login_not_checked(request, username)
                raise  # a field is missing or malformed: 400
            raise exceptions.AuthenticationFailed("Unable to sign in with the username and password given.") from None
        ratelimit.login_succeeded(request, username)
        user = credentials.validated_data["user"]
        token = current_token(user)
        user_logged_in.send(sender=user.__class__, request=request, user=user)  # a sign-in, as the page's is
        return Response({"token": token.key,
                         "expires_at": serializers.DateTimeField().to_representation(token_expires_at(token))})

    @extend_schema(request=None, responses={204: OpenApiResponse(description="The token is revoked.")})
    def delete(self, request, *args, **kwargs):
        """``DELETE /api/auth/token/``: revoke the caller's API token (sent as
        ``Authorization: Token <key>``, or the signed-in user's with the session cookie):
        it stops working at once. 401 without credentials."""
        if not request.user.is_authenticated:
            raise exceptions.NotAuthenticated("Send the token to revoke (Authorization: Token <key>), or sign in.")
        Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


obtain_auth_token = extend_schema(tags=["auth"])(ThrottledObtainAuthToken).as_view()


def signup(request, form_class=UserCreationForm, on_created=None):
    """The sign-up page: ``form_class`` makes the account; ``on_created(request, user)``
    runs after it is saved (an app above ``core`` sends the e-mail confirmation)."""
    next_url = request.POST.get("next") or request.GET.get("next") or "/"
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        next_url = "/"
    if request.method == "POST":
        limiter = ratelimit.signup_by_address()
        address = ratelimit.client_address(request)
        wait = limiter.take(address)  # checked and counted in one step: parallel sign-ups get no more
        if wait:
            return too_many(request, wait, "sign-ups from this address")
        form = form_class(request.POST)
        if form.is_valid():
            user = form.save()
            login(request, user)
            if on_created is not None:
                on_created(request, user)
            return redirect(next_url)
    else:
        form = form_class()
    return render(request, "registration/signup.html", {"form": form, "next": next_url})
