from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from leaderboard.replay.data import MODES, TASKS, ReplayDataError, default_data_dir
from leaderboard.replay.report import markdown_tables, write_outputs
from leaderboard.replay.run import STRATEGIES, Options, ReplayError, replay


class Command(BaseCommand):
    help = ("Replay real adversarial rounds through the platform: train M0 on the static data, then for "
            "each round write its examples against the live target (the model error rate at collection), "
            "verify them, train, evaluate and promote the next model. Writes report.json, the tables "
            "(.md) and a chart (.svg) next to it.")

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True, choices=TASKS)
        parser.add_argument("--data-dir", help="Where the data sets are (default: DYNABENCH_DATA_DIR).")
        parser.add_argument("--mode", choices=MODES, default="fast",
                            help="fast: a few hundred rows per round; full: every row.")
        parser.add_argument("--limit", type=int, help="At most this many rows per round and split.")
        parser.add_argument("--out", required=True, help="The report's path (JSON); .md and .svg go beside it.")
        parser.add_argument("--strategy", choices=STRATEGIES, default="continue",
                            help="continue: each model fine-tunes the last on the collected rounds (default); "
                                 "retrain: each model learns from the backbone on round 0 and every round.")
        parser.add_argument("--rounds", type=int, help="Replay rounds 1..N only.")
        parser.add_argument("--task-slug", help="The replay task's slug (default: <task>-replay-<mode>).")
        parser.add_argument("--replace", action="store_true", help="Delete an earlier replay's task first.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--epochs", type=int, help="Epochs for each round's model.")
        parser.add_argument("--static-epochs", type=int, help="Epochs for M0 on the static data.")
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--lr", type=float)
        parser.add_argument("--job-timeout", type=float, help="Seconds to wait for one job (default: no limit).")

    def handle(self, *args, **o):
        data_dir = o["data_dir"] or default_data_dir()
        if not data_dir or not Path(data_dir).is_dir():
            raise CommandError("No data directory: pass --data-dir or set DYNABENCH_DATA_DIR "
                               "(the public data sets: anli, nli, davidson, dynahate, hatemoji, hatecheck; "
                               "manage.py fetch_data --accept-licence anli gets them).")
        if o["limit"] is not None and o["limit"] < 1:
            raise CommandError("--limit must be 1 or more.")
        out = Path(o["out"])
        if out.suffix.lower() in (".md", ".svg"):
            raise CommandError("--out is the JSON report's path; the .md and .svg are written beside it.")
        options = Options(
            task=o["task"], data_dir=Path(data_dir), mode=o["mode"], limit=o["limit"], seed=o["seed"],
            strategy=o["strategy"], task_slug=o["task_slug"], replace=o["replace"], rounds=o["rounds"],
            job_timeout=o["job_timeout"],
            train={"epochs": o["epochs"], "static_epochs": o["static_epochs"], "batch_size": o["batch_size"],
                   "lr": o["lr"]})
        try:
            report = replay(options, progress=self.stdout.write)
        except (ReplayError, ReplayDataError) as exc:
            raise CommandError(str(exc)) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        paths = write_outputs(report, out)
        self.stdout.write(markdown_tables(report))
        self.stdout.write(f"Replay of {report['task']} ({report['mode']}) took {report['seconds']:.0f} s. "
                          f"Wrote {', '.join(str(p) for p in paths.values())}.")
