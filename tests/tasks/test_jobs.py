import pytest

from jobs.engine import JobReporter, create_job, enqueue, run_job
from jobs.models import Job
from tasks.tasks import health_check_job

pytestmark = pytest.mark.django_db


def test_reporter_writes_progress_and_log_lines():
    job = create_job(Job.Kind.HEALTH_CHECK)
    reporter = JobReporter(job.pk)
    reporter.progress(12.7, "loading")
    reporter.progress(150, "done")
    job.refresh_from_db()
    assert job.progress == 100
    lines = job.log.splitlines()
    assert len(lines) == 2 and lines[0].endswith("loading") and lines[1].endswith("done")


def test_a_failing_job_is_recorded_not_lost():
    job = create_job(Job.Kind.HEALTH_CHECK)

    def work(job, reporter):
        reporter.progress(40, "halfway")
        raise RuntimeError("disk full")

    run_job(job.pk, work)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.error.startswith("RuntimeError: disk full")
    assert job.finished_at is not None and job.progress == 40


def test_a_refused_job_shows_its_reason_and_no_traceback():
    """A refusal (a domain error: a submitted model over a limit) is read by the person
    who asked, on the job's page: the reason, not our code's traceback."""
    from core.errors import Conflict

    job = create_job(Job.Kind.HEALTH_CHECK)

    def work(job, reporter):
        raise Conflict("config.json: num_hidden_layers is 10,000, over this task's limit of 48.")

    run_job(job.pk, work)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.error == "config.json: num_hidden_layers is 10,000, over this task's limit of 48."
    assert "Traceback" not in job.error and "File " not in job.error


def test_a_succeeded_job_is_not_run_again():
    job = create_job(Job.Kind.HEALTH_CHECK)
    calls = []
    run_job(job.pk, lambda job, r: calls.append(1) or {"n": len(calls)})
    run_job(job.pk, lambda job, r: calls.append(1) or {"n": len(calls)})
    job.refresh_from_db()
    assert calls == [1] and job.result == {"n": 1} and job.status == Job.Status.SUCCEEDED


def test_jobs_are_enqueued_only_after_commit(django_capture_on_commit_callbacks):
    job = create_job(Job.Kind.HEALTH_CHECK)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        enqueue(job, health_check_job)
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED and len(callbacks) == 1
    callbacks[0]()  # the commit happens: in embedded mode the task runs in-process
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED
    assert job.result["ok"] is True and job.progress == 100
    assert "checking the database" in job.log


# --- the lifecycle: claim, cancel, re-run, the sweeper ------------------------------------

from datetime import timedelta  # noqa: E402

from django.utils import timezone  # noqa: E402

from core.errors import Conflict  # noqa: E402
from jobs import engine  # noqa: E402


def test_a_job_runs_once_however_often_it_is_delivered():
    job = create_job(Job.Kind.HEALTH_CHECK)
    calls = []

    def work(job, reporter):
        # A duplicate delivery while this one runs finds the job taken and does nothing.
        run_job(job.pk, lambda *_: calls.append("duplicate"))
        calls.append("work")
        return {}

    run_job(job.pk, work)
    job.refresh_from_db()
    assert calls == ["work"] and job.status == Job.Status.SUCCEEDED and job.attempts == 1


def test_a_cancelled_queued_job_never_runs_and_a_running_one_stops_at_its_next_report():
    queued = create_job(Job.Kind.HEALTH_CHECK)
    engine.cancel_job(queued)
    run_job(queued.pk, lambda *_: pytest.fail("a cancelled job ran"))
    queued.refresh_from_db()
    assert queued.status == Job.Status.CANCELLED and queued.finished_at is not None
    with pytest.raises(Conflict, match="only a queued or running job"):
        engine.cancel_job(queued)

    running = create_job(Job.Kind.HEALTH_CHECK)
    reached = []

    def work(job, reporter):
        reporter.progress(10, "started")
        engine.cancel_job(job)  # a researcher cancels while it works
        reporter.progress(20, "this report finds the job cancelled")
        reached.append("after the cancel")  # never reached

    run_job(running.pk, work)
    running.refresh_from_db()
    assert reached == [] and running.status == Job.Status.CANCELLED and running.finished_at is not None
    assert running.progress == 10 and "cancelled" in running.log and running.result == {}


def test_rerun_makes_a_new_job_with_the_same_parameters():
    job = create_job(Job.Kind.HEALTH_CHECK, params={"x": 1})
    with pytest.raises(Conflict, match="is queued"):
        engine.rerun_job(job)
    enqueue(job, health_check_job)  # records what runs it
    run_job(job.pk, lambda *_: (_ for _ in ()).throw(RuntimeError("flaky")))
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    again = engine.rerun_job(job)
    assert again.pk != job.pk and again.params == {"x": 1} and again.rerun_of == job
    assert again.celery_task_name == health_check_job.name


def test_the_sweeper_requeues_a_silent_job_once_then_fails_it(settings, django_capture_on_commit_callbacks):
    settings.JOB_STALE_SECONDS, settings.JOB_MAX_ATTEMPTS = 60, 2
    job = create_job(Job.Kind.HEALTH_CHECK)
    with django_capture_on_commit_callbacks(execute=False):
        enqueue(job, health_check_job)
    assert engine.claim(job.pk) == 1
    stale = timezone.now() - timedelta(seconds=120)
    fresh = create_job(Job.Kind.HEALTH_CHECK)
    engine.claim(fresh.pk)  # beating now: left alone
    Job.objects.filter(pk=job.pk).update(heartbeat_at=stale)

    with django_capture_on_commit_callbacks(execute=False) as sent:
        report = engine.sweep_stale_jobs()
    job.refresh_from_db()
    assert report.requeued == [job.pk] and len(sent) == 1
    assert job.status == Job.Status.QUEUED and "worker lost" in job.log and "attempt 2 of 2" in job.log
    # The first worker, if it were still alive, could no longer write: its attempt is over.
    late = engine.JobReporter(job.pk, attempt=1)
    assert engine.claim(job.pk) == 2
    with pytest.raises(engine.JobStopped):
        late.progress(50, "too late")

    Job.objects.filter(pk=job.pk).update(heartbeat_at=stale)
    report = engine.sweep_stale_jobs()
    job.refresh_from_db()
    assert report.failed == [job.pk] and job.status == Job.Status.FAILED
    assert "No heartbeat" in job.error and "2 attempt(s)" in job.error
    fresh.refresh_from_db()
    assert fresh.status == Job.Status.RUNNING


def test_the_sweeper_closes_a_cancelled_job_whose_worker_died(settings):
    settings.JOB_STALE_SECONDS = 60
    job = create_job(Job.Kind.HEALTH_CHECK)
    engine.claim(job.pk)
    engine.cancel_job(job)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert engine.sweep_stale_jobs().closed == [job.pk]
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED and job.finished_at is not None


def test_time_left_and_queue_position():
    first, second = create_job(Job.Kind.HEALTH_CHECK), create_job(Job.Kind.HEALTH_CHECK)
    Job.objects.filter(pk__in=[first.pk, second.pk]).update(queue="training")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.queue_position(), second.queue_position()) == (1, 2)
    Job.objects.filter(pk=first.pk).update(status=Job.Status.RUNNING, progress=25,
                                           started_at=timezone.now() - timedelta(seconds=100))
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.queue_position() is None and second.queue_position() == 1
    assert first.seconds_left == pytest.approx(300, abs=5)


def test_the_beat_schedule_runs_the_sweeper(settings):
    from dynabench.celery import app

    app.loader.import_default_modules()  # the apps' task modules, as a worker finds them
    entry = settings.CELERY_BEAT_SCHEDULE["sweep-stale-jobs"]
    assert entry["task"] in app.tasks and entry["schedule"] <= 120


@pytest.mark.background_jobs
@pytest.mark.django_db(transaction=True)
def test_embedded_mode_runs_jobs_on_a_background_thread():
    """Under `make run` (no broker) a job starts after the request that queued it answered.

    The test reads the job only while the runner thread is parked or done: the in-memory
    SQLite test database locks whole tables (shared cache), so a read at the moment the
    runner writes fails one side with "database table is locked" at once, no busy wait."""
    import threading

    from jobs import engine

    started, gate, ran_on = threading.Event(), threading.Event(), []
    job = create_job(Job.Kind.HEALTH_CHECK)

    from tasks import tasks as task_module

    original = task_module.health_check

    def slow_check():
        ran_on.append(threading.current_thread().name)
        started.set()  # the job has been claimed (its row is "running"); now parked
        gate.wait(10)
        return original()

    task_module.health_check = slow_check
    try:
        enqueue(job, health_check_job)  # autocommit: sent at once, to the runner thread
        assert started.wait(20), "the job did not start on the runner thread"
        job.refresh_from_db()
        assert job.status == Job.Status.RUNNING  # the caller did not wait for it
        gate.set()
        assert engine.wait_for_background_jobs(20), "the job did not finish on the runner thread"
    finally:
        gate.set()
        task_module.health_check = original
    job.refresh_from_db()
    assert ran_on and ran_on[0].startswith(engine.RUNNER_NAME), ran_on
    assert job.status == Job.Status.SUCCEEDED, job.error


def test_a_job_the_shut_down_runner_refuses_is_not_waited_for(monkeypatch):
    """At interpreter exit the runner takes no more work: the refused job is not counted
    as pending, so nothing waits the whole timeout for it."""
    from concurrent.futures import ThreadPoolExecutor

    from jobs import engine

    closed = ThreadPoolExecutor(max_workers=1)
    closed.shutdown()
    monkeypatch.setattr(engine, "_embedded_runner", closed)
    with pytest.raises(RuntimeError):
        engine._run_in_background(health_check_job, 1)
    assert engine.wait_for_background_jobs(0.1)


def test_job_api_shows_jobs_to_their_task_researchers_only(demo_tasks, researcher, other_researcher, annotator,
                                                          client_for, anonymous):
    task = demo_tasks["sentiment"]
    job = create_job(Job.Kind.HEALTH_CHECK, task=task, user=researcher)
    url = f"/api/jobs/{job.pk}/"
    assert anonymous.get(url).status_code in (401, 403)
    assert client_for(annotator).get(url).status_code == 404
    assert client_for(other_researcher).get(url).status_code == 404
    body = client_for(researcher).get(url).json()
    assert body["status"] == "queued" and body["queue_position"] == 1 and body["page"] == f"/jobs/{job.pk}/"
    assert client_for(annotator).post(f"{url}cancel/").status_code == 404
    cancelled = client_for(researcher).post(f"{url}cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert client_for(researcher).post(f"{url}cancel/").status_code == 409
    assert client_for(researcher).post(f"{url}rerun/").status_code == 409  # never sent to a queue: nothing to re-run
    page = client_for(researcher).get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and b"Cancelled" in page.content
    assert client_for(annotator).get(f"/jobs/{job.pk}/").status_code == 404


def test_a_queued_job_has_an_estimated_start_from_typical_run_times(db):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Job

    now = timezone.now()
    for minutes in (4, 6, 5):  # three finished evaluations: median 5 minutes
        Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, queue="training", status=Job.Status.SUCCEEDED,
                           started_at=now - timedelta(hours=1), finished_at=now - timedelta(hours=1, minutes=-minutes))
    first = Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, queue="training")
    second = Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, queue="training")
    assert first.queue_position() == 1 and second.queue_position() == 2
    assert abs((first.estimated_start() - timezone.now()).total_seconds()) < 5  # nothing ahead
    assert abs((second.estimated_start() - timezone.now()).total_seconds() - 300) < 5  # one typical run ahead
    Job.objects.filter(pk=first.pk).update(status=Job.Status.RUNNING, started_at=timezone.now(), progress=50)
    second.refresh_from_db()
    # The running one: as long again as it has run (about 0 s); nothing queued ahead any more.
    assert abs((second.estimated_start() - timezone.now()).total_seconds()) < 5
    assert Job.objects.get(pk=first.pk).estimated_start() is None
