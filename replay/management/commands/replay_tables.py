import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from replay.chart import svg_chart
from replay.findings import with_findings
from replay.report import markdown_tables
from replay.results import (
    load_reports,
    report_paths,
    seed_report_paths,
    with_doc_section,
)

RESULTS = Path("bench/results/replay")
DOC = Path("bench/RESULTS.md")
FINDINGS = Path("docs/replay.md")


class Command(BaseCommand):
    help = ("Regenerate the replay's tables from the committed reports: each report.md and report.svg "
            "from its report.json (or a run of several seeds' summary.json, and each seed's own), "
            "the replay block of bench/RESULTS.md and the findings (every comparative "
            "sentence) of docs/replay.md. --check changes nothing and fails if any of them differs from what "
            "the reports give.")

    def add_arguments(self, parser):
        parser.add_argument("--results", default=str(settings.BASE_DIR / RESULTS),
                            help="The folder of replay runs: one <run>/report.json each, or with several seeds "
                                 "<run>/summary.json and <run>/seed-<n>/report.json.")
        parser.add_argument("--doc", default=str(settings.BASE_DIR / DOC),
                            help="The file with the replay block (default: bench/RESULTS.md).")
        parser.add_argument("--findings", default=str(settings.BASE_DIR / FINDINGS),
                            help="The file with the findings block (default: docs/replay.md).")
        parser.add_argument("--check", action="store_true", help="Change nothing; exit 1 on a difference.")

    def handle(self, *args, **o):
        root = Path(o["results"])
        reports = load_reports(root)
        if not reports:
            raise CommandError(f"No replay reports under {o['results']} (<run>/report.json or "
                               "<run>/summary.json).")
        wanted: dict[Path, str] = {}
        sources = [(path, reports[run]) for run, path in report_paths(root).items()]
        sources += [(path, json.loads(path.read_text(encoding="utf-8"))) for path in seed_report_paths(root)]
        for path, report in sources:
            wanted[path.with_suffix(".md")] = markdown_tables(report)
            wanted[path.with_suffix(".svg")] = svg_chart(report) + "\n"
        blocks = [(Path(o["doc"]), with_doc_section, "the replay block", "--doc"),
                  (Path(o["findings"]), with_findings, "the findings block", "--findings")]
        for path, rewrite, what, option in blocks:
            if not path.is_file():
                raise CommandError(f"{path} not found: {what} lives there ({option}).")
            try:
                wanted[path] = rewrite(path.read_text(encoding="utf-8"), reports)
            except ValueError as exc:
                raise CommandError(f"{path}: {exc}") from None
        stale = [path for path, text in wanted.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != text]
        if o["check"]:
            if stale:
                raise CommandError("Out of date with the committed reports (run manage.py replay_tables): "
                                   + ", ".join(str(p) for p in stale))
            self.stdout.write(f"{len(wanted)} files agree with {len(reports)} report(s).")
            return
        for path in stale:
            path.write_text(wanted[path], encoding="utf-8")
        self.stdout.write(f"Rewrote {len(stale)} of {len(wanted)} files from {len(reports)} report(s).")
