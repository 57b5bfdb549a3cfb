from django.core.management.base import BaseCommand

from leaderboard.demo import DEMO_ADMIN_USERNAME, bootstrap_demo


class Command(BaseCommand):
    help = ("Create the four demo tasks (NLI, QA, sentiment, hate speech) with round 1 open, "
            "the shipped seed contexts, round-0 target models and a superuser. Safe to rerun.")

    def add_arguments(self, parser):
        parser.add_argument("--no-models", action="store_true",
                            help="Skip training the round-0 demo models.")

    def handle(self, *args, **options):
        def progress(message):
            self.stdout.write(f"  {message}")

        report = bootstrap_demo(with_models=not options["no_models"], progress=progress)
        for slug in report.tasks_created:
            self.stdout.write(f"created task {slug}")
        for name in report.rounds_created:
            self.stdout.write(f"opened {name}")
        for slug, n in report.contexts_created.items():
            if n:
                self.stdout.write(f"added {n} seed contexts to {slug}")
        for name in report.models_trained:
            self.stdout.write(f"trained and registered {name}")
        if report.admin_password:
            self.stdout.write(self.style.WARNING(
                f"superuser '{DEMO_ADMIN_USERNAME}' created; password: {report.admin_password} "
                "(shown once: keep it)"))
        if not report.created_anything:
            self.stdout.write("demo already set up; nothing to do")
