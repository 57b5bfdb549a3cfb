from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotation.datasets import DatasetImportError, check_format
from core import progress
from core.errors import DomainError, InvalidInput
from datafiles.readers import FORMATS, SPLITS
from leaderboard import promotion, training
from leaderboard.jobs import train_static_model
from leaderboard.rows import primary_metric
from leaderboard.static_data import (
    StaticDataError,
    dev_score,
    evaluation_table,
    import_static_data,
    parse_source,
    read_static_data,
    training_step,
)
from registry.models import ModelVersion
from tasks.models import STATIC_ROUND, Task

SHOWN_ERRORS = 20


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
        write = self.stdout.write
        task_obj = Task.objects.filter(slug=task).first()
        if task_obj is None:
            known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
            raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        if format_name not in FORMATS:
            raise CommandError(f"Unknown format {format_name!r}. Known formats: {', '.join(FORMATS)}.")
        try:
            check_format(task_obj, format_name)
        except DatasetImportError as exc:
            raise CommandError(str(exc)) from None
        if limit is not None and limit < 1:
            raise CommandError("--limit must be 1 or more.")
        name = name or training.default_static_model_name(task_obj, format_name)
        if ModelVersion.objects.filter(task=task_obj, name=name).exists():
            raise CommandError(f"Task {task} already has a model named {name!r}; choose another --name.")
        options = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "max_steps": max_steps, "seed": seed}
        try:
            options = training.check_training_options(mode=mode, **options)
        except InvalidInput as exc:
            raise CommandError("; ".join(f"--{field.replace('_', '-')}: {' '.join(messages)}"
                                         for field, messages in exc.errors.items())) from None
        sources = [parse_source(path) for path in paths]
        missing = [str(s.path) for s in sources if not s.path.is_file()]
        if missing:
            raise CommandError(f"No such file: {', '.join(missing)}")
        config = task_obj.parsed_config
        labels = config.kind.import_labels

        write(f"Task {task_obj.slug}, format {format_name}: {len(sources)} file(s) into round {STATIC_ROUND} "
              "(static data).")
        try:
            data = read_static_data(format_name, sources, labels=labels, dev_fraction=dev_fraction,
                                    test_fraction=test_fraction, split=split, limit=limit, balance=balance)
        except StaticDataError as exc:
            raise CommandError(str(exc)) from None
        self.print_read(data, sources, split, dev_fraction, test_fraction, limit)
        if not data.total:
            raise CommandError(f"No usable rows in {', '.join(str(s.path) for s in sources)}: nothing to import "
                               "or train on.")

        if transaction.get_connection().in_atomic_block:
            raise CommandError("train_model waits for its jobs, which start when the data is committed: "
                               "run it outside a transaction.")
        imported = import_static_data(task_obj, data)
        write(f"Imported into {task_obj.slug} round {STATIC_ROUND}: {imported.created} created, "
              f"{imported.skipped_duplicates} already there, {len(imported.errors)} refused.")
        errors = data.errors + imported.errors
        if errors:
            write(self.style.WARNING(f"Malformed or refused rows, skipped ({len(errors)}):"))
            for path, error in errors[:SHOWN_ERRORS]:
                write(f"  {path} line {error.line}: {error.message}")
            if len(errors) > SHOWN_ERRORS:
                write(f"  ... and {len(errors) - SHOWN_ERRORS} more")
        counts = training.static_training_counts(task_obj)
        write(f"Round {STATIC_ROUND} now holds " + ", ".join(f"{n} {s}" for s, n in counts.items())
              + " usable examples.")

        settings_text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in options.items()) or "the trainer's defaults"
        sample = f" (a fixed sample of at most {limit} train examples)" if limit else ""
        write(f"Training {name} on round {STATIC_ROUND}{sample}: {training.MODES[mode]}, {settings_text}.")
        shown = progress.Progress.for_command(self, rest)

        def say(line):  # the jobs' log lines; the training job's step lines move the bar
            shown.write(line)
            steps = training_step(line)
            if steps:
                shown.show(f"training {name}", *steps, unit="steps")
                if steps[0] >= steps[1]:
                    shown.finish()

        try:
            with shown:
                model = train_static_model(task_obj, name=name, say=say, mode=mode, static_limit=limit,
                                           job_timeout=job_timeout, **options)
        except StaticDataError as exc:
            raise CommandError(str(exc)) from None
        except DomainError as exc:
            raise CommandError(str(exc) if isinstance(exc, InvalidInput) else exc.message) from None
        what, value = dev_score(model)
        shown = f"{value:.3f}" if isinstance(value, int | float) else "- (no dev examples)"
        write(self.style.SUCCESS(f"Registered {model.name} (#{model.pk}): {what} {shown}."))
        write(f"Evaluation on each round's test split ({primary_metric(task_obj)}):")
        for line in evaluation_table(model):
            write(line)
        if target:
            try:
                rnd, promoted = promotion.make_target(task_obj, model, allow_below_baseline=bool(override.strip()),
                                                      reason=override)
            except DomainError as exc:
                raise CommandError(f"{model.name} was trained, but cannot be a target: {exc.message}") from None
            how = "opened by promotion" if promoted else "open, had no target"
            write(self.style.SUCCESS(f"{model.name} is the target of {rnd} ({how})."))

    def print_read(self, data, sources, split, dev_fraction, test_fraction, limit):
        write = self.stdout.write
        for source in sources:
            rule = (f"all {split}" if split else f"all {source.split}" if source.split
                    else "the file's splits" if FORMATS[data.format_name].has_split
                    else f"dev {dev_fraction:g}, test {test_fraction:g} by hash")
            write(f"  {source.path}: {data.rows_read.get(source.path, 0)} rows read; splits: {rule}")
        if FORMATS[data.format_name].has_split and not split and not all(s.split for s in sources):
            write(f"  (rows without a split column value: dev {dev_fraction:g}, test {test_fraction:g} by hash)")
        if data.duplicates:
            write(f"  {data.duplicates} duplicate row(s) (the same id twice) left out")
        if data.rounds_ignored:
            write(f"  {data.rounds_ignored} row(s) name a round other than 0: they go to round 0 all the same")
        left_out = sum(data.left_out.values())
        if left_out:
            write(f"  {left_out} row(s) over --limit{' or the balance' if data.left_out['train'] else ''} left "
                  "out: " + ", ".join(f"{n} {s}" for s, n in data.left_out.items() if n))
        table = data.counts()
        write(f"  {'split':<6}{'label':<16}{'rows':>8}")
        for split_name, labels in table.items():
            for label, n in sorted(labels.items(), key=lambda kv: str(kv[0])):
                write(f"  {split_name:<6}{label if label is not None else '-':<16}{n:>8}")
            if not labels:
                write(f"  {split_name:<6}{'-':<16}{0:>8}")
