"""What a process does when it starts, so the project's wiring (``dynabench/wsgi.py``,
``dynabench/celery.py``) calls one function each and holds no policy:

- ``start_web_process``: an embedded web process leaves a core to its request threads,
  warms up the open rounds' target models and runs the jobs left queued.
- ``connect_worker_signals``: a Celery worker splits the cores between its pool
  processes, loads the models where it may (after the fork, never in a prefork
  parent), and stamps a heartbeat for the queues it consumes.

The models run here (``annotation.runtime``), so the policy of their threads and
warm-up is this app's; job resumption is the job engine's (``jobs.engine``), called
from here because the web process starts here. Nothing at module level touches Django
or torch: ``dynabench.celery`` imports this before Django's settings are read.

Models load in ``worker_process_init``, in each pool child after the fork: a process
that ran a torch forward pass and then forks gets children that hang
(docs/operations.md: "Torch and fork"), so the parent never touches torch.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import TimeoutError as FutureTimeout

from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutdown

log = logging.getLogger(__name__)

# How long a solo or threads worker waits for its models before it takes tasks anyway
# (each task then waits INFERENCE_WARMUP_WAIT, or answers "warming up").
WORKER_WARMUP_LIMIT = 300.0


# --- the web process (embedded mode) --------------------------------------------------


def start_web_process() -> None:
    """Run where the WSGI application is imported: each gunicorn worker after its fork
    (never use --preload, which would load torch in the parent; see docs/operations.md:
    "Torch and fork"), and runserver's serving process."""
    leave_a_core_for_the_request_threads()
    warm_up_web_process()
    resume_jobs()


def leave_a_core_for_the_request_threads() -> None:
    """Embedded mode: the model runs on one torch thread fewer than the process has
    cores (at least one) unless ``DYNABENCH_TORCH_THREADS`` says otherwise, so the
    request threads keep a core. On two cores, one torch thread gave the same
    throughput under load with a lower median latency (bench/RESULTS.md: "The web
    process's torch threads"). Training jobs this process runs share the setting: a
    process that serves annotators does not give all its cores to a job. Service mode
    runs no model here, and its workers share their cores out themselves."""
    from .inference import embedded

    if embedded():
        os.environ.setdefault("DYNABENCH_TORCH_THREADS", str(max(1, len(os.sched_getaffinity(0)) - 1)))


def warm_up_web_process() -> None:
    """Embedded mode: load the open rounds' target models now, on the model thread, so
    the first example does not wait for a load (``DYNABENCH_WARM_UP=0`` skips it)."""
    from .inference import embedded
    from .runtime import warm_up_in_background

    if embedded() and os.environ.get("DYNABENCH_WARM_UP", "1") != "0":
        warm_up_in_background()


def resume_jobs() -> None:
    """Embedded mode: run the jobs that wait (``make run`` queues the demo models'
    training before it serves), on this process's background job thread."""
    from django.db import DatabaseError

    from jobs.engine import resume_queued_jobs

    try:
        sent = resume_queued_jobs()
    except DatabaseError as exc:  # not migrated yet: nothing can be queued
        log.warning("queued jobs not resumed: %s", exc)
        return
    if sent:
        log.info("resumed queued jobs %s on the background job thread", sent)


# --- the Celery worker ----------------------------------------------------------------


def connect_worker_signals() -> None:
    """Connect the worker's start-up and shut-down receivers (once, however often this
    runs). ``load_models_in_child`` must run before the receiver Celery's Django fix-up
    connects to ``worker_process_init`` when the worker starts: calling this where the
    Celery app is made, as ``dynabench.celery`` does, puts it first."""
    for signal, receiver in ((worker_init, remember_the_worker_process),
                             (worker_init, split_cores_between_pool_processes),
                             (worker_ready, load_models_in_solo_worker),
                             (worker_ready, start_heartbeat),
                             (worker_shutdown, stop_heartbeat),
                             (worker_process_init, load_models_in_child)):
        signal.connect(receiver, weak=False, dispatch_uid=f"{__name__}.{receiver.__name__}")


def _pool_name(worker) -> str:
    """The worker's pool class as a dotted name (``pool_cls`` is a class or a string)."""
    pool = getattr(worker, "pool_cls", None)
    return str(pool if isinstance(pool, str) else getattr(pool, "__module__", ""))


_main_pid = None  # the worker's own process, as opposed to a prefork pool child


def torch_threads_per_process(cpus: int, processes: int) -> int:
    """Intra-op threads for each of ``processes`` pool processes sharing ``cpus``."""
    return max(1, cpus // max(1, processes))


def remember_the_worker_process(**_kwargs):
    """``worker_init``: the worker's own process id, to tell it from its prefork pool
    children later."""
    global _main_pid
    _main_pid = os.getpid()


def split_cores_between_pool_processes(sender=None, **_kwargs):
    """``worker_init``: give each pool process (or pool thread) its share of the cores,
    unless DYNABENCH_TORCH_THREADS says otherwise. Runs in the parent before the children
    fork, and the children inherit the environment. torch's default is every core in
    every child: with two children on two cores, four OpenMP threads spin against each
    other and a model pass under load slows several-fold."""
    if os.environ.get("DYNABENCH_TORCH_THREADS", "").strip():
        return
    # prefork children each run passes at once; solo runs one, and the threads pool
    # runs its predictions on the process's one model thread (annotation.batching)
    parallel = "prefork" in _pool_name(sender)
    processes = getattr(sender, "concurrency", 1) if parallel else 1
    threads = torch_threads_per_process(os.cpu_count() or 1, processes)
    os.environ["DYNABENCH_TORCH_THREADS"] = str(threads)
    log.info("torch intra-op threads per pool process: %d (%d processes)", threads, processes)


def load_models_in_solo_worker(sender=None, **_kwargs):
    """``worker_ready``: the solo and threads pools (one process that never forks) send
    no ``worker_process_init``: load the open rounds' target models once the worker is
    ready, and wait for them. Celery sends this signal before its consumer's loop reads
    the first message, so the worker takes no task until it can answer one: a worker
    added beside a warm one under load leaves the queue to it meanwhile, where it used to
    take tasks and answer "warming up" to each. Its heartbeat (``start_heartbeat``, the
    next receiver) starts after the wait too, so the web counts it once it can answer."""
    name = _pool_name(getattr(sender, "controller", None) or sender)
    if "solo" in name or "thread" in name:
        wait_for_models(warm_up_models(), WORKER_WARMUP_LIMIT)


def wait_for_models(futures, limit: float) -> None:
    """Wait up to ``limit`` seconds in all for the loads; a load that failed or runs
    longer is logged (its predictions answer for it) and the worker goes on."""
    deadline = time.monotonic() + limit
    for future in futures:
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            log.warning("a target model is still loading after %.1f s: taking tasks anyway", limit)
            return
        except Exception:  # noqa: BLE001 - logged by the load's own callback; it answers for itself
            continue


_heartbeat = None


def start_heartbeat(sender=None, **_kwargs):
    """``worker_ready``: once the worker consumes, stamp its queues in Redis every few
    seconds (``core.consumers``): the web answers "no worker" at once for a queue nobody
    consumes, instead of timing out. Needs a Redis (``INFERENCE_REPLY_URL``)."""
    global _heartbeat
    from django.conf import settings

    from core.consumers import Heartbeat

    url = settings.INFERENCE_REPLY_URL
    if not url or sender is None or _heartbeat is not None:
        return
    queues = sorted(sender.app.amqp.queues.consume_from)
    _heartbeat = Heartbeat(url, queues, sender.hostname).start()
    log.info("heartbeat: %s consumes %s", sender.hostname, ", ".join(queues))


def stop_heartbeat(**_kwargs):
    """``worker_shutdown``."""
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None


def load_models_in_child(**_kwargs):
    """``worker_process_init``: load the open rounds' target models on the model thread,
    without blocking the worker: a prediction that comes first waits for the load (or
    gets "warming up").

    Celery's Django fix-up answers this signal (after this receiver) by ``os.close``-ing
    the descriptor of every open database connection, as a forked child must for the
    connections it inherited, and then closing the connection, which closes the same
    descriptor number a second time. A file that another thread (a model loading)
    opened in between gets that number and is closed under it: the worker died at
    start-up, importing its own modules ("Bad file descriptor", "No module named ...").
    So this receiver closes the connection it opened to read the open rounds before the
    fix-up runs, leaving it nothing to close. The worker's parent holds no connection
    when it forks: the fix-up closed them at ``worker_init``, and the parent reads
    nothing since.

    Celery 5.7's solo pool sends this signal too, in the worker's own process; there
    ``worker_ready`` warms the models up (``load_models_in_solo_worker``), so nothing
    starts here.
    """
    from django.db import connections

    if os.getpid() != _main_pid:
        warm_up_models()
    connections.close_all()  # before the fix-up's receiver, which runs after this one


def warm_up_models() -> list:
    """Start loading the open rounds' target models on the model thread; the loads'
    Futures."""
    from .runtime import warm_up_in_background

    futures = warm_up_in_background()
    for future in futures:
        future.add_done_callback(lambda done: log.info(
            "worker process %s: a target model %s", os.getpid(),
            "loaded" if done.exception() is None else f"failed to load: {done.exception()}"))
    return futures
