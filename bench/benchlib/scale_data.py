"""``bench/scale.py``'s database: one NLI task shaped like a study, at any size.

Django must be set up (``scale_part``). ``build(n)`` writes, deterministically from
a seed: 2,000 accounts (a tenth of them MTurk workers), a researcher who owns the
task, the superuser of ``bootstrap_demo``; ``n`` examples written on the platform
(about 30% fooling the model; verified, rejected, pending, flagged, user-flagged and
retracted in a fixed mix), about three decisions each (blind answer first), 10% of
the examples from MTurk assignments (batches of ``BATCH_EXAMPLES``, HITs,
assignments, worker identities, their sessions, the settled bonus ledger), the
validators' reliability rows and a fit that read every vote.

Rows are stored with ``bulk_create`` in chunks, every column set as the project's
own ``save()`` would set it: ``Validation.task``, ``Example.provisional`` (from the
session), ``queue_priority`` and ``queue_priority_adaptive`` (``Example.queue_priorities``),
the vote counters, the signature (``services.examples.example_signature``). The
round counters are then filled by the project's own recount
(``annotation.counters.reconcile``), and the periodic jobs' watermarks are
set as if each had just run (the history is settled and checked).
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from annotation import counters
from annotation.examples import example_signature
from annotation.models import (
    AnnotationSession,
    Example,
    ReliabilityFit,
    Validation,
    ValidatorReliability,
)
from crowd.models import Assignment, Batch, BonusPayment, Hit, Watermark, WorkerIdentity
from leaderboard.demo import bootstrap_demo
from tasks.models import Task
from tasks.roles import make_researcher

BUILD_VERSION = 1  # bump when the shape of the data changes: stored databases are rebuilt
SEED = 42
ACCOUNTS = 2000
MTURK_WORKERS = 200  # of the accounts, the first ones
MTURK_SHARE = 10  # every 10th example comes from an MTurk assignment
BATCH_EXAMPLES = 10_000  # MTurk examples per batch
EXAMPLES_PER_ASSIGNMENT = 5
CHUNK = 5_000  # examples stored per transaction
LABELS = ("entailment", "neutral", "contradiction")
WORDS = ("cat", "dog", "river", "market", "child", "music", "old", "red", "quietly", "never", "always", "city",
         "train", "book", "winter", "doctor", "paints", "runs", "sleeps", "sings", "two", "three", "tall", "small")
# (status, flagged, retracted, cumulative share): the outcomes' mix
OUTCOMES = (("verified", False, False, 0.55), ("rejected", False, False, 0.70), ("pending", False, False, 0.92),
            ("flagged", True, False, 0.95), ("pending", True, False, 0.97), ("pending", False, True, 1.0))
SPLITS = (("train", 0.8), ("dev", 0.9), ("test", 1.0))
RESEARCHER = "bench-researcher"
VALIDATOR = "bench-1999"  # the account that asks for the next validation item
PASSWORD = "!bench-unusable"  # an unusable password: nobody signs in as these accounts


@contextmanager
def own_stamps():
    """While building: ``Example.updated_at`` and ``Validation.created_at`` take the
    times the build gives them (the history's), not the build's own clock (``auto_now``)."""
    fields = [Example._meta.get_field("updated_at"), Validation._meta.get_field("created_at")]
    saved = [(field.auto_now, field.auto_now_add) for field in fields]
    for field in fields:
        field.auto_now = field.auto_now_add = False
    try:
        yield
    finally:
        for field, (auto_now, auto_now_add) in zip(fields, saved, strict=True):
            field.auto_now, field.auto_now_add = auto_now, auto_now_add


def _pick(rng: random.Random, table):
    r = rng.random()
    for row in table:
        if r < row[-1]:
            return row
    return table[-1]


def _votes(rng: random.Random, status: str, flagged: bool, retracted: bool) -> list[str]:
    """The decisions an example of this outcome received, in order."""
    if status == "verified":
        return ["correct"] * 3 + (["incorrect"] if rng.random() < 0.3 else [])
    if status == "rejected":
        return ["incorrect"] * 3 + (["correct"] if rng.random() < 0.3 else [])
    if status == "flagged":
        return ["flagged"] * 3
    if retracted:
        return ["correct"] * rng.randint(0, 1)
    return [rng.choice(("correct", "incorrect")) for _ in range(rng.randint(1, 2))]


def _users(now) -> list:
    User = get_user_model()
    joined = now - timedelta(days=120)
    User.objects.bulk_create([User(username=f"bench-{k:04d}", password=PASSWORD, date_joined=joined)
                              for k in range(ACCOUNTS)], batch_size=1000)
    users = list(User.objects.filter(username__startswith="bench-").exclude(username=RESEARCHER).order_by("username"))
    researcher = User.objects.create_user(RESEARCHER, password=None, date_joined=joined)
    make_researcher(researcher)
    return users, researcher


class Crowd:
    """The MTurk side: batches of ``BATCH_EXAMPLES`` examples, one assignment (and its
    session) per ``EXAMPLES_PER_ASSIGNMENT`` examples, the last batch's last assignments
    still being worked (provisional)."""

    def __init__(self, task, rnd, workers, n_mturk: int, start, now):
        self.task, self.rnd, self.workers, self.now = task, rnd, workers, now
        self.n_batches = max(1, -(-n_mturk // BATCH_EXAMPLES))
        self.n_assignments = -(-n_mturk // EXAMPLES_PER_ASSIGNMENT)
        self.working_from = self.n_assignments - max(1, self.n_assignments // 100)
        self.per_batch = -(-self.n_assignments // self.n_batches)
        self.batches, self.hits, self.sessions = [], {}, {}
        for b in range(self.n_batches):
            hits = max(1, -(-self.per_batch // 100))
            batch = Batch.objects.create(
                task=task, round=rnd, mode=Batch.Mode.CREATE, sandbox=True, title=f"Bench batch {b}",
                description="Write hypotheses that fool the model.", hits=hits, assignments_per_hit=100,
                examples_per_assignment=EXAMPLES_PER_ASSIGNMENT, reward=Decimal("0.50"),
                bonus_per_example=Decimal("0.25"), quality_block_threshold=0.05, hit_type_id=f"HT{b}",
                status=Batch.Status.PUBLISHED, created_at=start, published_at=start,
                expires_at=now + timedelta(days=3), quality_checked_until=now)
            self.batches.append(batch)
            Hit.objects.bulk_create([Hit(batch=batch, number=h + 1, hit_id=f"HIT-{b}-{h}", created_at=start)
                                     for h in range(hits)])
            self.hits[b] = list(Hit.objects.filter(batch=batch).order_by("number"))
        self.identities = {}
        WorkerIdentity.objects.bulk_create([WorkerIdentity(user=u, worker_id=f"AW{u.pk:012d}", sandbox=True,
                                                           verified_at=start) for u in workers])
        self.identities = {w.user_id: w for w in WorkerIdentity.objects.filter(user__in=workers)}

    def make_assignments(self, n: int, start, span, rng: random.Random) -> dict[int, AnnotationSession]:
        """Every assignment with its session, stamped when its first example was written
        (the ``i``-th MTurk example is example ``MTURK_SHARE * i`` of ``n``)."""
        for first in range(0, self.n_assignments, CHUNK):
            made = {}
            for a in range(first, min(self.n_assignments, first + CHUNK)):
                when = start + span * (MTURK_SHARE * EXAMPLES_PER_ASSIGNMENT * a / n)
                worker = self.workers[rng.randrange(len(self.workers))]
                made[a] = (when, AnnotationSession(
                    user=worker, task=self.task, mturk_assignment_id=f"ASG{a:09d}", mode=AnnotationSession.Mode.CREATE,
                    provisional=a >= self.working_from, created_at=when))
            with transaction.atomic():
                AnnotationSession.objects.bulk_create([session for _, session in made.values()])
                assignments = []
                for a, (when, session) in made.items():
                    b = min(a // self.per_batch, self.n_batches - 1)
                    hit = self.hits[b][min((a - b * self.per_batch) // 100, len(self.hits[b]) - 1)]
                    working = a >= self.working_from
                    done = None if working else when + timedelta(minutes=30)
                    assignments.append(Assignment(
                        hit=hit, assignment_id=f"ASG{a:09d}", worker=self.identities[session.user_id],
                        session=session, status=Assignment.Status.WORKING if working else Assignment.Status.APPROVED,
                        submit_to="https://workersandbox.mturk.com", accepted_at=when,
                        deadline=when + timedelta(hours=1), finished_at=done, submitted_at=done,
                        auto_approval_at=None if working else when + timedelta(days=3),
                        verified_at=None if working else when + timedelta(minutes=40),
                        decided_at=None if working else when + timedelta(hours=2)))
                Assignment.objects.bulk_create(assignments)
            self.sessions.update({a: session for a, (_, session) in made.items()})
        return self.sessions

    def settle_history(self) -> None:
        """The bonus ledger of every approved assignment, paid (each run settled it), and
        the watermark of the bonus run: the history is settled."""
        from django.db.models import Count, Q

        fooled = (Assignment.objects.filter(hit__batch__task=self.task, status=Assignment.Status.APPROVED)
                  .annotate(n=Count("session__examples", filter=Q(session__examples__fooled=True,
                                                                  session__examples__validation_status="verified")))
                  .values_list("pk", "n", "hit__batch__uid"))
        rows = [BonusPayment(assignment_id=pk, reason=BonusPayment.Reason.VERIFIED_FOOLING,
                             amount=Decimal("0.25") * min(n, EXAMPLES_PER_ASSIGNMENT),
                             example_count=min(n, EXAMPLES_PER_ASSIGNMENT), message="Bonus (bench history)",
                             unique_request_token=f"dynabench-{uid.hex}-{pk}-verified"[:64],
                             status=BonusPayment.Status.PAID, paid_at=self.now, created_at=self.now)
                for pk, n, uid in fooled]
        BonusPayment.objects.bulk_create(rows, batch_size=2000)
        Watermark.objects.update_or_create(name="bonuses", defaults={"until": self.now})


def _reliabilities(task, users, now) -> None:
    rng = random.Random(f"{SEED}:reliability")
    rows = []
    for user in users:
        s, t = rng.uniform(0.6, 0.95), rng.uniform(0.6, 0.95)
        rows.append(ValidatorReliability(
            task=task, validator=user, s_hits=40 * s, s_misses=40 * (1 - s), t_hits=20 * t, t_misses=20 * (1 - t),
            votes=rng.randint(100, 3000), sensitivity=s, specificity=t, accuracy=(s + t) / 2,
            accuracy_low=(s + t) / 2 - 0.05, accuracy_high=(s + t) / 2 + 0.05, weight=1.0, fitted_at=now))
    ValidatorReliability.objects.bulk_create(rows, batch_size=1000)


def build(n: int, log=print) -> dict:
    """Write the study of ``n`` examples into the (migrated, empty) database; what was
    written and how fast."""
    started = time.perf_counter()
    now = timezone.now()
    bootstrap_demo(slugs=["nli"], with_models=False, seed_examples=False)
    task = Task.objects.get(slug="nli")
    rnd = task.open_round()
    users, researcher = _users(now)
    task.owners.add(researcher)
    contexts = list(task.contexts.values_list("pk", flat=True))
    span = timedelta(days=90)
    start = now - span - timedelta(days=1)
    own_sessions = {s.user_id: s for s in AnnotationSession.objects.bulk_create(
        [AnnotationSession(user=u, task=task, created_at=start) for u in users], batch_size=1000)}
    workers = users[:MTURK_WORKERS]
    crowd = Crowd(task, rnd, workers, n // MTURK_SHARE, start, now)
    rng = random.Random(SEED)
    mturk_sessions = crowd.make_assignments(n, start, span, rng)
    made = {"examples": 0, "validations": 0}
    mturk_seen = 0
    for first in range(0, n, CHUNK):
        rows, votes = [], []
        for i in range(first, min(n, first + CHUNK)):
            when = start + span * (i / n)
            mturk = i % MTURK_SHARE == 0
            if mturk:
                session = mturk_sessions[mturk_seen // EXAMPLES_PER_ASSIGNMENT]
                writer_id = session.user_id
                mturk_seen += 1
            else:
                writer = users[rng.randrange(MTURK_WORKERS, len(users))]
                writer_id, session = writer.pk, own_sessions[writer.pk]
            status, flagged, retracted, _ = _pick(rng, OUTCOMES)
            label = rng.choice(LABELS)
            fooled = rng.random() < 0.3
            predicted = label if not fooled else rng.choice([x for x in LABELS if x != label])
            decisions = [] if session.provisional else _votes(rng, status, flagged, retracted)
            if session.provisional:
                status, flagged, retracted = "pending", False, False
            words = " ".join(rng.choice(WORDS) for _ in range(8))
            example = Example(
                task=task, round=rnd, context_id=contexts[i % len(contexts)], annotator_id=writer_id,
                source=Example.Source.ANNOTATION, split=_pick(rng, SPLITS)[0],
                inputs={"hypothesis": f"The {words} ({i})."}, target={"label": label},
                prediction={"label": predicted}, model_predictions={}, fooled=fooled, retracted=retracted,
                flagged=flagged, flag_reason="Offensive." if flagged else "",
                flagged_by_id=users[rng.randrange(len(users))].pk if flagged else None,
                validation_status=status, latency_ms=round(rng.uniform(8, 40), 2), session=session,
                provisional=session.provisional, created_at=when,
                updated_at=when + timedelta(minutes=10 * len(decisions) + 1),
                validations_correct=decisions.count("correct"), validations_incorrect=decisions.count("incorrect"),
                validations_flagged=decisions.count("flagged"))
            example.queue_priority, example.queue_priority_adaptive = example.queue_priorities()
            example.signature = example_signature(example)
            rows.append(example)
            validators = set()
            for k, decision in enumerate(decisions):
                validator = users[rng.randrange(len(users))]
                while validator.pk == writer_id or validator.pk in validators:
                    validator = users[rng.randrange(len(users))]
                validators.add(validator.pk)
                blind = label if (decision == "correct") == (rng.random() < 0.85) else rng.choice(LABELS)
                votes.append((len(rows) - 1, Validation(
                    task=task, validator=validator, label=decision, blind_answer={"label": blind},
                    blind_agrees=blind == label, mode=Validation.Mode.USER, counted=True,
                    created_at=when + timedelta(minutes=10 * k + 2),
                    decided_at=when + timedelta(minutes=10 * (k + 1)))))
        with transaction.atomic(), own_stamps():
            Example.objects.bulk_create(rows)
            for index, validation in votes:
                validation.example_id = rows[index].pk
            Validation.objects.bulk_create([v for _, v in votes], batch_size=2000)
        made["examples"] += len(rows)
        made["validations"] += len(votes)
        if first // CHUNK % 20 == 0:
            rate = made["examples"] / (time.perf_counter() - started)
            log(f"build {n}: {made['examples']} examples, {made['validations']} validations ({rate:.0f} examples/s)")
    rows_seconds = time.perf_counter() - started
    with transaction.atomic():
        crowd.settle_history()
        _reliabilities(task, users, now)
    quiet = logging.getLogger(counters.__name__)
    quiet.disabled = True  # every counter it fills would be logged as a repair
    try:
        drifts = counters.reconcile(task)  # fills the counters: the project's own recount
    finally:
        quiet.disabled = False
    votes = counters.task_totals(task)["counted_votes"]
    ReliabilityFit.objects.update_or_create(task=task, defaults={
        "fitted_at": now, "votes": votes, "validators": len(users), "converged": True,
        "prior_right": {"fooled": 0.8, "not_fooled": 0.8, "no_model": 0.8}, "overall_prior_right": 0.8})
    seconds = time.perf_counter() - started
    return {"examples": made["examples"], "validations": made["validations"], "accounts": len(users) + 1,
            "mturk_batches": crowd.n_batches, "mturk_assignments": crowd.n_assignments,
            "counters_filled": len(drifts), "rows_seconds": round(rows_seconds, 1),
            "seconds": round(seconds, 1), "examples_per_second": round(n / rows_seconds, 1)}
