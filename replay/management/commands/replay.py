from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core import progress
from leaderboard.static_data import default_data_dir
from registry import artifacts
from replay.controls import CONTROLS
from replay.data import MODES, TASKS, ReplayDataError
from replay.report import interface_problems, markdown_tables
from replay.results import write_seeds
from replay.run import STRATEGIES, Options, ReplayError, replay_seeds


class Command(BaseCommand):
    help = ("Replay real adversarial rounds through the platform: train M0 on the static data, then for "
            "each round write its examples against the live target (the model error rate at collection), "
            "verify them, train, evaluate and promote the next model; optionally a static control of equal "
            "size, and several seeds. Writes report.json, the tables (.md) and a chart (.svg) next to it.")

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True, choices=TASKS)
        parser.add_argument("--data-dir", help="Where the data sets are (default: DYNABENCH_DATA_DIR).")
        parser.add_argument("--mode", choices=MODES, default="fast",
                            help="fast: a few hundred rows per round; full: every row.")
        parser.add_argument("--limit", type=int, help="At most this many rows per round and split.")
        parser.add_argument("--out", required=True, help="The report's path (JSON); .md and .svg go beside it.")
        parser.add_argument("--strategy", choices=STRATEGIES, default="cumulative",
                            help="cumulative (default): each model fine-tunes the last on the new round plus as "
                                 "many examples again from round 0 and every earlier round; continue: the new "
                                 "round plus as many round-0 examples; retrain: each model learns from the "
                                 "backbone on round 0 and every round so far.")
        parser.add_argument("--control", choices=CONTROLS, nargs="+",
                            help="static: also train a control chain on as many fresh static examples as each "
                                 "round's model learnt adversarial ones, and compare them; balanced: the same "
                                 "with the static examples resampled to each round's label shares. Give both "
                                 "for both chains.")
        parser.add_argument("--backbone",
                            help="The backbone M0 (and, with retrain, every model) starts from: a built-in name "
                                 "or a local directory (default: DYNABENCH_BACKBONE). With DYNABENCH_DEVICE=cuda "
                                 "on a GPU, a bigger one.")
        parser.add_argument("--seeds", type=int, default=1,
                            help="Training seeds (--seed, --seed+1, ...), each on a task of its own. With more than "
                                 "one, each seed's report goes to seed-<n>/ beside --out and the pooled one to "
                                 "summary.json there.")
        parser.add_argument("--rounds", type=int, help="Replay rounds 1..N only.")
        parser.add_argument("--task-slug", help="The replay task's slug (default: <task>-replay-<mode>).")
        parser.add_argument("--replace", action="store_true", help="Delete an earlier replay's task first.")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--epochs", type=int, help="Epochs for each round's model.")
        parser.add_argument("--static-epochs", type=int, help="Epochs for M0 on the static data.")
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--lr", type=float)
        parser.add_argument("--job-timeout", type=float, help="Seconds to wait for one job (default: no limit).")
        progress.add_argument(parser)

    def handle(self, *args, **o):
        data_dir = o["data_dir"] or default_data_dir()
        if not data_dir or not Path(data_dir).is_dir():
            raise CommandError("No data directory: pass --data-dir or set DYNABENCH_DATA_DIR "
                               "(the public data sets: anli, nli, davidson, dynahate, hatemoji, hatecheck; "
                               "manage.py fetch_data --accept-licence anli gets them).")
        if o["limit"] is not None and o["limit"] < 1:
            raise CommandError("--limit must be 1 or more.")
        if not 1 <= o["seeds"] <= 10:
            raise CommandError("--seeds must be from 1 to 10.")
        out = Path(o["out"])
        if out.suffix.lower() in (".md", ".svg"):
            raise CommandError("--out is the JSON report's path; the .md and .svg are written beside it.")
        options = Options(
            task=o["task"], data_dir=Path(data_dir), mode=o["mode"], limit=o["limit"], seed=o["seed"],
            strategy=o["strategy"], control=o["control"], seeds=o["seeds"], backbone=o["backbone"],
            task_slug=o["task_slug"], replace=o["replace"], rounds=o["rounds"],
            job_timeout=o["job_timeout"],
            train={"epochs": o["epochs"], "static_epochs": o["static_epochs"], "batch_size": o["batch_size"],
                   "lr": o["lr"]})
        shown = progress.Progress.for_command(self, o)
        try:
            with shown:
                report, per_seed = replay_seeds(options, progress=shown.write, advance=shown.show)
        except (ReplayError, ReplayDataError) as exc:
            raise CommandError(str(exc)) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        paths = write_seeds(report, per_seed, out)
        try:  # with object storage the report goes beside the models too
            stored = artifacts.publish_files(list(paths.values()), folder=(
                f"replays/{timezone.now():%Y%m%d-%H%M%S}-{out.parent.name or 'replay'}-{out.stem}"))
        except artifacts.StoreUnavailable as exc:
            raise CommandError(f"The report is written at {paths['json']}, but not stored: {exc}") from None
        problems = interface_problems(report)
        if problems:  # written all the same, to be read; but a script would trip on it
            raise CommandError(f"The report at {paths['json']} lacks its interface: " + "; ".join(problems))
        self.stdout.write(markdown_tables(report))
        self.stdout.write(f"Replay of {report['task']} ({report['mode']}, {report['strategy']}, "
                          f"{len(report['seeds'])} seed(s)) took {report['seconds']:.0f} s. "
                          f"Wrote {', '.join(str(p) for p in paths.values())}"
                          + (f"; stored {', '.join(stored)}." if stored else "."))
