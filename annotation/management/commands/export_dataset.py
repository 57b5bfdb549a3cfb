from django.core.management.base import BaseCommand, CommandError

from annotation.exporting import FORMATS, INCLUDE, Selection, write_examples
from annotation.models import Example
from core import progress
from core.errors import DomainError
from tasks.models import Task


class Command(BaseCommand):
    help = ("Export a task's examples as JSON Lines (the exact records; read back with import_dataset "
            "--format dynabench) or a flat CSV (a column per context and input field, the answer, "
            "the validation, each prediction and metadata field: docs/data.md). Retracted and flagged "
            "examples are left out unless asked. OUT may be '-' for standard output.")

    def add_arguments(self, parser):
        parser.add_argument("out", metavar="OUT", help="The file to write, or '-' for standard output.")
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--round", type=int, dest="round_number", help="Only this round's examples.")
        parser.add_argument("--split", choices=Example.Split.values, help="Only this split's examples.")
        parser.add_argument("--validated-only", action="store_true",
                            help="Only examples whose validation status is verified.")
        parser.add_argument("--include-retracted", action="store_true",
                            help="Include the examples their writers retracted (left out by default).")
        parser.add_argument("--include-flagged", action="store_true",
                            help="Include flagged examples (left out by default).")
        parser.add_argument("--format", choices=FORMATS, default="jsonl", dest="fmt")
        progress.add_argument(parser)

    def handle(self, *args, out, task, round_number, split, validated_only, include_retracted, include_flagged,
               fmt, **options):
        task_obj = Task.objects.filter(slug=task).first()
        if task_obj is None:
            known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
            raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        if round_number is not None and not task_obj.rounds.filter(number=round_number).exists():
            raise CommandError(f"Task {task} has no round {round_number}.")
        selection = Selection(
            task_id=task_obj.pk, round_number=round_number, split=split,
            validation_status=Example.ValidationStatus.VERIFIED if validated_only else None,
            **{name: INCLUDE for name, asked in (("retracted", include_retracted), ("flagged", include_flagged))
               if asked})
        if out == "-":  # the records go to standard output: progress lines, if any, to standard error
            shown = progress.Progress(self.stderr, self.stderr, enabled=self._progress_wanted(options))
        else:
            shown = progress.Progress.for_command(self, options)

        def export(stream):
            with shown:
                return write_examples(task_obj, stream, selection, fmt=fmt,
                                      advance=(lambda label, done, total: shown.show(label, done, total, "rows"))
                                      if shown.enabled else None)

        try:
            if out == "-":
                report = export(self.stdout)
            else:
                try:
                    with open(out, "w", encoding="utf-8", newline="") as handle:
                        report = export(handle)
                except OSError as exc:
                    raise CommandError(f"Cannot write {out}: {exc}") from None
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        said = f"exported {report.rows} examples of {task} ({selection.describe()})"
        if report.cells_left_out:
            self.stderr.write(f"{report.cells_left_out} values were left out of the CSV: their rows changed while "
                              "it was written (new prediction or metadata fields). Export again to have them.")
        if out == "-":
            self.stderr.write(said)
        else:
            self.stdout.write(f"{said} to {out}")

    @staticmethod
    def _progress_wanted(options) -> bool:
        return not options.get("no_progress") and int(options.get("verbosity", 1)) > 0
