"""The names of the Celery tasks and queues, written once.

A task's name is what a broker's messages and the beat schedule carry, so it never
changes when the code moves (``tasks.sweep_stale_jobs`` lives in ``jobs/``). The
tasks register under these names (``@shared_task(name=...)``), the settings route
and schedule them by these names (``CELERY_TASK_ROUTES``, ``CELERY_BEAT_SCHEDULE``),
and the services send them by these names (``jobs.engine.enqueue_by_name``) without
importing the task modules above them. Plain strings, nothing imported: the settings
read this module before Django is set up. ``tests/core/test_celery_names.py`` checks
that every name here is a registered task and every queue has a worker.
"""

# --- Queues: the workers consume them (Makefile, Procfile) ----------------------------
DEFAULT_QUEUE = "default"  # small housekeeping and data jobs
INFERENCE_QUEUE = "inference"  # predictions and model loads, latency-bound
EXPLAIN_QUEUE = "explain"  # explanations, their own lane so none delays a prediction
TRAINING_QUEUE = "training"  # training, evaluation and submission checks, long
QUEUES = (DEFAULT_QUEUE, INFERENCE_QUEUE, EXPLAIN_QUEUE, TRAINING_QUEUE)

# --- Tasks, by the app that defines them ----------------------------------------------
# tasks/tasks.py
HEALTH_CHECK = "dynabench.health_check"
HEALTH_CHECK_JOB = "tasks.health_check_job"
# jobs/tasks.py (named as when it lived in tasks/)
SWEEP_STALE_JOBS = "tasks.sweep_stale_jobs"
# annotation/tasks.py
PREDICT = "annotation.predict"
EXPLAIN = "annotation.explain"
LOAD_MODELS = "annotation.load_models"
PRUNE_IDEMPOTENCY_KEYS = "annotation.prune_idempotency_keys"
REFIT_RELIABILITY = "annotation.refit_reliability"
REFIT_DUE_RELIABILITY = "annotation.refit_due_reliability"
RECONCILE_COUNTS = "annotation.reconcile_counts"
EXPORT_EXAMPLES = "annotation.export_examples"
# leaderboard/tasks.py
TRAIN_MODEL = "leaderboard.train_model"
EVALUATE_MODEL = "leaderboard.evaluate_model"
CHECK_SUBMISSION = "leaderboard.check_submission"
RELEASE_DATASET = "leaderboard.release_dataset"
# crowd/tasks.py
CROWD_SYNC = "crowd.sync"
PAY_BONUSES = "crowd.pay_bonuses"

TASKS = (
    HEALTH_CHECK, HEALTH_CHECK_JOB, SWEEP_STALE_JOBS,
    PREDICT, EXPLAIN, LOAD_MODELS, PRUNE_IDEMPOTENCY_KEYS, REFIT_RELIABILITY, REFIT_DUE_RELIABILITY,
    RECONCILE_COUNTS, EXPORT_EXAMPLES,
    TRAIN_MODEL, EVALUATE_MODEL, CHECK_SUBMISSION, RELEASE_DATASET,
    CROWD_SYNC, PAY_BONUSES,
)
