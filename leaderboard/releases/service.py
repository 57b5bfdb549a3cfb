"""Making a release: the service that queues it and the job that writes it.

``start_release`` checks the request (closed rounds only, known splits, the test split
only when released on purpose, something verified to release, the pseudonym key set,
no other release of the task under way) and queues a ``release_dataset`` job. The job
(``run_release_job``) checks the rounds again (one may have opened meanwhile), writes
the split files a chunk at a time (progress on the Job row), then ``croissant.json``
and README.md, puts the folder in the artifact store under a location of its own, and
only then records the
``Release`` with its version, counts and digests, in the transaction that completes
the job: a release that exists has all its files, and a failed job leaves no row.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Sum
from django.utils import timezone

from annotation.models import RoundCounts
from core import celery_names
from core.errors import Conflict, InvalidInput
from jobs.engine import JobReporter, create_job, enqueue_by_name, run_job
from jobs.models import Job
from registry import artifacts
from tasks.models import Task

from ..models import Release
from . import card, croissant, files
from .public import TEST
from .rows import SPLITS, check_rounds, columns, pseudonym_key, released_rows

README, CROISSANT = "README.md", "croissant.json"


def usable_count(rounds, splits) -> int:
    """Usable examples of ``rounds`` in ``splits``, from the round counters (no row read)."""
    totals = RoundCounts.objects.filter(round__in=rounds).aggregate(
        **{split: Sum(f"usable_{split}") for split in splits})
    return sum(value or 0 for value in totals.values())


def released_splits(splits, release_test_split: bool) -> list[str] | None:
    """The splits a release asks for: ``splits``, or by default train and dev, and test
    too with ``release_test_split``. The test split is the leaderboard's test data: it is
    released only on purpose (``release_test_split``, recorded on the release), never by
    default; naming it without that is a 400 that says so."""
    if splits is None:
        return [s for s in SPLITS if s != TEST or release_test_split]
    if TEST in splits and not release_test_split:
        raise InvalidInput.field(
            "release_test_split", "The test split is the leaderboard's test data: it is released only on purpose. "
                                  "Set release_test_split to true (recorded on the release; the split is public "
                                  "from then on, in the data browser too), or leave test out.")
    return splits


def start_release(task: Task, *, rounds, splits=None, user=None, release_test_split: bool = False) -> Job:
    """Queue the job that makes ``task``'s next release of ``rounds`` (round numbers) and
    ``splits`` (default: train and dev; the test split only with ``release_test_split``:
    ``released_splits``). Refused with the reason: an unknown or unclosed round, an
    unknown split, the test split not released on purpose, nothing verified in them, no
    pseudonym key, or another release of the task queued or running."""
    splits = released_splits(splits, release_test_split)
    round_rows, splits = check_rounds(task, rounds, splits)
    pseudonym_key()  # refuses (503) when RELEASE_PSEUDONYM_KEY is not set
    if not usable_count(round_rows, splits):
        raise Conflict(f"Nothing to release: round(s) {', '.join(str(r.number) for r in round_rows)} of "
                       f"{task.slug} hold no verified example in {', '.join(splits)}.")
    with transaction.atomic():
        # The task's row is the lock: two researchers asking at once queue one job.
        Task.objects.select_for_update().filter(pk=task.pk).first()
        active = Job.objects.filter(task=task, kind=Job.Kind.RELEASE_DATASET, status__in=Job.ACTIVE).first()
        if active is not None:
            raise Conflict(f"Task {task.slug} already has a release job {active.status}: job #{active.pk}. "
                           "Wait for it to finish or cancel it first.")
        job = create_job(Job.Kind.RELEASE_DATASET, task=task, user=user,
                         params={"rounds": [r.number for r in round_rows], "splits": splits,
                                 "release_test_split": bool(release_test_split and TEST in splits)})
        enqueue_by_name(job, celery_names.RELEASE_DATASET)
    return job


def next_version(task: Task) -> int:
    return (Release.objects.filter(task=task).aggregate(v=Max("version"))["v"] or 0) + 1


def build_release(task: Task, folder: Path, *, version: int, round_numbers, splits,
                  reporter: JobReporter | None = None, release_test_split: bool = False) -> tuple[dict, dict]:
    """Write a release of ``task`` into ``folder``: ``data/<split>.parquet`` per split with
    rows, ``croissant.json`` and ``README.md``. Returns (facts, files)."""
    splits = released_splits(splits, release_test_split)
    rounds, splits = check_rounds(task, round_numbers, splits)
    cols = columns(task)
    tally = card.Tally(labelled=task.parsed_config.kind.has_labels)
    expected = max(usable_count(rounds, splits), 1)
    created_at = timezone.now()
    written = 0
    data_files = {}
    for split in splits:
        path = folder / "data" / f"{split}.parquet"

        def counted(chunk, split=split):
            nonlocal written
            tally.add(split, chunk)
            written += len(chunk.rows)
            if reporter is not None:
                reporter.progress(min(90, 90 * written / expected), f"{split}: {tally.rows[split]} rows written")

        rows = files.write_split(path, cols, released_rows(task, rounds, split), on_chunk=counted)
        if rows:
            data_files[f"data/{split}.parquet"] = files.describe(path, rows=rows)
        else:
            path.unlink()
    if not data_files:
        raise Conflict(f"Nothing to release: round(s) {', '.join(str(r.number) for r in rounds)} of {task.slug} "
                       f"hold no verified example in {', '.join(splits)}.")
    facts = card.card_facts(task, version=version, rounds=rounds, requested_splits=splits, tally=tally,
                            columns=cols, created_at=created_at)
    (folder / CROISSANT).write_text(json.dumps(croissant.croissant(facts, data_files), indent=2, ensure_ascii=False)
                                    + "\n", encoding="utf-8")
    listed = {**data_files, CROISSANT: files.describe(folder / CROISSANT)}
    (folder / README).write_text(card.render_card(facts, listed), encoding="utf-8")
    return facts, {README: files.describe(folder / README), **listed}


def run_release_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        task = job.task
        if task is None:
            raise Conflict(f"Job #{job.pk} has no task (it was deleted); nothing to release.")
        version = next_version(task)
        scratch = Path(settings.DYNABENCH_MODELS_DIR) / ".release-scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{task.slug}-v{version}-", dir=scratch))
        try:
            reporter.progress(0, f"release v{version} of {task.slug}: rounds {job.params['rounds']}, "
                                 f"splits {job.params['splits']}")
            test_split = bool(job.params.get("release_test_split"))
            facts, described = build_release(task, tmp, version=version, round_numbers=job.params["rounds"],
                                             splits=job.params["splits"], reporter=reporter,
                                             release_test_split=test_split)
            reporter.progress(92, "storing the files")
            # A location of its own (a random suffix): a retried or raced job, or one of a
            # database made again beside the same store, never writes over files a
            # release points at (``store_folder`` refuses a folder that holds files).
            location = artifacts.store_folder(tmp, f"releases/{task.slug}/v{version}-{secrets.token_hex(6)}")
            result = {"version": version, "rows": facts["counts"]["rows"], "splits": facts["splits"],
                      "location": location}
            with transaction.atomic():
                try:
                    with transaction.atomic():
                        release = Release.objects.create(
                            task=task, version=version, rounds=facts["rounds"], splits=facts["splits"],
                            counts=facts["counts"], files=described, license=facts["license"], location=location,
                            job=job, created_by=job.created_by,
                            test_split_released=test_split and TEST in facts["splits"])
                except IntegrityError:
                    raise Conflict(f"Another release of {task.slug} took version {version} meanwhile; run this "
                                   "job again for the next version.") from None
                result["release"] = release.pk
                reporter.complete(result)
            return result
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    return run_job(job_id, work)


def copy_release(release: Release, out: Path) -> list[Path]:
    """Copy every file of ``release`` into the folder ``out`` (made if missing), each
    checked against the digest the release recorded; the paths written."""
    out = Path(out)
    written = []
    for name, entry in release.files.items():
        dest = out / name
        artifacts.copy_stored_file(release.location, name, dest)
        if files.sha256_of(dest) != entry["sha256"]:
            raise Conflict(f"{name} of {release} in the artifact store does not match the sha256 the release "
                           f"recorded ({entry['sha256']}): the stored file was changed or damaged.")
        written.append(dest)
    return written
