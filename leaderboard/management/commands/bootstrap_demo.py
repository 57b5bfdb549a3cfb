from django.core.management.base import BaseCommand, CommandError

from core import progress
from jobs.models import Job
from leaderboard.demo import DEMO_ADMIN_USERNAME, REAL_DATA_LIMIT, REAL_MODEL_NAME, bootstrap_demo


class Command(BaseCommand):
    help = ("Create the four demo tasks (NLI, QA, sentiment, hate speech) with round 1 open, "
            "the shipped seed contexts, the seed examples in round 0 (train, dev, test), round-0 target models "
            "(trained, evaluated, then made round 1's target) and a superuser. Safe to rerun. "
            f"--real-data: NLI, sentiment and hate speech get a target ({REAL_MODEL_NAME}) trained on real data "
            "in DYNABENCH_DATA_DIR (MNLI+SNLI dev, SST-2, Davidson) imported into round 0, instead of the seed "
            "model; it becomes round 1's target, or, if an earlier run left the seed model as round 1's target, "
            "the target of round 2, opened by promotion. QA, and tasks whose data is absent, keep the seed model. "
            "--background --real-data (make run): the seed models first, then jobs that add the real data to round 0, "
            "train on it and promote each real-data model that beats its seed target.")

    def add_arguments(self, parser):
        parser.add_argument("--no-models", action="store_true",
                            help="Skip training the round-0 demo models.")
        parser.add_argument("--real-data", action="store_true",
                            help="Train the round-0 targets on the real data sets where they are present "
                                 "(one epoch each: a few minutes per task on 2 CPU cores). manage.py fetch_data "
                                 "downloads them.")
        parser.add_argument("--background", action="store_true",
                            help="Queue the seed models' training and evaluation as jobs and return at once: "
                                 "the web process (embedded mode) or a worker runs them, and each model becomes "
                                 "its round's target when its evaluation succeeds. `make run` uses this.")
        parser.add_argument("--limit", type=int, metavar="N",
                            help=f"With --real-data: at most N rows of each split per task (default "
                                 f"{REAL_DATA_LIMIT}).")
        progress.add_argument(parser)

    def handle(self, *args, **options):
        if options["real_data"] and options["no_models"]:
            raise CommandError("--real-data trains models: it cannot go with --no-models.")
        if options["limit"] is not None and not options["real_data"]:
            raise CommandError("--limit applies to --real-data only.")
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be 1 or more.")

        shown = progress.Progress.for_command(self, options)

        def say(message):
            shown.write(f"  {message}")

        if options["background"] and options["no_models"]:
            raise CommandError("--background queues the models' jobs: it cannot go with --no-models.")
        with shown:
            report = bootstrap_demo(with_models=not options["no_models"], progress=say,
                                    real_data=options["real_data"], real_data_limit=options["limit"],
                                    background=options["background"], advance=shown.show)
        for slug in report.tasks_created:
            self.stdout.write(f"created task {slug}")
        for name in report.rounds_created:
            self.stdout.write(f"opened {name}")
        for slug, n in report.contexts_created.items():
            if n:
                self.stdout.write(f"added {n} seed contexts to {slug}")
        for slug, n in report.examples_imported.items():
            if n:
                self.stdout.write(f"imported {n} seed examples of {slug} into round 0 (train, dev and test)")
        for name in report.models_trained:
            self.stdout.write(f"trained and registered {name}")
        if report.admin_password:
            self.stdout.write(self.style.WARNING(
                f"superuser '{DEMO_ADMIN_USERNAME}' created; password: {report.admin_password} "
                "(shown once: keep it)"))
        waiting = Job.objects.filter(status__in=Job.ACTIVE, kind__in=(Job.Kind.TRAIN_MODEL, Job.Kind.EVALUATE_MODEL))
        if options["background"] and waiting.exists():
            self.stdout.write(f"{waiting.count()} job(s) wait for the server: it runs them one after another once "
                              "it starts. Each task's page shows its model's progress; all jobs: /admin/jobs/job/")
        elif not report.created_anything:
            self.stdout.write("demo already set up; nothing to do")
