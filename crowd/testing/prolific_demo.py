"""``crowd_demo --platform prolific``: the Prolific study flow on this machine, against the
project's fake Prolific (``crowd.testing.fake_prolific``), with no Prolific account.

The fake runs in this process; a small study is published on it, a made-up participant
starts a submission (Prolific's side), and their link to the study page is printed. The
participant's browser ends by going to Prolific's completion URL with the code, which the
demo cannot receive: ``play_prolific`` plays that part (the fake records the code), syncs
the batch (verified and approved on the fake), then pays the bonus once the examples are
validated, and says so each time.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from crowd import bonuses, sync
from crowd.models import Assignment, Batch, BonusPayment, CrowdBudget
from crowd.money import money
from crowd.publishing import BatchRequest

from .fake_prolific import FakeProlific

PARTICIPANT = "5de000000000000000000d3a"  # 24 hexadecimal digits, as Prolific ids are
TOKEN = "crowd-demo-fake-prolific"


def start_fake() -> FakeProlific:
    """The fake Prolific, with the settings pointed at it (this process only)."""
    fake = FakeProlific(token=TOKEN).start()
    settings.PROLIFIC_API_URL, settings.PROLIFIC_TOKEN = fake.url, TOKEN
    return fake


def request(task, examples: int, currency: str) -> BatchRequest:
    """A one-place study; the task gets a demo budget in ``currency`` if it has none."""
    CrowdBudget.objects.get_or_create(task=task, defaults={
        "amount": Decimal("100.00"), "currency": currency, "note": "crowd_demo: a fake Prolific, no money moves"})
    return BatchRequest(task=task, mode=Batch.Mode.CREATE, hits=1, assignments_per_hit=1, reward=Decimal("1.00"),
                        bonus_per_example=Decimal("0.25"), examples_per_assignment=examples, platform="prolific",
                        currency=currency, estimated_minutes=5, title=f"Fool the {task.name} model (demo)")


def participant_link(fake: FakeProlific, batch: Batch, port: int) -> tuple[str, str]:
    """The participant starts the study on (the fake) Prolific: their submission id, and
    the study URL as Prolific fills it in, on this machine."""
    study_id = batch.hit_rows.get().hit_id
    session = fake.start_submission(study_id, PARTICIPANT)
    query = urlencode({"PROLIFIC_PID": PARTICIPANT, "STUDY_ID": study_id, "SESSION_ID": session})
    return session, f"http://127.0.0.1:{port}{reverse('prolific-entry', args=[batch.uid.hex])}?{query}"


def play_prolific(fake: FakeProlific, batch: Batch, session: str, say, stop: threading.Event,
                  poll: float = 1.0) -> bool:
    """Wait until the participant finishes here; then do what their redirect to Prolific
    does (the fake records the completion code), sync the batch, and keep paying due
    bonuses until this one is settled. True once settled; False if ``stop`` came first."""
    completed = False
    while not stop.wait(poll):
        if not completed:
            assignment = Assignment.objects.filter(assignment_id=session).first()
            if assignment is None or assignment.status in (Assignment.Status.WORKING, Assignment.Status.RETURNED):
                continue
            completed = True
            if assignment.status == Assignment.Status.FINISHED:  # else: completed and synced before
                fake.complete(session, batch.completion_code)
                say(f"Prolific (the fake) received the completion code {batch.completion_code}; sync: "
                    f"{sync.sync_batch(batch)}. Once other people validate the examples (the validation page, "
                    "or a researcher in the admin), the bonus is paid here, once.")
        report = bonuses.pay_bonuses(batch.pk)
        row = BonusPayment.objects.filter(assignment__assignment_id=session).first()
        if row is not None and row.status == BonusPayment.Status.PAID:
            paid = [money(Decimal(amount) / 100, batch.currency) for amount in fake.paid_to(PARTICIPANT)]
            say(f"Bonus settled: {money(row.amount, batch.currency)} ({row.note}); {report}. Prolific (the fake) "
                f"shows these bonus payments to the participant: {paid or 'none'}.")
            return True
    return False
