"""``manage.py mturk_pay_bonuses [--batch ID]``: settle and pay the bonuses for verified
model-fooling examples, each exactly once. Safe to run again at any time."""

from django.core.management.base import BaseCommand, CommandError

from crowd.bonuses import pay_bonuses
from crowd.models import Batch


class Command(BaseCommand):
    help = "Pay bonuses for verified model-fooling examples (ledger first; never twice)."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=None)

    def handle(self, *args, **opts):
        if opts["batch"] is not None and not Batch.objects.filter(pk=opts["batch"]).exists():
            raise CommandError(f"No batch {opts['batch']}.")
        report = pay_bonuses(opts["batch"])
        self.stdout.write(str(report))
        if report.errors:
            raise CommandError(f"{len(report.errors)} bonuses not paid yet; they are retried later.")
