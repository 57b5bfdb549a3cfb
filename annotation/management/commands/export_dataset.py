from django.core.management.base import BaseCommand, CommandError

from annotation.datasets import EXPORT_FORMATS, export_examples
from tasks.models import Task


class Command(BaseCommand):
    help = ("Export a task's examples as JSONL (one record per line; read back with import_dataset "
            "--format dynabench) or CSV. OUT may be '-' for standard output.")

    def add_arguments(self, parser):
        parser.add_argument("out", metavar="OUT", help="The file to write, or '-' for standard output.")
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--round", type=int, dest="round_number", help="Only this round's examples.")
        parser.add_argument("--validated-only", action="store_true",
                            help="Only examples whose validation status is verified.")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl", dest="fmt")

    def handle(self, *args, out, task, round_number, validated_only, fmt, **options):
        task_obj = Task.objects.filter(slug=task).first()
        if task_obj is None:
            known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
            raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        if round_number is not None and not task_obj.rounds.filter(number=round_number).exists():
            raise CommandError(f"Task {task} has no round {round_number}.")
        options = {"round_number": round_number, "validated_only": validated_only, "fmt": fmt}
        if out == "-":
            n = export_examples(task_obj, self.stdout, **options)
            self.stderr.write(f"exported {n} examples of {task}")
            return
        try:
            with open(out, "w", encoding="utf-8", newline="") as handle:
                n = export_examples(task_obj, handle, **options)
        except OSError as exc:
            raise CommandError(f"Cannot write {out}: {exc}") from None
        self.stdout.write(f"exported {n} examples of {task} to {out}")
