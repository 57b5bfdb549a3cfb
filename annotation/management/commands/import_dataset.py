from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotation.datasets import DatasetImportError, check_format, import_records
from annotation.models import Example
from core import progress
from datafiles.readers import FORMATS, SPLITS, FormatError, read_records
from tasks.models import Task

SHOWN_ERRORS = 20


def _format_help() -> str:
    return "; ".join(f"{name}: {fmt.description}" for name, fmt in FORMATS.items())


class Command(BaseCommand):
    help = ("Import a data set file into a task as examples (source 'import', or 'seed' for the seed "
            "files). Rows are checked against the task; malformed rows are reported with their line "
            "numbers and skipped (--strict: nothing is written if any row is malformed). Importing "
            "the same file twice creates nothing twice.")

    def add_arguments(self, parser):
        parser.add_argument("path", help="The file to import.")
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--format", required=True, dest="format_name", metavar="FORMAT",
                            help=f"The file's format. {_format_help()}.")
        parser.add_argument("--round", type=int, dest="round_number",
                            help="The round the examples belong to: 0 for static data (MNLI, SNLI, SST-2, "
                                 "Davidson...), never open for collection. Required unless the format has a "
                                 "round column (dynahate, hatemoji, dynabench); overrides it if given.")
        parser.add_argument("--split", choices=SPLITS,
                            help="The split, for files without a split column (overrides it if given).")
        parser.add_argument("--strict", action="store_true",
                            help="Write nothing unless every row is good.")
        progress.add_argument(parser)

    def handle(self, *args, path, task, format_name, round_number, split, strict, **options):
        task_obj = Task.objects.filter(slug=task).first()
        if task_obj is None:
            known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
            raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        if format_name not in FORMATS:
            raise CommandError(f"Unknown format {format_name!r}. Known formats: {', '.join(FORMATS)}.")
        fmt = FORMATS[format_name]
        file = Path(path)
        if not file.is_file():
            raise CommandError(f"No such file: {path}")
        if round_number is None and not fmt.has_round:
            raise CommandError(f"--round is required: {format_name} files have no round column.")
        if split is None and not fmt.has_split:
            raise CommandError(f"--split is required: {format_name} files have no split column.")
        if round_number is not None and round_number < 0:
            raise CommandError("--round must be 0 (the static data) or more.")
        shown = progress.Progress.for_command(self, options)
        try:
            check_format(task_obj, format_name)
            records = read_records(format_name, file)
            if shown.enabled:  # a first pass counts the rows, for the bar's total
                total = sum(1 for _ in read_records(format_name, file))
                records = shown.iterate(records, f"importing {file.name}", total, "rows")
            with shown:
                report = import_records(
                    task_obj, records, round_number=round_number, split=split, strict=strict,
                    source=Example.Source.SEED if format_name == "seed" else Example.Source.IMPORT,
                )
        except DatasetImportError as exc:
            if exc.errors:
                raise CommandError(
                    f"Strict import of {path} failed: {len(exc.errors)} malformed row(s); nothing was "
                    f"written.\n{self.error_lines(exc.errors)}"
                ) from None
            raise CommandError(str(exc)) from None
        except (FormatError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path} as {format_name}: {exc}") from None
        self.print_report(report, task_obj, file, format_name)

    def error_lines(self, errors) -> str:
        lines = [f"  {error}" for error in errors[:SHOWN_ERRORS]]
        if len(errors) > SHOWN_ERRORS:
            lines.append(f"  ... and {len(errors) - SHOWN_ERRORS} more")
        return "\n".join(lines)

    def print_report(self, report, task, file, format_name):
        write = self.stdout.write
        write(f"Imported {file} ({format_name}) into task {task.slug}: {report.created} created, "
              f"{report.skipped_duplicates} skipped as duplicates, {len(report.errors)} malformed.")
        for number in sorted(report.rounds):
            note = " (new, closed)" if number in report.rounds_created else ""
            write(f"  round {number}{note}: {report.rounds[number]} examples")
        if report.contexts_created:
            write(f"  contexts created: {report.contexts_created}")
        if report.uids_reassigned:
            write(f"  uids already used by another task, given new ones: {report.uids_reassigned}")
        table = report.counts_by_split()
        if table:
            width = max(len(str(label)) for labels in table.values() for label in labels)
            width = max(width, len("label"))
            write(f"  {'split':<6}{'label':<{width + 2}}{'examples':>8}")
            for split_name, labels in table.items():
                for label, n in labels.items():
                    write(f"  {split_name:<6}{label if label is not None else '-':<{width + 2}}{n:>8}")
                if len(labels) > 1:
                    write(f"  {split_name:<6}{'(all)':<{width + 2}}{sum(labels.values()):>8}")
        if report.errors:
            write(self.style.WARNING(f"Malformed rows, skipped ({len(report.errors)}):"))
            write(self.error_lines(report.errors))
