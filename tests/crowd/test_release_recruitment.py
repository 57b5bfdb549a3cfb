"""A data release's card says how the task's MTurk workers were recruited and paid, from
the crowd's own records (the crowd app's card section, registered with the release code
below it)."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from annotation.models import AnnotationSession
from crowd.models import Assignment, Batch, BonusPayment, Hit, WorkerIdentity
from crowd.releases import recruitment_section
from leaderboard.models import Release
from leaderboard.releases import service
from tasks.models import Round

NOW = timezone.now()


def batch(task, rnd, *, sandbox=False, mode=Batch.Mode.CREATE, reward="1.00", bonus="0.50", **extra):
    return Batch.objects.create(task=task, round=rnd, mode=mode, sandbox=sandbox, title="Fool the model",
                                description="Write examples", hits=5, assignments_per_hit=1, reward=Decimal(reward),
                                bonus_per_example=Decimal(bonus), locales=["US", "GB"], min_approval_rate=95,
                                status=Batch.Status.FINISHED, **extra)


def assignment(b, user, minutes, *, bonus=None, bonus_status=BonusPayment.Status.PAID,
               status=Assignment.Status.APPROVED):
    identity, _ = WorkerIdentity.objects.get_or_create(user=user, defaults={"worker_id": f"W{user.pk:08d}"})
    number = Hit.objects.filter(batch=b).count() + 1
    hit = Hit.objects.create(batch=b, number=number, hit_id=f"H{b.pk}-{number}")
    accepted = NOW - timedelta(hours=3)
    made = Assignment.objects.create(
        hit=hit, assignment_id=f"A{b.pk}-{number}", worker=identity, status=status,
        session=AnnotationSession.objects.create(user=user, task=b.task), submit_to="https://www.mturk.com",
        accepted_at=accepted, deadline=accepted + timedelta(hours=2),
        submitted_at=accepted + timedelta(minutes=minutes))
    if bonus is not None:
        BonusPayment.objects.create(assignment=made, reason=BonusPayment.Reason.VERIFIED_FOOLING, amount=Decimal(bonus),
                                    example_count=1, message="Thanks", unique_request_token=f"B{made.pk}",
                                    status=bonus_status)
    return made


def test_the_card_gives_the_median_pay_per_hour_of_the_live_batches(
        release_world, annotator, second_annotator, mturk_worker, tmp_path, django_capture_on_commit_callbacks):
    task = release_world.task
    first = Round.objects.get(task=task, number=1)
    live = batch(task, first)
    assignment(live, annotator, 30, bonus="0.50")  # $1.50 in half an hour: $3.00 an hour
    assignment(live, second_annotator, 60)  # $1.00 an hour
    assignment(live, mturk_worker, 15, bonus="0.25", bonus_status=BonusPayment.Status.FAILED)  # unpaid: $4.00
    assignment(live, mturk_worker, 5, status=Assignment.Status.REJECTED)  # not paid at all: not counted
    assignment(batch(task, first, sandbox=True, reward="9.00"), annotator, 1)  # test money: left out
    assignment(batch(task, Round.objects.get(task=task, number=2)), annotator, 1)  # a round not released
    with django_capture_on_commit_callbacks(execute=True):
        service.start_release(task, rounds=[1])
    release = Release.objects.get()
    service.copy_release(release, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "**Median pay: $3.00 per hour**, over 3 of 3 approved assignment(s) by 3 worker(s)" in readme
    assert "recruited on Amazon Mechanical Turk for round(s) 1: 1 batch(es) of HITs to write examples" in readme
    assert "located in GB, US; at least 95% of their past MTurk work approved" in readme
    assert "A reward of $1.00 per approved assignment, and to writers a bonus of $0.50" in readme
    assert "no crowd-work records" not in readme
    assert mturk_worker.mturk_identity.worker_id not in readme


def test_sandbox_only_batches_say_so_and_rounds_without_batches_say_nothing(release_world, annotator):
    task = release_world.task
    rounds = list(Round.objects.filter(task=task, number__in=[0, 1]))
    assert recruitment_section(task, rounds) is None
    b = batch(task, Round.objects.get(task=task, number=1), sandbox=True, bonus="0")
    assignment(b, annotator, 20)
    section = recruitment_section(task, rounds)
    assert section.facts["sandbox"] and section.facts["median_pay_per_hour"] == "3.00"
    assert "the MTurk sandbox (test batches: no real money was paid)" in section.paragraphs[0]
    assert "(sandbox)" in section.paragraphs[-1] and "bonus" not in section.paragraphs[2]
    Batch.objects.filter(pk=b.pk).update(status=Batch.Status.CANCELLED)
    assert recruitment_section(task, rounds) is None
