import pytest

from tasks.jobs import JobReporter, create_job, enqueue, run_job
from tasks.models import Job
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
