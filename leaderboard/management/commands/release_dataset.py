from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from leaderboard.jobs import JobDidNotSucceed, wait_for_success
from leaderboard.models import Release
from leaderboard.releases import hub, service
from tasks.models import Task


def _numbers(text: str, what: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        numbers = []
    if not numbers or any(n < 0 for n in numbers):
        raise CommandError(f"{what}: write round numbers separated by commas, e.g. 0,1 (got {text!r}).")
    return numbers


class Command(BaseCommand):
    help = (
        "Make a data release of a task: its verified examples of the chosen closed rounds and splits, as one "
        "Parquet file per split, a data card (README.md with the Hugging Face Hub's header) and Croissant "
        "metadata, recorded as the task's next release version (a job; this waits for it). --out DIR copies the "
        "files to DIR (DIR/README.md, DIR/croissant.json, DIR/data/<split>.parquet); --push OWNER/NAME uploads "
        "that folder to the Hub where HF_TOKEN is set. An open or draft round is refused."
    )

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--rounds", required=True, help="Round numbers, comma-separated (e.g. 0,1); closed "
                                                            "rounds only.")
        parser.add_argument("--splits", help="Splits, comma-separated (default: train,dev, and test with "
                                             "--release-test-split).")
        parser.add_argument("--release-test-split", action="store_true",
                            help="Release the test split on purpose: it is the leaderboard's test data, public "
                                 "from then on (the data browser too); the release records it.")
        parser.add_argument("--out", metavar="DIR", help="Copy the release's files here (a missing or empty folder).")
        parser.add_argument("--push", metavar="REPO", help="Upload the folder to this Hub data set repository "
                                                           "(OWNER/NAME) with HF_TOKEN; implies a folder (--out, "
                                                           "or a temporary one under var/).")
        parser.add_argument("--private", action="store_true", help="With --push: make a new repository private.")
        parser.add_argument("--by", metavar="USERNAME", help="The researcher the release is recorded as made by.")
        parser.add_argument("--job-timeout", type=float, metavar="SECONDS",
                            help="Give up waiting for the job after this long (it goes on). Default: wait.")

    def handle(self, *args, task, rounds, splits, release_test_split, out, push, private, by, job_timeout,
               **options):
        task_obj = Task.objects.filter(slug=task).first()
        if task_obj is None:
            known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
            raise CommandError(f"Unknown task {task!r}. Known tasks: {known}.")
        numbers = _numbers(rounds, "--rounds")
        split_list = [s for s in splits.replace(" ", "").split(",") if s] if splits else None
        user = None
        if by:
            user = get_user_model().objects.filter(username=by).first()
            if user is None:
                raise CommandError(f"--by: no user {by!r}.")
        if push:
            try:
                hub.check_repo_id(push)
            except ValueError as exc:
                raise CommandError(f"--push: {exc}") from None
            if not out:
                out = str(Path(settings.VAR_DIR) / "releases" / task_obj.slug)
        folder = Path(out) if out else None
        if folder is not None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise CommandError(f"--out {folder} is not empty: name a new or empty folder.")
        try:
            job = service.start_release(task_obj, rounds=numbers, splits=split_list, user=user,
                                        release_test_split=release_test_split)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"release job #{job.pk} queued")
        try:
            job = wait_for_success(job, "release", self.stdout.write, job_timeout)
        except JobDidNotSucceed as exc:
            raise CommandError(str(exc)) from None
        release = Release.objects.get(pk=job.result["release"])
        sizes = ", ".join(f"{s}: {release.counts['splits'][s]['rows']}" for s in release.splits)
        self.stdout.write(self.style.SUCCESS(f"{release}: {release.total_rows} examples ({sizes}), rounds "
                                             f"{release.rounds}, licence {release.license}"))
        if folder is None:
            return
        try:
            service.copy_release(release, folder)
        except (DomainError, OSError) as exc:
            raise CommandError(f"Could not write {folder}: {exc}") from None
        self.stdout.write(f"written to {folder}: README.md, croissant.json, "
                          + ", ".join(release.data_files))
        if push:
            try:
                pushed = hub.push(folder, push, private=private,
                                  message=f"Dynabench release {release} (rounds {release.rounds})")
            except hub.NotPushed as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(self.style.SUCCESS(f"pushed to {pushed.url} (commit {pushed.commit or '?'})"))
