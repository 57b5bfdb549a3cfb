"""``manage.py train_model``: parse the arguments, run ``leaderboard.round0``'s workflow
(files into round 0, a round-0 model trained and evaluated as jobs, ``--target``), and
print its lines, the training's steps as a bar on a terminal."""

from django.core.management.base import BaseCommand, CommandError

from core import progress
from core.errors import DomainError, InvalidInput
from datafiles.readers import FORMATS, SPLITS
from leaderboard import training
from leaderboard.round0 import train_round0_model
from leaderboard.static_data import StaticDataError


class Command(BaseCommand):
    help = (
        "Import data set files into a task's round 0 (the static data: closed, never open for collection), "
        "train a model on round 0 as a job, wait for it and its evaluation (printing their logs), and with "
        "--target make it the target of the task's next round. Rows get a split from --split, a PATH:SPLIT "
        "suffix, the file's own split column, or else a hash of the row's group (an NLI premise, a SQuAD "
        "article, or the row itself): --dev-fraction and --test-fraction of the rows go to dev and test, the "
        "rest to train, the same way on every run. Rows already in the task are not imported twice; the model "
        "learns from everything round 0 holds (at most --limit train rows of it). Malformed rows are reported "
        "with their file and line and skipped. Example: train_model --task sentiment --format sst2 "
        "sst2/train_full.tsv:train sst2/dev.tsv:dev sst2/test-labeled.tsv:test --limit 4000 --epochs 1 --target"
    )

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", metavar="PATH[:SPLIT]",
                            help="The files to import, all in --format. PATH:SPLIT (train, dev or test) puts every "
                                 "row of that file in SPLIT.")
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--format", required=True, dest="format_name", metavar="FORMAT",
                            help=f"The files' format, one of: {', '.join(FORMATS)}.")
        parser.add_argument("--split", choices=SPLITS,
                            help="Put every row of every file in this split (overrides PATH:SPLIT and the "
                                 "files' split column).")
        parser.add_argument("--dev-fraction", type=float, default=0.1, metavar="F",
                            help="For rows without a split: the share that goes to dev (default 0.1).")
        parser.add_argument("--test-fraction", type=float, default=0.1, metavar="F",
                            help="For rows without a split: the share that goes to test (default 0.1); the rest "
                                 "goes to train.")
        parser.add_argument("--limit", type=int, metavar="N",
                            help="Import at most N rows of each split (stratified by label, chosen by hash: a "
                                 "subset of the full import), and train on at most N of round 0's train "
                                 "examples. Default: all.")
        parser.add_argument("--balance", action="store_true",
                            help="Import as many train rows of each label as the rarest label has (for skewed "
                                 "data such as Davidson: 5.8%% hateful).")
        parser.add_argument("--name", help="The model's name (default: round0-<format>-<YYYYmmdd-HHMM>).")
        parser.add_argument("--mode", choices=list(training.MODES), default="full",
                            help="full: fine-tune the whole model (default); head: train the head only on a "
                                 "frozen encoder (faster, usually less accurate).")
        parser.add_argument("--epochs", type=int, help="Training epochs (default: the trainer's, 3).")
        parser.add_argument("--batch-size", type=int, help="Batch size (default: the trainer's, 16).")
        parser.add_argument("--lr", type=float, help="Learning rate (default: the trainer's, 5e-5).")
        parser.add_argument("--max-steps", type=int, help="Stop after this many optimizer steps.")
        parser.add_argument("--seed", type=int, help="The training seed (default 0; the splits do not depend "
                                                     "on it).")
        parser.add_argument("--target", action="store_true",
                            help="Make the model the target of the task's next round once it is evaluated: the "
                                 "open round if it has no target yet, else a promotion (the next draft round "
                                 "or a new one opens with it; the open round closes).")
        parser.add_argument("--override", metavar="REASON", default="",
                            help="With --target: make it the target even where the promotion rules refuse it "
                                 "(its interval does not clear the majority line, or it scores below today's "
                                 "target), recording REASON with the promotion.")
        parser.add_argument("--job-timeout", type=float, metavar="SECONDS",
                            help="Give up waiting for a job after this long (the job goes on). Default: wait.")
        progress.add_argument(parser)

    def handle(self, *args, paths, task, format_name, split, dev_fraction, test_fraction, limit, balance, name,
               mode, epochs, batch_size, lr, max_steps, seed, target, override, job_timeout, **rest):
        if limit is not None and limit < 1:
            raise CommandError("--limit must be 1 or more.")
        options = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "max_steps": max_steps, "seed": seed}
        try:
            options = training.check_training_options(mode=mode, **options)
        except InvalidInput as exc:
            raise CommandError("; ".join(f"--{field.replace('_', '-')}: {' '.join(messages)}"
                                         for field, messages in exc.errors.items())) from None
        shown = progress.Progress.for_command(self, rest)

        def say(line, tone=""):
            if tone == "job":  # the jobs' log lines, written above the training's bar
                shown.write(line)
                return
            shown.finish()  # the training is over: its bar ends before the next line
            style = {"warning": self.style.WARNING, "success": self.style.SUCCESS}.get(tone)
            self.stdout.write(style(line) if style else line)

        def advance(label, done, total):  # the training job's steps
            shown.show(label, done, total, unit="steps")
            if done >= total:
                shown.finish()

        try:
            with shown:
                train_round0_model(task, format_name, paths, split=split, dev_fraction=dev_fraction,
                                   test_fraction=test_fraction, limit=limit, balance=balance, name=name, mode=mode,
                                   options=options, target=target, override=override, job_timeout=job_timeout,
                                   say=say, advance=advance)
        except StaticDataError as exc:
            raise CommandError(str(exc)) from None
        except DomainError as exc:
            raise CommandError(str(exc) if isinstance(exc, InvalidInput) else exc.message) from None
