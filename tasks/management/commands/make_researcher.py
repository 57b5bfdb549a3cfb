from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from tasks.models import Task
from tasks.roles import make_researcher


class Command(BaseCommand):
    help = ("Make a user a researcher: staff in the Researchers group (the admin, creating tasks), "
            "and an owner of the tasks given with --task (they see and manage only those).")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--task", action="append", default=[], dest="tasks", metavar="SLUG",
                            help="A task the researcher owns (repeat for more).")

    def handle(self, *args, username, tasks, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        found = {t.slug: t for t in Task.objects.filter(slug__in=tasks)}
        missing = sorted(set(tasks) - set(found))
        if missing:
            raise CommandError(f"Unknown task(s): {', '.join(missing)}.")
        make_researcher(user)
        for task in found.values():
            task.owners.add(user)
        owned = ", ".join(sorted(user.owned_tasks.values_list("slug", flat=True))) or "none yet"
        self.stdout.write(f"{username} is a researcher; owns: {owned}.")
