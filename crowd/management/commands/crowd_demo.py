"""Try the MTurk HIT flow (or, ``--platform prolific``, the Prolific study flow:
``crowd.testing.prolific_demo``) locally, against the project's own fakes: no account.

``make crowd-demo`` (``manage.py crowd_demo``): starts the fake MTurk in this
process, publishes a small batch on it for a task whose open round has a target
model, accepts one assignment as a made-up worker, prints the pages that worker
sees, and serves the platform (as ``runserver``) with MTurk pointed at the fake.
The worker's browser ends a HIT by posting to MTurk's own site, which the demo
cannot receive; this command plays that part: once the worker submits here, it
submits the assignment on the fake MTurk and syncs the batch (the assignment is
verified and approved), and says so.

It runs only on the demo's database: one that holds the demo's tasks and nothing
else, and no batch or worker of the live MTurk site (``demo_database_problem``).
It publishes a batch and makes a worker, an assignment and examples: pointed by
mistake at a study's database (a ``DATABASE_URL`` left set), that would mix a
made-up worker and their pay into the study's records.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

from crowd import sync
from crowd.assignments import completion_token
from crowd.models import Assignment, Batch, WorkerIdentity
from crowd.publishing import BatchRequest, TargetBelowReference, publish
from crowd.testing import prolific_demo
from crowd.testing.fake_mturk import FakeMTurk
from tasks.models import Task
from tasks.services import DEFAULT_TASK_SLUGS

SUBMIT_TO = "https://workersandbox.mturk.com"
WORKER = "A1DEMOWORKER0001"
DEMO_OVERRIDE = "crowd_demo: a fake MTurk on this machine; no money is paid"


def play_mturk(fake: FakeMTurk, batch: Batch, assignment_id: str, say, stop: threading.Event,
               poll: float = 1.0) -> bool:
    """Wait until the worker submits ``assignment_id`` here, then submit it on the fake
    MTurk (what the worker's browser would have posted there) and sync the batch.
    True once done; False if ``stop`` was set first."""
    while not stop.wait(poll):
        assignment = Assignment.objects.filter(assignment_id=assignment_id).first()
        if assignment is None or assignment.status != Assignment.Status.FINISHED:
            continue
        fake.submit(assignment_id, {"completionToken": completion_token(assignment)})
        report = sync.sync_batch(batch)
        say(f"MTurk (the fake) received the HIT; sync: {report}. See it under Crowd > Batches in the admin; "
            "once other people validate its examples, 'Pay due bonuses' pays the fooling ones.")
        return True
    return False


def demo_database_problem() -> str:
    """Why this database is not the demo's ("" when it is): the demo's one holds only the
    demo's tasks (``bootstrap_demo``: nli, qa, sentiment, hate) and nothing from the live
    MTurk site."""
    others = list(Task.objects.exclude(slug__in=DEFAULT_TASK_SLUGS).order_by("slug").values_list("slug", flat=True)[:5])
    if others:
        return f"it holds tasks the demo did not make ({', '.join(others)})"
    if Batch.objects.filter(sandbox=False, platform="mturk").exists():
        return "it holds batches published on the live MTurk site"
    if Batch.objects.filter(platform="prolific").exclude(title__endswith="(demo)").exists():
        return "it holds Prolific studies the demo did not make"
    if WorkerIdentity.objects.filter(sandbox=False, platform="mturk").exists():
        return "it holds workers from the live MTurk site"
    return ""


class Command(BaseCommand):
    help = ("Try the MTurk HIT flow without an AWS account: a fake MTurk, a published batch, one "
            "accepted assignment, and the platform served with MTurk pointed at the fake.")

    def add_arguments(self, parser):
        parser.add_argument("--task", default="sentiment", help="The task's slug (default: sentiment).")
        parser.add_argument("--port", type=int, default=8000, help="The port to serve on (default: 8000).")
        parser.add_argument("--examples", type=int, default=2, help="Examples the HIT asks for (default: 2).")
        parser.add_argument("--platform", choices=["mturk", "prolific"], default="mturk",
                            help="mturk (default): a HIT on a fake MTurk; prolific: a study on a fake Prolific.")
        parser.add_argument("--currency", choices=["GBP", "USD"], default="GBP",
                            help="Prolific: the study's currency (default: GBP).")
        parser.add_argument("--no-serve", action="store_true",
                            help="Set up and print the links, then stop (the fake MTurk stops with it).")

    def handle(self, *args, **options):
        problem = demo_database_problem()
        if problem:
            database = settings.DATABASES["default"]
            raise CommandError(
                f"crowd_demo runs only on the demo's database, and this one ({database['ENGINE'].rsplit('.', 1)[-1]} "
                f"{database['NAME']}) is not: {problem}. It would publish a batch and make a made-up worker's "
                "assignment and examples here. Point DATABASE_URL at a database of its own (unset, it is the "
                "embedded SQLite file that `make run` fills with the demo).")
        task = Task.objects.filter(slug=options["task"]).first()
        if task is None:
            raise CommandError(f"No task {options['task']!r}: run `make run` (bootstrap_demo) first.")
        rnd = task.open_round()
        if rnd is None:
            raise CommandError(f"Task {task.slug} has no open round: open one (admin, Rounds) first.")
        if not rnd.target_models.exists():
            self.stdout.write(f"Round {rnd.number} of {task.slug} has no target model yet: the server below runs its "
                              "training job, and the HIT's page says when the model is ready.\n")
        if not 1 <= options["examples"] <= 20:
            raise CommandError("--examples must be from 1 to 20.")
        if options["platform"] == "prolific":
            self.prolific(task, options)
            return
        # Only the fake is talked to, with placeholder keys: no AWS credential or config of
        # this machine is read or used.
        os.environ.update(AWS_ACCESS_KEY_ID="demo", AWS_SECRET_ACCESS_KEY="demo", AWS_CONFIG_FILE=os.devnull,
                          AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(name, None)
        fake = FakeMTurk().start()
        settings.MTURK_ENDPOINT_URL = fake.endpoint_url
        settings.MTURK_SANDBOX = True
        # MTurk frames only HTTPS pages: the HIT names this address, but the demo's worker
        # opens the local page directly (printed below).
        settings.PUBLIC_BASE_URL = "https://dynabench.invalid"
        stop = threading.Event()
        try:
            request = BatchRequest(task=task, mode=Batch.Mode.CREATE, hits=1, assignments_per_hit=1,
                                   reward=Decimal("0.50"), bonus_per_example=Decimal("0.25"),
                                   examples_per_assignment=options["examples"],
                                   title=f"Fool the {task.name} model (demo)")
            try:
                batch = publish(request)
            except TargetBelowReference as exc:  # on a real MTurk this batch would be refused
                self.stdout.write(f"On a real MTurk this batch would be refused: {exc.message}\n"
                                  "The demo publishes it on its fake MTurk with the override (recorded on the "
                                  "batch).\n\n")
                batch = publish(dataclasses.replace(request, allow_below_reference=True,
                                                    override_reason=DEMO_OVERRIDE))
            hit = batch.hit_rows.get()
            assignment_id = fake.accept(hit.hit_id, WORKER)
            base = f"http://127.0.0.1:{options['port']}{reverse('mturk-hit')}"
            preview = urlencode({"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": hit.hit_id})
            work = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                              "turkSubmitTo": SUBMIT_TO})
            self.stdout.write(
                f"A fake MTurk runs at {fake.endpoint_url}; batch {batch.pk} is published on it "
                f"(1 HIT asking for {options['examples']} examples; $0.50 reward, $0.25 per verified fooling "
                f"example).\n\n"
                f"  The HIT as a worker previews it:  {base}?{preview}\n"
                f"  The worker's accepted assignment: {base}?{work}\n\n"
                f"Write the examples there, then press 'Submit the HIT'. The browser's last step posts to MTurk's "
                f"own site, which this demo cannot receive: this command plays MTurk's part and says when.\n")
            onboarding = task.parsed_config.onboarding
            if onboarding:
                self.stdout.write(
                    f"\nThe task asks new workers for its onboarding first: the worker's page shows its "
                    f"{onboarding['per_try']} items before the work, drawn from a pool of {len(onboarding['items'])} "
                    f"(pass {task.parsed_config.onboarding_needed} of them; {onboarding['max_tries']} tries, each "
                    "with items the worker was not served before). The explanation after each answer gives the "
                    "right one.\n")
            if options["no_serve"]:
                return
            watcher = threading.Thread(target=play_mturk, args=(fake, batch, assignment_id,
                                                                lambda m: self.stdout.write(m), stop),
                                       name="crowd-demo-mturk", daemon=True)
            watcher.start()
            call_command("runserver", f"127.0.0.1:{options['port']}", use_reloader=False)
        finally:
            stop.set()
            fake.stop()

    def prolific(self, task, options):
        """The same, for a Prolific study on the fake Prolific (``crowd.testing.prolific_demo``)."""
        fake = prolific_demo.start_fake()
        # The study URL Prolific holds names this address; the demo's participant opens the local page.
        settings.PUBLIC_BASE_URL = "https://dynabench.invalid"
        stop = threading.Event()
        try:
            request = prolific_demo.request(task, options["examples"], options["currency"])
            try:
                batch = publish(request)
            except TargetBelowReference as exc:
                self.stdout.write(f"On a real Prolific this batch would be refused: {exc.message}\n"
                                  "The demo publishes it on its fake Prolific with the override (recorded on the "
                                  "batch).\n\n")
                batch = publish(dataclasses.replace(request, allow_below_reference=True,
                                                    override_reason=DEMO_OVERRIDE))
            session, link = prolific_demo.participant_link(fake, batch, options["port"])
            self.stdout.write(
                f"A fake Prolific runs at {fake.url}; batch {batch.pk} is study {batch.hit_rows.get().hit_id} on it "
                f"(1 place asking for {options['examples']} examples; {batch.currency} {batch.reward} reward for "
                f"about {batch.estimated_minutes} minutes, {batch.currency} {batch.bonus_per_example} per verified "
                f"fooling example).\n\n"
                f"  The participant's study link: {link}\n\n"
                "Write the examples there, then press 'Finish'. The page shows the completion code and sends the "
                "browser to Prolific's completion URL, which this demo cannot receive: this command plays "
                "Prolific's part (the code is recorded), syncs, approves and pays the bonus once, and says so.\n")
            if options["no_serve"]:
                return
            watcher = threading.Thread(target=prolific_demo.play_prolific,
                                       args=(fake, batch, session, lambda m: self.stdout.write(m), stop),
                                       name="crowd-demo-prolific", daemon=True)
            watcher.start()
            call_command("runserver", f"127.0.0.1:{options['port']}", use_reloader=False)
        finally:
            stop.set()
            fake.stop()
