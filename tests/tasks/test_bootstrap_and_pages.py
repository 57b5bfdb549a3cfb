import pytest
from django.core.management import call_command

from leaderboard.models import ModelVersion
from tasks.models import Context, Round, Task

pytestmark = pytest.mark.django_db


def counts():
    from django.contrib.auth import get_user_model

    return (Task.objects.count(), Round.objects.count(), Context.objects.count(),
            get_user_model().objects.filter(is_superuser=True).count(), ModelVersion.objects.count())


def test_bootstrap_demo_twice_creates_nothing_twice(capsys, monkeypatch):
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    call_command("bootstrap_demo", "--no-models")
    first_out = capsys.readouterr().out
    first = counts()
    assert first[:2] == (4, 4) and first[3] == 1
    assert first[2] >= 4 * 20, "the shipped seed contexts are loaded"
    assert "password:" in first_out
    for task in Task.objects.all():
        assert task.open_round().number == 1
        assert task.contexts.count() >= 20

    call_command("bootstrap_demo", "--no-models")
    second_out = capsys.readouterr().out
    assert counts() == first
    assert "password" not in second_out and "nothing to do" in second_out


def test_superuser_password_from_the_environment(monkeypatch, capsys):
    from django.contrib.auth import authenticate

    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "demo-password-from-env")
    call_command("bootstrap_demo", "--no-models")
    out = capsys.readouterr().out
    assert "demo-password-from-env" not in out
    assert authenticate(username="admin", password="demo-password-from-env") is not None


def test_home_page_lists_the_active_tasks(demo_tasks, client, django_assert_max_num_queries):
    Task.objects.filter(slug="hate").update(is_active=False)
    with django_assert_max_num_queries(5):
        response = client.get("/")
    page = response.content.decode()
    assert response.status_code == 200
    for slug, name in [("nli", "Natural Language Inference"), ("qa", "Extractive Question Answering"),
                       ("sentiment", "Sentiment Analysis")]:
        assert f'href="/tasks/{slug}/"' in page and name in page
    assert "Hate Speech Detection" not in page


def test_task_page_shows_rounds_and_counters(demo_tasks, client):
    Round.objects.filter(task__slug="hate").update(examples_collected=10, examples_fooled=4,
                                                   examples_verified_fooled=3)
    page = client.get("/tasks/hate/").content.decode()
    assert "Content warning" in page
    assert "<td>10</td>" in page and "<td>4</td>" in page and "<td>3</td>" in page
    assert "40%" in page and "30%" in page
    assert client.get("/tasks/nope/").status_code == 404


def test_pages_are_not_frameable_by_default(demo_tasks, client):
    response = client.get("/")
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]


def test_healthz(db, client):
    body = client.get("/healthz").json()
    assert body["ok"] is True


def test_task_page_draws_the_error_rate_chart_server_side(demo_tasks, client):
    Round.objects.filter(task__slug="nli").update(examples_collected=20, examples_fooled=10,
                                                  examples_verified_fooled=5)
    Round.objects.create(task=demo_tasks["nli"], number=2, examples_collected=10, examples_fooled=2,
                         examples_verified_fooled=1)
    page = client.get("/tasks/nli/").content.decode()
    assert page.count("<svg") == 1 and "<script" not in page
    assert "round 1: error 50.0%, verified error 25.0%" in page
    assert "round 2: error 20.0%, verified error 10.0%" in page
    # The verified bar of round 1 is a quarter of the plot height (172 px).
    assert 'height="43.0" fill="#0b5cad"' in page
