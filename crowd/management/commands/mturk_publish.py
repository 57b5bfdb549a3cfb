"""``manage.py mturk_publish --task SLUG --mode {create,validate} --hits N --assignments K
--reward 0.50 --bonus 0.25 [--round R] [--examples-per-assignment M] [--override-reference REASON]
[--platform {mturk,prolific}] [--currency {USD,GBP}] [--estimated-minutes N] [--yes]``: prints the batch id.

With ``--platform prolific`` the batch is one Prolific study (``--hits 1``; its places are
``--assignments``), paid in ``--currency``, with ``--estimated-minutes`` required: a reward
below Prolific's minimum per hour at that time is refused before any call."""

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from crowd import costs
from crowd.money import money as money_text
from crowd.platforms import PlatformError
from crowd.publishing import BatchRequest, check_platform, hourly_rate, publish
from tasks.models import Task


def money(value: str) -> Decimal:
    try:
        amount = Decimal(value)
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite():
        raise CommandError(f"{value!r} is not an amount, e.g. 0.50.")
    return amount


class Command(BaseCommand):
    help = ("Publish a batch of MTurk HITs (sandbox unless MTURK_SANDBOX=false), or a Prolific study "
            "(--platform prolific), and print its id.")

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True)
        parser.add_argument("--mode", required=True, choices=["create", "validate", "onboarding"],
                            help="onboarding: the task's onboarding only (its passers get the task's qualification).")
        parser.add_argument("--hits", type=int, required=True)
        parser.add_argument("--assignments", type=int, required=True, help="Assignments per HIT.")
        parser.add_argument("--platform", choices=["mturk", "prolific"], default="mturk")
        parser.add_argument("--currency", choices=["USD", "GBP"], default="USD",
                            help="Of the reward and bonus; MTurk pays in USD only.")
        parser.add_argument("--estimated-minutes", type=int, default=None,
                            help="Prolific: the study's estimated completion time (required there).")
        parser.add_argument("--reward", type=money, required=True, help="Per approved assignment.")
        parser.add_argument("--bonus", type=money, default=Decimal("0.00"),
                            help="Per verified model-fooling example (writing batches).")
        parser.add_argument("--round", type=int, default=None, help="Default: the task's open round.")
        parser.add_argument("--examples-per-assignment", type=int, default=5)
        parser.add_argument("--duration", type=int, default=3600, help="Seconds a worker has per assignment.")
        parser.add_argument("--lifetime", type=int, default=3 * 24 * 3600, help="Seconds the HITs stay up.")
        parser.add_argument("--auto-approval-delay", type=int, default=3 * 24 * 3600)
        parser.add_argument("--locales", default="US", help="Comma-separated country codes; empty: any.")
        parser.add_argument("--min-approval-rate", type=int, default=95)
        parser.add_argument("--min-approved", type=int, default=100)
        parser.add_argument("--quality-threshold", type=float, default=None,
                            help="Soft-block workers whose examples are verified less often than this share.")
        parser.add_argument("--override-reference", metavar="REASON", default="",
                            help="Publish a writing batch although the round's target does not clear the task's "
                                 "reference line (the majority-class answer, or for QA the sliding-window "
                                 "baseline); the reason is recorded on the batch.")
        parser.add_argument("--require-onboarding", action="store_true",
                            help="Only workers who passed the task's onboarding see the HITs.")
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")

    def handle(self, *args, **opts):
        task = Task.objects.filter(slug=opts["task"]).first()
        if task is None:
            raise CommandError(f"No task {opts['task']!r}.")
        req = BatchRequest(
            task=task, mode=opts["mode"], hits=opts["hits"], assignments_per_hit=opts["assignments"],
            reward=opts["reward"], bonus_per_example=opts["bonus"], round_number=opts["round"],
            examples_per_assignment=opts["examples_per_assignment"], assignment_duration_seconds=opts["duration"],
            lifetime_seconds=opts["lifetime"], auto_approval_delay_seconds=opts["auto_approval_delay"],
            locales=tuple(code.strip().upper() for code in opts["locales"].split(",") if code.strip()),
            min_approval_rate=opts["min_approval_rate"], min_approved_count=opts["min_approved"],
            quality_block_threshold=opts["quality_threshold"], require_onboarding=opts["require_onboarding"],
            allow_below_reference=bool(opts["override_reference"].strip()), override_reason=opts["override_reference"],
            platform=opts["platform"], currency=opts["currency"], estimated_minutes=opts["estimated_minutes"])
        try:
            check_platform(req)  # Prolific's hourly minimum and the currency, before anything is asked
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        most = costs.max_cost(hits=req.hits, assignments_per_hit=req.assignments_per_hit, reward=req.reward,
                              bonus_per_example=req.bonus_per_example,
                              examples_per_assignment=req.examples_per_assignment, mode=req.mode,
                              platform=req.platform)
        if req.platform == "prolific":
            rate = hourly_rate(req.reward, req.estimated_minutes)
            self.stderr.write(f"One Prolific study with {req.assignments_per_hit} places (real money), "
                              f"{money_text(req.reward, req.currency)} each for about {req.estimated_minutes} "
                              f"minutes ({money_text(rate, req.currency)}/hour); at most "
                              f"{money_text(most, req.currency)} with bonuses and Prolific's fees (estimated).")
        else:
            where = "the MTurk SANDBOX" if settings.MTURK_SANDBOX else "LIVE MTurk (real money)"
            self.stderr.write(f"{req.hits} HITs x {req.assignments_per_hit} assignments on {where}; "
                              f"at most ${most:.2f} with bonuses and fees.")
        if not opts["yes"] and input("Publish? [y/N] ").strip().lower() not in ("y", "yes"):
            raise CommandError("Not published.")
        try:
            batch = publish(req)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        except PlatformError as exc:
            raise CommandError(f"{exc} (a batch row may exist: the admin's 'Publish the remaining HITs' "
                               "goes on where this stopped)") from None
        if batch.status == batch.Status.AWAITING_APPROVAL:
            self.stderr.write(f"Batch {batch.pk}, with what was published alone on the task in the last 24 hours, "
                              "may cost more than CROWD_APPROVAL_THRESHOLD "
                              f"(${settings.CROWD_APPROVAL_THRESHOLD}): nothing is posted until a superuser "
                              "approves it in the admin (Crowd work > Batches, 'Approve and publish').")
        self.stdout.write(str(batch.pk))
