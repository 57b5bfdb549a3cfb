"""A training worker killed with SIGKILL mid-training, and the sweeper that recovers its job.

The worker is a real ``celery worker`` process, started by the test with the same
recipe as ``celery_worker_process`` but on the ``training`` queue only, the way
``make worker-training`` runs it: the prefork pool with one child (``-c 1``). It
runs in a session of its own, and the kill is ``os.killpg(SIGKILL)``: the parent
and the pool child die together, as when a machine or a container is lost. (Killing
only the child is another case: the parent's ``reject_on_worker_lost`` hands the
message straight back and the claim turns it away, since the job is still running.)

A worker that dies like this writes nothing more: its job stays ``running`` with a
heartbeat that no longer moves, until the sweeper queues it again (once) or fails it.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import ROOT, database_url

pytestmark = pytest.mark.integration

NAME = "killed-mid-way"
TRAIN_ROWS = 320  # verified round-1 examples; a tenth is held out as dev
TEST_ROWS = 8  # so that the evaluation job has something to score
STEPS = 48  # optimizer steps of 8 rows: 20 s or more of training here; progress (a heartbeat) every step
KILL_AT = 10  # percent: a few steps into training, long before the artifact is saved (at 95%)


# --- a worker of the test's own ------------------------------------------------------


def _live_members(pgid: int) -> list[int]:
    """Pids of the processes in group ``pgid`` that are not zombies (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            pids.append(int(entry))
    return pids


class TrainingWorker:
    """``celery worker -Q training -P prefork -c 1`` in a process group of its own."""

    def __init__(self, label: str, workdir: Path, env: dict):
        self.name = f"killtest-{label}-{uuid.uuid4().hex[:6]}"
        self.log_path = workdir / f"{self.name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dynabench", "worker", "-Q", "training", "-P", "prefork",
             "-c", "1", "--without-gossip", "--without-mingle", "-l", "info", "-n", f"{self.name}@%h"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.pgid = self.proc.pid  # start_new_session: the worker leads its own group

    def tail(self, chars: int = 4000) -> str:
        try:
            return f"\n--- {self.name} log ---\n{self.log_path.read_text()[-chars:]}"
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 180) -> None:
        from dynabench.celery import app

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"worker {self.name} exited ({self.proc.returncode}){self.tail()}")
            replies = app.control.ping(timeout=1.0) or []
            if any(host.startswith(f"{self.name}@") for reply in replies for host in reply):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"worker {self.name} did not answer a ping in {timeout:.0f} s{self.tail()}")

    def kill(self) -> None:
        """SIGKILL to the whole group, then wait until none of it is left alive."""
        os.killpg(self.pgid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _live_members(self.pgid):
            if time.monotonic() > deadline:
                pytest.fail(f"processes of worker {self.name} survived SIGKILL: {_live_members(self.pgid)}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Warm shutdown when it is idle; SIGKILL to the group if it does not end in time."""
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            if _live_members(self.pgid):
                os.killpg(self.pgid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        finally:
            self._log.close()


class Workers:
    """The test's own training workers, and the Celery messages it sent them."""

    def __init__(self, workdir: Path, env: dict):
        self.workdir, self.env = workdir, env
        self.started: list[TrainingWorker] = []
        self.task_ids: set[str] = set()

    def start(self, label: str) -> TrainingWorker:
        worker = TrainingWorker(label, self.workdir, self.env)
        self.started.append(worker)
        worker.wait_ready()
        return worker

    def track(self, task_id: str) -> None:
        """A message to drop from the broker at the end if it is still there."""
        self.task_ids.add(task_id)


@pytest.fixture
def training_workers(services, transactional_db, tmp_path):
    """Dedicated training workers (``training_workers.start(label)``), all stopped at the end.

    While the test runs, any other worker of this broker (the session's
    ``celery_worker_process`` consumes every queue) stops consuming ``training``,
    so the job can only land on the test's own workers. At the end, the messages
    the test tracked are dropped from the broker (queued or unacknowledged), so
    that a later run on the same broker never receives a job id of this one.
    """
    from django.conf import settings
    from django.db import connection

    from dynabench.celery import app

    from .conftest import unavailable

    if not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        unavailable("the worker-killed test reads the Redis transport's unacknowledged messages")
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url(connection.settings_dict),
               DYNABENCH_MODELS_DIR=str(settings.DYNABENCH_MODELS_DIR), PYTHONUNBUFFERED="1")
    queues = app.control.inspect(timeout=3.0).active_queues() or {}
    others = sorted(name for name, consumed in queues.items() if any(q["name"] == "training" for q in consumed))
    if others:
        app.control.cancel_consumer("training", destination=others, reply=True, timeout=5.0)
    workers = Workers(tmp_path, env)
    try:
        yield workers
    finally:
        for worker in workers.started:
            worker.stop()  # a warm shutdown puts back what it had not acknowledged
        drop_messages(workers.task_ids)
        if others:
            app.control.add_consumer("training", destination=others, reply=True, timeout=5.0)


# --- the broker's copies of a message (Redis transport) ----------------------------------


def _task_id(raw) -> str | None:
    from kombu.utils.encoding import bytes_to_str

    payload = json.loads(bytes_to_str(raw))
    message = payload[0] if isinstance(payload, list) else payload  # unacked: [message, exchange, key]
    return message.get("headers", {}).get("id")


def unacked_tags(task_id: str) -> list[str]:
    """Delivery tags of the unacknowledged copies of Celery task ``task_id``: delivered to
    a worker that has not acknowledged them (acks_late) and may never do so."""
    from kombu.utils.encoding import bytes_to_str

    from dynabench.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        return [bytes_to_str(tag) for tag, raw in channel.client.hgetall(channel.unacked_key).items()
                if _task_id(raw) == task_id]


def redeliver(tag: str) -> None:
    """What the transport does once the visibility timeout (1 h) has passed: queue it again."""
    from dynabench.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.qos.restore_by_tag(tag)


def drop_messages(task_ids) -> None:
    """Remove the copies of these Celery tasks from the ``training`` queue and the unacked set."""
    from dynabench.celery import app

    if not task_ids:
        return
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        client = channel.client
        for tag, raw in client.hgetall(channel.unacked_key).items():
            if _task_id(raw) in task_ids:
                client.zrem(channel.unacked_index_key, tag)
                client.hdel(channel.unacked_key, tag)
        for raw in client.lrange("training", 0, -1):
            if _task_id(raw) in task_ids:
                client.lrem("training", 0, raw)


# --- helpers ------------------------------------------------------------------------------


def wait_for_job(job, done, timeout: float, what: str, workers=()):
    deadline = time.monotonic() + timeout
    while True:
        job.refresh_from_db()
        if done(job):
            return job
        if time.monotonic() > deadline:
            logs = "".join(w.tail() for w in workers)
            pytest.fail(f"{what} did not happen in {timeout:.0f} s: job is {job.status} at {job.progress}%\n"
                        f"{job.log}\n{job.error}{logs}")
        time.sleep(0.2)


def round_state(task):
    """Every round of the task: number, status, dates and target models."""
    return [(r.number, r.status, r.opened_at, r.closed_at, r.ensemble_mode,
             sorted(r.target_models.values_list("pk", flat=True)))
            for r in task.rounds.order_by("number")]


def artifact_entries(task) -> set[str]:
    """Names under the task's models folder, hidden temporary ones included."""
    from registry.services import models_root

    folder = models_root() / task.slug
    return set(os.listdir(folder)) if folder.is_dir() else set()


def add_examples(task, rnd):
    from annotation import counters
    from annotation.models import Example

    words = ["good", "bad", "lovely", "awful", "great", "dull", "fine", "poor", "fun", "grim"]
    rows = []
    for split, count in (("train", TRAIN_ROWS), ("test", TEST_ROWS)):
        for i in range(count):
            label = "positive" if i % 2 else "negative"
            text = f"{split} review {i}: the film was {words[i % 10]} and the cast {words[(3 * i) % 10]}."
            rows.append(Example(task=task, round=rnd, split=split, source=Example.Source.IMPORT,
                                external_uid=f"{split}-{i}", inputs={"statement": text}, target={"label": label},
                                validation_status=Example.ValidationStatus.VERIFIED))
    counters.record_new(Example.objects.bulk_create(rows))  # the bulk path keeps the counters too


# --- the tests ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_training_is_swept_and_its_job_finishes_on_a_fresh_worker(
        training_workers, demo_tasks, settings):
    from celery.result import AsyncResult

    import ml
    from jobs.engine import sweep_stale_jobs
    from jobs.models import Job
    from leaderboard.evaluation import has_finished_evaluation
    from leaderboard.rows import read_seed_rows
    from leaderboard.tasks import train_model
    from leaderboard.training import start_training, train_and_register
    from registry.models import ModelVersion

    started = time.monotonic()

    def mark(what):  # a timeline, shown when the test fails
        print(f"{time.monotonic() - started:7.1f} s  {what}")

    settings.TRAINING_MAX_STEPS = None  # the job must run the STEPS it asks for
    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    target = train_and_register(task, {"train": read_seed_rows("sentiment")["train"][:12]}, name="round-1-target",
                                training_data={"source": "test"}, max_steps=2, epochs=1, batch_size=4)
    rnd.target_models.add(target)
    add_examples(task, rnd)
    rounds_before = round_state(task)
    entries_before = artifact_entries(task)

    mark("target model trained, examples added")
    first = training_workers.start("first")
    mark("first worker ready")
    job = start_training(task, name=NAME, epochs=2, batch_size=8, max_steps=STEPS)
    job.refresh_from_db()
    first_message = job.celery_task_id
    training_workers.track(first_message)
    job = wait_for_job(job, lambda j: (j.status == Job.Status.RUNNING and j.progress >= KILL_AT)
                       or j.status in Job.FINISHED, 300, f"training reaching {KILL_AT}%", [first])
    assert job.status == Job.Status.RUNNING, job.log + job.error + first.tail()
    # It is the test's worker that runs it (task_track_started records where), in its pool child.
    running = AsyncResult(first_message)
    assert running.state == "STARTED" and running.info["hostname"].startswith(f"{first.name}@"), running.info
    assert running.info["pid"] != first.proc.pid and running.info["pid"] in _live_members(first.pgid)
    mark(f"job running at {job.progress}%")
    first.kill()  # the parent and the pool child, at once
    mark("first worker killed")
    job.refresh_from_db()
    killed_at = job.progress
    assert KILL_AT <= killed_at < 95, f"the kill came too late (at {killed_at}%): raise STEPS\n{job.log}"

    # The dead worker left everything as it was, and its job running with a heartbeat that stopped.
    time.sleep(1.5)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.progress, job.finished_at) == (Job.Status.RUNNING, 1, killed_at, None), \
        "the job moved after its worker was killed:\n" + job.log
    beat = job.heartbeat_at
    assert round_state(task) == rounds_before
    assert not ModelVersion.objects.filter(task=task, name=NAME).exists()
    assert list(ModelVersion.objects.filter(task=task)) == [target]
    # ml.train writes its artifact only after the last step (into a temporary sibling that
    # is renamed into place): killed at KILL_AT%, nothing was written, not even the temporary one.
    assert artifact_entries(task) == entries_before
    # The broker still holds the message that the dead worker never acknowledged (acks_late):
    # the transport hands it out again once its visibility timeout has passed.
    [orphan] = unacked_tags(first_message)

    # The sweeper: no heartbeat for longer than JOB_STALE_SECONDS -> queued again, once.
    settings.JOB_STALE_SECONDS = 2
    time.sleep(max(0.0, 3 - (time.time() - beat.timestamp())))
    report = sweep_stale_jobs()
    assert report.requeued == [job.pk] and not report.failed and not report.closed
    job.refresh_from_db()
    training_workers.track(job.celery_task_id)
    assert (job.status, job.attempts, job.progress) == (Job.Status.QUEUED, 1, 0)
    assert f"(worker lost); queued again (attempt 2 of {settings.JOB_MAX_ATTEMPTS})" in job.log
    assert "no heartbeat for " in job.log
    assert job.celery_task_id and job.celery_task_id != first_message  # sent again, as a new message
    assert round_state(task) == rounds_before
    mark("swept")

    # A fresh worker picks the job up and finishes it: one model, registered once.
    second = training_workers.start("second")
    mark("second worker ready")
    job = wait_for_job(job, lambda j: j.status in Job.FINISHED, 600, "the second attempt finishing", [second])
    assert job.status == Job.Status.SUCCEEDED, job.error + job.log + second.tail()
    assert job.attempts == 2 and job.progress == 100
    assert "attempt 2 started" in job.log
    mark("second attempt succeeded")
    model = ModelVersion.objects.get(task=task, name=NAME)
    assert job.result["model_version"] == model.pk
    ml.verify_artifact(model.artifact_dir, model.sha256)
    assert artifact_entries(task) == entries_before | {model.artifact_dir.name}  # and no temporary folder
    counts = model.training_data["counts"]["rounds"]
    assert counts["train"] + counts["dev"] == TRAIN_ROWS

    # Its evaluation was queued; the same worker runs it.
    evaluation = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=model.pk)
    training_workers.track(evaluation.celery_task_id)
    evaluation = wait_for_job(evaluation, lambda j: j.status in Job.FINISHED, 300, "the evaluation", [second])
    assert evaluation.status == Job.Status.SUCCEEDED, evaluation.error + second.tail()
    assert has_finished_evaluation(model)
    mark("evaluation succeeded")

    # Training never promotes: the open round and its target are what they were.
    assert round_state(task) == rounds_before

    # The first attempt's message, delivered again by the broker, is turned away by the
    # claim: no second model, no second evaluation, the job as it was.
    done = {f: getattr(job, f) for f in ("status", "attempts", "progress", "result", "finished_at", "log")}
    redeliver(orphan)
    assert AsyncResult(first_message).get(timeout=180) == job.pk
    deadline = time.monotonic() + 30  # acks_late: acknowledged just after the result is stored
    while unacked_tags(first_message) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not unacked_tags(first_message), "the redelivered message was never acknowledged"
    mark("redelivered message turned away")
    # And once more in this process, as a duplicate send would be.
    train_model.apply(args=[job.pk])
    job.refresh_from_db()
    assert {f: getattr(job, f) for f in done} == done
    assert ModelVersion.objects.filter(task=task).count() == 2
    assert Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL).count() == 1
    assert Job.objects.filter(kind=Job.Kind.TRAIN_MODEL).count() == 1


@pytest.mark.django_db(transaction=True)
def test_sweeping_a_job_lost_on_its_last_attempt_fails_it_and_touches_nothing(services, demo_tasks, settings):
    from jobs.engine import JobReporter, JobStopped, claim, create_job, sweep_stale_jobs
    from jobs.models import Job
    from leaderboard.tasks import train_model
    from registry.models import ModelVersion

    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    # The sweep reads no artifact: a registered row is enough to stand for the round's target.
    target = ModelVersion.objects.create(task=task, name="round-1-target", artifact_path="sentiment/none",
                                         sha256="0" * 64)
    rnd.target_models.add(target)
    rounds_before = round_state(task)

    # A training job on its last attempt (the sweeper queued it once already), whose worker is gone.
    job = create_job(Job.Kind.TRAIN_MODEL, params={"name": NAME}, task=task)
    Job.objects.filter(pk=job.pk).update(celery_task_name=train_model.name, queue="training",
                                         attempts=settings.JOB_MAX_ATTEMPTS - 1)
    attempt = claim(job.pk)
    assert attempt == settings.JOB_MAX_ATTEMPTS
    lost = JobReporter(job.pk, attempt)
    lost.progress(40, "epoch 1/2 step 20/48 loss 0.6800")

    settings.JOB_STALE_SECONDS = 1
    time.sleep(1.5)
    report = sweep_stale_jobs()
    assert report.failed == [job.pk] and not report.requeued and not report.closed
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.finished_at is not None
    assert job.attempts == settings.JOB_MAX_ATTEMPTS  # not started again
    assert job.error.startswith("No heartbeat for ")
    assert (f"the worker was lost (killed or out of memory) after {settings.JOB_MAX_ATTEMPTS} attempt(s). "
            "Nothing it was doing was registered.") in job.error
    assert f"failed after {settings.JOB_MAX_ATTEMPTS} attempt(s)" in job.log.splitlines()[-1]

    # Nothing else moved.
    assert round_state(task) == rounds_before
    assert list(ModelVersion.objects.filter(task=task)) == [target]
    assert sweep_stale_jobs().failed == []  # a failed job is finished: the next sweep leaves it alone

    # Were the lost worker still alive after all, its next report would stop it.
    with pytest.raises(JobStopped):
        lost.progress(41, "epoch 1/2 step 21/48")
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.progress == 40

    # The task is free for a new training job.
    assert create_job(Job.Kind.TRAIN_MODEL, params={"name": "next"}, task=task).status == Job.Status.QUEUED
