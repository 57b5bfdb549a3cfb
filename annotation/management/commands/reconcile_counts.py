from django.core.management.base import BaseCommand, CommandError

from annotation import counters
from tasks.models import Round, Task


class Command(BaseCommand):
    help = ("Recount the round counters the pages show (collected, fooled, verified, decisions, ...) from the "
            "examples and validations, repair those that drifted, and print each repair with its drift. "
            "Exits 0 whether or not anything drifted.")

    def add_arguments(self, parser):
        parser.add_argument("--task", help="Only this task's rounds (its slug).")

    def handle(self, *args, task=None, **options):
        task_obj = None
        if task is not None:
            task_obj = Task.objects.filter(slug=task).first()
            if task_obj is None:
                known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
                raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        rounds = Round.objects.filter(task=task_obj) if task_obj else Round.objects.all()
        drifts = counters.reconcile(task_obj)
        for drift in drifts:
            self.stdout.write(f"repaired {drift}")
        self.stdout.write(f"{rounds.count()} round(s) recounted, {len(drifts)} counter(s) repaired")
