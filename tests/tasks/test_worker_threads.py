"""Pool processes split the cores between them (annotation.startup)."""

import os
from types import SimpleNamespace

import pytest

from annotation.startup import split_cores_between_pool_processes, torch_threads_per_process


@pytest.mark.parametrize(("cpus", "processes", "threads"), [(2, 2, 1), (2, 1, 2), (16, 4, 4), (2, 8, 1), (3, 2, 1)])
def test_each_pool_process_gets_its_share(cpus, processes, threads):
    assert torch_threads_per_process(cpus, processes) == threads


@pytest.mark.parametrize(("pool", "concurrency", "expected_processes"), [
    ("celery.concurrency.prefork:TaskPool", 2, 2),
    ("celery.concurrency.thread:TaskPool", 4, 1),  # its passes all run on one model thread
    ("celery.concurrency.solo:TaskPool", 8, 1),
])
def test_worker_init_sets_the_threads_unless_the_operator_did(monkeypatch, pool, concurrency, expected_processes):
    # The sender stands for Celery's WorkController: only the two attributes read here.
    sender = SimpleNamespace(pool_cls=pool, concurrency=concurrency)
    monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "")  # recorded first: teardown restores the original
    monkeypatch.delenv("DYNABENCH_TORCH_THREADS")
    split_cores_between_pool_processes(sender=sender)
    assert os.environ["DYNABENCH_TORCH_THREADS"] == str(torch_threads_per_process(os.cpu_count(), expected_processes))

    monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "3")
    split_cores_between_pool_processes(sender=sender)
    assert os.environ["DYNABENCH_TORCH_THREADS"] == "3"
