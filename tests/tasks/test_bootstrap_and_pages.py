import pytest
from django.core.management import call_command

from annotation.models import Example
from leaderboard.rows import read_seed_rows
from registry.models import ModelVersion
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
    assert first[:2] == (4, 8) and first[3] == 1  # round 0 (the seed examples) and round 1 of each task
    assert first[2] >= 4 * 20, "the shipped seed contexts are loaded"
    assert "password:" in first_out
    seed_examples = Example.objects.filter(round__number=0, source="import")
    shipped = {slug: len(read_seed_rows(slug)["train"] + read_seed_rows(slug)["dev"] + read_seed_rows(slug)["test"])
               for slug in ("nli", "qa", "sentiment", "hate")}
    assert seed_examples.count() == sum(shipped.values())
    assert f"imported {shipped['nli']} seed examples of nli into round 0 (train, dev and test)" in first_out
    for task in Task.objects.all():
        assert task.open_round().number == 1
        assert task.contexts.count() >= 20

    call_command("bootstrap_demo", "--no-models")
    second_out = capsys.readouterr().out
    assert counts() == first
    assert seed_examples.count() == sum(shipped.values())
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


def test_home_page_counts_the_open_rounds_examples(demo_tasks, client, settings):
    """Every variable the home page reads exists: a missing one renders as the marker below
    (it rendered as nothing, and the page said "round 1 open · examples, fooled the model")."""
    import copy

    templates = copy.deepcopy(settings.TEMPLATES)
    templates[0]["OPTIONS"]["string_if_invalid"] = "MISSING[%s]"
    settings.TEMPLATES = templates  # the setting_changed signal resets the template engines
    task = demo_tasks["hate"]
    add_examples(task, task.open_round(), collected=3, fooled=2, verified_fooled=1)
    for slug in ("hate", "nli"):  # writing is open once a round has a target model
        model = ModelVersion.objects.create(task=demo_tasks[slug], name="target", artifact_path="x", sha256="0" * 64)
        demo_tasks[slug].open_round().target_models.add(model)
    page = " ".join(client.get("/").content.decode().split())
    assert "MISSING[" not in page
    assert "round 1 open · 3 examples written, 2 fooled the model, 1 of them verified" in page
    assert "round 1 open · 0 examples written, 0 fooled the model" in page  # nli


def add_examples(task, rnd, *, collected, fooled, verified_fooled, annotator=None):
    """``collected`` written examples of ``rnd``: ``fooled`` of them fooled the model and
    ``verified_fooled`` of those are verified."""
    context = task.contexts.first()
    for i in range(collected):
        Example.objects.create(
            task=task, round=rnd, context=context, annotator=annotator, inputs={"statement": f"text {i}"},
            target={"label": "hateful"}, fooled=i < fooled,
            validation_status="verified" if i < verified_fooled else "pending")


def test_task_page_shows_rounds_and_counters(demo_tasks, client, django_assert_max_num_queries):
    task = demo_tasks["hate"]
    add_examples(task, task.open_round(), collected=10, fooled=4, verified_fooled=3)
    retracted = Example.objects.create(task=task, round=task.open_round(), inputs={"statement": "gone"},
                                       target={"label": "hateful"}, fooled=True, retracted=True)
    Example.objects.create(task=task, round=task.open_round(), inputs={"statement": "imported"},
                           target={"label": "hateful"}, fooled=True, source="import", external_uid="x1")
    assert retracted.pk  # neither the retracted nor the imported example counts
    # task, rounds with counts, target models, the job preparing one (the round has none), the
    # newest data releases (+ session)
    with django_assert_max_num_queries(6):
        page = client.get("/tasks/hate/").content.decode()
    assert "Content warning" in page
    assert '<td class="collected">10 written</td>' in page and "<td>4</td>" in page and "<td>3</td>" in page
    assert "40%" in page and "30%" in page
    assert client.get("/tasks/nope/").status_code == 404


def test_the_task_page_says_why_the_open_round_has_no_target_yet_and_how_far_its_job_is(demo_tasks, client):
    from jobs.engine import create_job
    from jobs.models import Job

    notice = "Round 1 has no target model yet."
    page = client.get("/tasks/nli/").content.decode()
    assert notice in page and "No model is being trained for it" in page
    job = create_job(Job.Kind.TRAIN_MODEL, task=demo_tasks["nli"])
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING, progress=40)
    page = client.get("/tasks/nli/").content.decode()
    assert notice in page and f"training job #{job.pk} is 40% done" in page
    other = client.get("/tasks/hate/").content.decode()  # another task's page tells of its own jobs only
    assert notice in other and "No model is being trained for it" in other and f"job #{job.pk}" not in other
    model = ModelVersion.objects.create(task=demo_tasks["nli"], name="target", artifact_path="x", sha256="0" * 64)
    demo_tasks["nli"].open_round().target_models.add(model)
    assert notice not in client.get("/tasks/nli/").content.decode()


def test_pages_are_not_frameable_by_default(demo_tasks, client):
    response = client.get("/")
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]


def test_healthz(db, client):
    body = client.get("/healthz").json()
    assert body["ok"] is True


def test_task_page_draws_the_error_rate_chart_server_side(demo_tasks, client):
    task = demo_tasks["hate"]
    add_examples(task, task.open_round(), collected=20, fooled=10, verified_fooled=5)
    add_examples(task, Round.objects.create(task=task, number=2), collected=10, fooled=2, verified_fooled=1)
    page = client.get("/tasks/hate/").content.decode()
    assert page.count("<svg") == 1 and "<script" not in page
    assert "round 1: error 50.0%, verified error 25.0%" in page
    assert "round 2: error 20.0%, verified error 10.0%" in page
    # The verified bar of round 1 is a quarter of the plot height (156 px).
    assert 'height="39.0" fill="#0b5cad"' in page


def test_bootstrap_demo_in_the_background_says_what_waits(capsys, settings):
    settings.JOBS_RUN_INLINE = False
    call_command("bootstrap_demo", "--background")
    out = capsys.readouterr().out
    assert "nli: training job #" in out and "on round 0's 276 train and 27 dev examples" in out
    assert "4 job(s) wait for the server: it runs them one after another once it starts." in out
    assert "demo tasks set up: 4/4 (100%)" in out and "seed models queued: 4/4 (100%)" in out  # progress lines
    assert not ModelVersion.objects.exists()
