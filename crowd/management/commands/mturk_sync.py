"""``manage.py mturk_sync [--batch ID]``: decide submitted assignments, mark returned
ones and expire finished batches. Safe to run again at any time."""

from django.core.management.base import BaseCommand, CommandError

from crowd.models import Batch
from crowd.sync import sync


class Command(BaseCommand):
    help = "Bring assignments in line with MTurk: verify, approve or reject, detect returns, expire batches."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=None)

    def handle(self, *args, **opts):
        if opts["batch"] is not None and not Batch.objects.filter(pk=opts["batch"]).exists():
            raise CommandError(f"No batch {opts['batch']}.")
        report = sync(opts["batch"])
        self.stdout.write(str(report))
        if report.errors:
            raise CommandError(f"{len(report.errors)} MTurk errors; what could be done was done. Run it again later.")
