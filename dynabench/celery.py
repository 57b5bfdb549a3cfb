"""The Celery app.

Queues: ``inference`` (predictions and explanations, latency-bound) and
``training`` (training and evaluation jobs, long). ``default`` carries small
housekeeping tasks such as the health check. With no broker configured
(embedded mode) tasks run in-process.

Models load in ``worker_process_init``, in each pool child after the fork:
a process that ran a torch forward pass and then forks gets children that
hang (see DESIGN.md), so the parent never touches torch.
"""

import logging
import os

from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")

app = Celery("dynabench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)


def _pool_name(worker) -> str:
    """The worker's pool class as a dotted name (``pool_cls`` is a class or a string)."""
    pool = getattr(worker, "pool_cls", None)
    return str(pool if isinstance(pool, str) else getattr(pool, "__module__", ""))


def torch_threads_per_process(cpus: int, processes: int) -> int:
    """Intra-op threads for each of ``processes`` pool processes sharing ``cpus``."""
    return max(1, cpus // max(1, processes))


@worker_init.connect
def split_cores_between_pool_processes(sender=None, **_kwargs):
    """Give each pool process (or pool thread) its share of the cores, unless DYNABENCH_TORCH_THREADS
    says otherwise. Runs in the parent before the children fork, and the children
    inherit the environment. torch's default is every core in every child: with two
    children on two cores, four OpenMP threads spin against each other and a model
    pass under load slows several-fold (measured 8.3 against 31.7 examples/s)."""
    if os.environ.get("DYNABENCH_TORCH_THREADS", "").strip():
        return
    # prefork children and pool threads each run passes at once; solo runs one
    parallel = any(name in _pool_name(sender) for name in ("prefork", "thread"))
    processes = getattr(sender, "concurrency", 1) if parallel else 1
    threads = torch_threads_per_process(os.cpu_count() or 1, processes)
    os.environ["DYNABENCH_TORCH_THREADS"] = str(threads)
    log.info("torch intra-op threads per pool process: %d (%d processes)", threads, processes)


@worker_ready.connect
def load_models_in_solo_worker(sender=None, **_kwargs):
    """The solo pool (``-P solo``, one process that never forks) sends no
    ``worker_process_init``: warm its cache once the worker is ready."""
    if "solo" in _pool_name(sender):
        load_models_in_child()


@worker_process_init.connect
def load_models_in_child(**_kwargs):
    """Warm the model cache with the open rounds' target models."""
    from tasks.registry import warm_up_target_models

    try:
        loaded = warm_up_target_models()
    except Exception:  # a broken artifact must not stop the worker from serving others
        log.exception("warming up target models failed")
    else:
        log.info("worker process %s loaded %d target model(s)", os.getpid(), loaded)
