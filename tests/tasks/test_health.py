"""The health check, written once (tasks/health.py): the page and the Celery task say
the same about the database."""

import pytest
from django.db import OperationalError, connection

from tasks.tasks import health_check


def test_the_page_and_the_task_report_the_same_database(db, client):
    page = client.get("/healthz")
    task = health_check()  # run here, as the worker runs it
    assert page.status_code == 200
    assert page.json() == {"ok": True, "database": connection.vendor}
    assert {key: task[key] for key in ("ok", "database")} == page.json()
    assert task["pid"] > 0 and task["hostname"]


def test_a_database_that_does_not_answer_is_a_503_on_the_page_and_a_failure_in_the_task(db, client,
                                                                                         monkeypatch):
    def refuse():
        raise OperationalError("connection refused")

    with monkeypatch.context() as patch:  # undone before the test database is torn down
        patch.setattr(connection, "cursor", refuse)
        page = client.get("/healthz")
        with pytest.raises(OperationalError):
            health_check()
    assert page.status_code == 503
    assert page.json() == {"ok": False, "error": "OperationalError"}
    assert page["Cache-Control"].startswith("max-age=0")
