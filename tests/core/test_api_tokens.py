"""API tokens from the attacker's side: a token copied from a laptop, a log or a
script keeps working only for API_TOKEN_TTL_DAYS, and its owner can end it at once."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def with_token(key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_an_expired_token_is_refused_with_a_clear_message(annotator, demo_tasks, settings):
    settings.API_TOKEN_TTL_DAYS = 30
    token = Token.objects.create(user=annotator)
    assert with_token(token.key).get("/api/tasks/").status_code == 200
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(days=30, seconds=1))
    refused = with_token(token.key).get("/api/tasks/")
    assert refused.status_code == 401
    assert "expired" in refused.json()["detail"] and "POST /api/auth/token/" in refused.json()["detail"]


def test_signing_in_again_after_expiry_gives_a_new_token_and_the_old_one_stays_dead(annotator, anonymous, settings):
    settings.API_TOKEN_TTL_DAYS = 30
    first = anonymous.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD})
    assert first.status_code == 200
    key = first.json()["token"]
    expires = first.json()["expires_at"]
    assert expires.startswith(str((timezone.now() + timedelta(days=30)).date()))
    again = anonymous.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD})
    assert again.json()["token"] == key  # the same token while it lasts
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(days=31))
    renewed = anonymous.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD})
    assert renewed.status_code == 200 and renewed.json()["token"] != key
    assert with_token(key).get("/api/tasks/").status_code == 401
    assert with_token(renewed.json()["token"]).get("/api/tasks/").status_code == 200


def test_a_user_revokes_their_token(annotator, demo_tasks):
    token = Token.objects.create(user=annotator)
    client = with_token(token.key)
    assert client.delete("/api/auth/token/").status_code == 204
    after = client.get("/api/tasks/")
    assert after.status_code == 401 and not Token.objects.filter(user=annotator).exists()
    # Signed in with the session cookie, a user revokes the token they hold too.
    token = Token.objects.create(user=annotator)
    session = APIClient()
    session.force_login(annotator)
    assert session.delete("/api/auth/token/").status_code == 204
    assert with_token(token.key).get("/api/tasks/").status_code == 401


def test_revoking_needs_credentials_and_touches_no_one_elses_token(annotator, second_annotator, anonymous):
    theirs = Token.objects.create(user=second_annotator)
    refused = anonymous.delete("/api/auth/token/")
    assert refused.status_code == 401
    mine = Token.objects.create(user=annotator)
    assert with_token(mine.key).delete("/api/auth/token/").status_code == 204
    assert Token.objects.filter(pk=theirs.pk).exists()
