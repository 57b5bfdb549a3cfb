"""The ceiling on a request's queries (``REQUEST_QUERY_TIMEOUT``, ``core.query_ceiling``).

A statement that runs past it is stopped by the database and the request answers
503 with ``Retry-After`` (the API's error body, or a page); the connection is whole
afterwards and carries no limit into work outside requests. Runs on the test
database's engine: SQLite (a progress handler) or PostgreSQL (``statement_timeout``).
"""

import logging
import threading
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.http import HttpResponse
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from dynabench.urls import urlpatterns as site_urlpatterns

POSTGRESQL = django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
MARK = "query-ceiling-test"  # finds the statement in pg_stat_activity

pytestmark = [
    # A statement stopped inside a test's transaction would abort it on PostgreSQL: these
    # tests run in autocommit, as requests do.
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]


def endless(rows: bool = False) -> str:
    """A statement that runs far longer than any ceiling here (minutes; it ends if a
    ceiling fails, so a broken one fails the test rather than hanging it). ``rows``:
    SQLite does the work while the rows are read, after ``execute`` has returned."""
    if POSTGRESQL:
        return f"SELECT pg_sleep(120) /* {MARK} */"
    tail = "SELECT i FROM n" if rows else "SELECT count(*) FROM n"
    return f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) {tail}"


def a_while() -> tuple[str, object]:
    """A statement that outlasts the small ceilings below, and its result."""
    if POSTGRESQL:
        return f"SELECT pg_sleep(0.3), 1 /* {MARK} */", 1
    return "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000) SELECT count(*) FROM n", \
        2_000_000


def run(sql: str):
    with connection.cursor() as cursor:
        cursor.execute(sql)
        last = None
        for row in cursor:  # read every row: on SQLite that is where a row query does its work
            last = row
        return last[-1] if last else None


def slow_page(request):
    if request.GET.get("what") == "a-while":
        return HttpResponse(f"counted {run(a_while()[0])}")
    if request.GET.get("what") == "in-a-thread":
        return HttpResponse(f"counted {in_a_thread(a_while()[0])}")
    run(endless(rows=request.GET.get("what") == "rows"))
    return HttpResponse("finished")


class SlowEndpoint(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = []

    def get(self, request):
        run(endless(rows=request.GET.get("what") == "rows"))
        return Response({"finished": True})


def in_a_thread(sql: str):
    """Run ``sql`` on a thread of its own (as the embedded job runner does), on its own
    connection, and return its result."""
    result = {}

    def work():
        try:
            result["value"] = run(sql)
        except Exception as exc:
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


urlpatterns = [path("slow/", slow_page), path("api/slow/", SlowEndpoint.as_view()), *site_urlpatterns]


def statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


@pytest.mark.parametrize("what", ["count", "rows"] if not POSTGRESQL else ["sleep"])
def test_an_api_query_past_the_ceiling_is_a_503_and_the_connection_serves_on(client, settings, caplog, what):
    settings.REQUEST_QUERY_TIMEOUT = 0.2
    connection.ensure_connection()
    raw = connection.connection
    with caplog.at_level(logging.WARNING, logger="core.middleware"):
        response = client.get(f"/api/slow/?what={what}")
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["code"] == "query_timeout"
    assert "took too long on the database and was stopped after 0.2 s" in body["detail"]
    assert "narrow the request" in body["detail"]
    assert response["Retry-After"] == "30"
    assert any("/api/slow/" in r.getMessage() and "REQUEST_QUERY_TIMEOUT" in r.getMessage() for r in caplog.records)
    # The same connection serves on, and outside a request nothing is stopped.
    assert connection.connection is raw
    sql, expected = a_while()
    started = time.monotonic()
    assert run(sql) == expected
    assert time.monotonic() - started > 0.2  # it outlasted the ceiling, so a ceiling left behind would have stopped it


def test_a_page_query_past_the_ceiling_is_a_503_page(client, settings):
    settings.REQUEST_QUERY_TIMEOUT = 0.5
    response = client.get("/slow/")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert response["Retry-After"] == "30"
    text = response.content.decode()
    assert "took too long on the database and was stopped" in text and "Try again shortly" in text
    assert client.get("/").status_code == 200  # the next request on the connection is served


def test_statements_within_the_ceiling_are_not_stopped_and_0_turns_it_off(client, settings):
    sql, expected = a_while()
    settings.REQUEST_QUERY_TIMEOUT = 30
    assert client.get("/slow/?what=a-while").content.decode() == f"counted {expected}"
    settings.REQUEST_QUERY_TIMEOUT = 0.05
    assert client.get("/slow/?what=a-while").status_code == 503
    settings.REQUEST_QUERY_TIMEOUT = 0
    assert client.get("/slow/?what=a-while").content.decode() == f"counted {expected}"


def test_a_thread_a_request_starts_is_not_under_the_ceiling(client, settings):
    """Only the request's thread is limited: the embedded job runner, or any thread a
    request starts, runs its statements to the end on its own connection."""
    settings.REQUEST_QUERY_TIMEOUT = 0.05
    sql, expected = a_while()
    started = time.monotonic()
    response = client.get("/slow/?what=in-a-thread")
    assert response.status_code == 200 and response.content.decode() == f"counted {expected}"
    assert time.monotonic() - started > 0.05  # the thread's statement outlasted the request's ceiling


def test_a_statement_outside_a_request_runs_past_the_setting(settings):
    """A job or a command is not a request: the setting does not reach it."""
    settings.REQUEST_QUERY_TIMEOUT = 0.05
    sql, expected = a_while()
    assert run(sql) == expected


@pytest.mark.skipif(not POSTGRESQL, reason="PostgreSQL's statement_timeout: the test database is SQLite "
                                           "(set DATABASE_URL to a PostgreSQL database to run it)")
def test_postgresql_cancels_the_statement_on_the_server_and_resets_the_connection(client, settings):
    settings.REQUEST_QUERY_TIMEOUT = 0.5
    before = statement_timeout()
    connection.ensure_connection()
    raw = connection.connection
    started = time.monotonic()
    response = client.get("/api/slow/")
    assert response.status_code == 503 and response.json()["code"] == "query_timeout"
    assert time.monotonic() - started < 60  # pg_sleep(120) was cut short
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND state = 'active' AND pid <> pg_backend_pid() AND query LIKE %s", [f"%{MARK}%"])
        assert cursor.fetchone()[0] == 0  # nothing runs on after the answer
    assert connection.connection is raw
    assert statement_timeout() == before  # the connection is back to its own setting
