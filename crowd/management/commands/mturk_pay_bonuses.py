"""``manage.py mturk_pay_bonuses [--batch ID] [--full]``: settle and pay the bonuses for
verified model-fooling examples, each exactly once. Safe to run again at any time.

A run settles the assignments that changed since the last run (``crowd.bonuses``);
``--full`` walks every assignment still to settle, as the first run does."""

from django.core.management.base import BaseCommand, CommandError

from crowd.bonuses import pay_bonuses
from crowd.models import Batch


class Command(BaseCommand):
    help = "Pay bonuses for verified model-fooling examples (ledger first; never twice)."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=None)
        parser.add_argument("--full", action="store_true",
                            help="Look at every assignment still to settle, not only those changed since the last run.")

    def handle(self, *args, **opts):
        if opts["batch"] is not None and not Batch.objects.filter(pk=opts["batch"]).exists():
            raise CommandError(f"No batch {opts['batch']}.")
        report = pay_bonuses(opts["batch"], full=opts["full"])
        self.stdout.write(str(report))
        if report.errors:
            raise CommandError(f"{len(report.errors)} bonuses not paid yet; they are retried later.")
