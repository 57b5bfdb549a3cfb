"""One worker's side of each crowd platform, for the suite that runs over both
(tests/crowd/test_platforms_flow.py, tests/crowd/test_platforms_quality.py): publish a
batch, do an assignment the platform lists (writing, validating or the onboarding),
forge one it never lists, open a batch's page, ask whether the platform itself lets
the worker in, and read what the platform paid."""

import re
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

from django.urls import reverse

from crowd.models import Assignment, CrowdBudget
from crowd.publishing import BatchRequest, publish
from crowd.testing.fake_mturk import WorkerActionError
from crowd.testing.fake_prolific import ParticipantActionError
from tests.crowd.test_crowd_flow import api, token_of, write_pair  # noqa: F401  (the suites import them from here)


class MTurkSide:
    name = "mturk"
    worker = "A2WORKERONE77"
    other = "A3WORKERTWO88"
    submit_to = "https://workersandbox.mturk.com"
    pay_call = "SendBonus"  # the fake's name of the call that pays a bonus

    def __init__(self, fake):
        self.fake = fake

    def publish(self, task, user=None, **overrides):
        values = dict(task=task, mode="create", hits=1, assignments_per_hit=2, reward=Decimal("0.50"),
                      bonus_per_example=Decimal("0.25"), examples_per_assignment=2)
        values.update(overrides)
        return publish(BatchRequest(**values), user=user)

    def calls(self) -> int:
        return len(self.fake.calls)

    def _page(self, client, hit_id, work_id, worker):
        return client.get(reverse("mturk-hit"), {"assignmentId": work_id, "hitId": hit_id, "workerId": worker,
                                                 "turkSubmitTo": self.submit_to})

    def _finish(self, client, token) -> str:
        response = client.post(reverse("mturk-hit-submit"), {"token": token})
        assert response.status_code == 200, response.content
        return re.search(r'name="completionToken" value="([^"]+)"', response.content.decode()).group(1)

    def do_work(self, client, batch, worker=None, text="The film was fine, I suppose.", work=None):
        """Accept on MTurk, do the work on our page (``work(api client)``; by default one
        pair of examples), submit here and on MTurk."""
        worker = worker or self.worker
        hit = batch.hit_rows.first()
        work_id = self.fake.accept(hit.hit_id, worker)
        page = self._page(client, hit.hit_id, work_id, worker)
        assert page.status_code == 200, page.content
        token = token_of(page)
        (work or (lambda worker_api: write_pair(worker_api, batch.task.slug, text)))(api(token))
        self.fake.submit(work_id, {"completionToken": self._finish(client, token)})
        return Assignment.objects.get(assignment_id=work_id, worker__worker_id=worker)

    def page(self, client, batch, worker, work_id="3PAGEPAGEPAGEPAGEPAGEPAGEPAGE1"):
        """Our page of the batch opened under ``worker``'s id (a work id MTurk never gave)."""
        return self._page(client, batch.hit_rows.first().hit_id, work_id, worker)

    def admits(self, batch, worker) -> bool:
        """Whether MTurk itself lets the worker take the batch's HIT (its qualifications)."""
        try:
            self.fake.accept(batch.hit_rows.first().hit_id, worker)
        except WorkerActionError:
            return False
        return True

    def forge(self, client, batch, worker, text="Forged work.", work=None):
        """A made-up work id under a real worker's id: worked and finished here, never on MTurk."""
        hit = batch.hit_rows.first()
        token = token_of(self._page(client, hit.hit_id, "3FORGEDFORGEDFORGEDFORGEDFORG1", worker))
        (work or (lambda worker_api: write_pair(worker_api, batch.task.slug, text)))(api(token))
        self._finish(client, token)
        return Assignment.objects.get(assignment_id="3FORGEDFORGEDFORGEDFORGEDFORG1")

    @staticmethod
    def made_up_work_id(n: int = 0) -> str:
        return f"3MADEUP{n:023d}"

    @staticmethod
    def made_up_worker(n: int) -> str:
        return f"A{n:012d}MADEUP"

    def forged_page(self, client, batch, worker, work_id=None):
        """Our page opened under ``worker``'s id with a work id MTurk never gave: MTurk shows
        no assignment before it is submitted, so the arrival is provisional."""
        return self._page(client, batch.hit_rows.first().hit_id, work_id or self.made_up_work_id(), worker)

    def start(self, client, batch, worker=None, *, platform_down=False):
        """A real worker takes the work on MTurk and opens our page: (work id, page)."""
        worker = worker or self.worker
        work_id = self.fake.accept(batch.hit_rows.first().hit_id, worker)
        return work_id, self.open(client, batch, worker, work_id, platform_down=platform_down)

    def open(self, client, batch, worker, work_id, *, platform_down=False):
        """Our page of work the worker took on MTurk (which cannot confirm it before it is
        submitted: ``platform_down`` changes nothing)."""
        return self._page(client, batch.hit_rows.first().hit_id, work_id, worker)

    def hand_in(self, client, token, work_id):
        """Submit here, then on MTurk with the completion token."""
        self.fake.submit(work_id, {"completionToken": self._finish(client, token)})

    def paid_to(self, worker) -> list[Decimal]:
        return [Decimal(b["BonusAmount"]) for b in self.fake.bonuses if b["WorkerId"] == worker]

    def approved_there(self, assignment) -> bool:
        return self.fake.assignments[assignment.assignment_id].status == "Approved"


class ProlificSide:
    name = "prolific"
    worker = "5f0c1a2b3c4d5e6f7a8b9c0d"
    other = "60aa11bb22cc33dd44ee55ff"
    pay_call = "pay_bonus"

    def __init__(self, fake, currency="USD"):
        self.fake = fake
        self.currency = currency

    def publish(self, task, user=None, **overrides):
        CrowdBudget.objects.get_or_create(task=task, defaults={"amount": Decimal("500.00"),
                                                               "currency": self.currency})
        values = dict(task=task, mode="create", hits=1, assignments_per_hit=2, reward=Decimal("1.00"),
                      bonus_per_example=Decimal("0.25"), examples_per_assignment=2, platform="prolific",
                      currency=self.currency, estimated_minutes=5)
        values.update(overrides)
        return publish(BatchRequest(**values), user=user)

    def calls(self) -> int:
        return len(self.fake.calls)

    @staticmethod
    def entry(batch, participant, session):
        return (reverse("prolific-entry", args=[batch.uid.hex]),
                {"PROLIFIC_PID": participant, "STUDY_ID": batch.hit_rows.first().hit_id, "SESSION_ID": session})

    def _finish(self, client, token) -> str:
        response = client.post(reverse("prolific-submit"), {"token": token})
        assert response.status_code == 200, response.content
        body = response.content.decode()
        code = re.search(r'id="completion-code">([^<]+)<', body).group(1)
        href = re.search(r'<a href="([^"]+)" id="completion-link"', body).group(1)
        assert href.startswith("https://app.prolific.com/submissions/complete?")
        assert parse_qs(urlsplit(href.replace("&amp;", "&")).query)["cc"] == [code]
        return code

    def do_work(self, client, batch, worker=None, text="The film was fine, I suppose.", work=None):
        """Start a submission on Prolific, do the work on our page (``work(api client)``; by
        default one pair of examples), finish here and hand the code to Prolific."""
        worker = worker or self.worker
        session = self.fake.start_submission(batch.hit_rows.first().hit_id, worker)
        path, params = self.entry(batch, worker, session)
        page = client.get(path, params)
        assert page.status_code == 200, page.content
        token = token_of(page)
        (work or (lambda worker_api: write_pair(worker_api, batch.task.slug, text)))(api(token))
        self.fake.complete(session, self._finish(client, token))
        return Assignment.objects.get(assignment_id=session, worker__worker_id=worker)

    def page(self, client, batch, worker):
        """Our page of the batch opened under ``worker``'s id: with a submission Prolific started
        for them, or, where Prolific keeps them out (its participant groups), a made-up one."""
        try:
            work_id = self.fake.start_submission(batch.hit_rows.first().hit_id, worker)
        except ParticipantActionError:
            work_id = "a" * 24
        path, params = self.entry(batch, worker, work_id)
        return client.get(path, params)

    def admits(self, batch, worker) -> bool:
        """Whether Prolific itself lets the participant start the batch's study (its filters);
        one who holds a submission there already was let in."""
        study = batch.hit_rows.first().hit_id
        if any(s["study_id"] == study and s["participant"] == worker and s["status"] == "ACTIVE"
               for s in self.fake.submissions.values()):
            return True
        try:
            self.fake.start_submission(study, worker)
        except ParticipantActionError:
            return False
        return True

    @staticmethod
    def made_up_work_id(n: int = 0) -> str:
        return f"{0xF00000 + n:024x}"

    @staticmethod
    def made_up_worker(n: int) -> str:
        return f"{0xABC000 + n:024x}"

    def _unanswered(self, client, path, params):
        """Open our page while Prolific cannot answer about the submission."""
        self.fake.inject("get_submission", "server_error")
        try:
            return client.get(path, params)
        finally:
            self.fake.clear_faults("get_submission")  # one refused before asking leaves none behind

    def forged_page(self, client, batch, worker, work_id=None):
        """Our page opened under ``worker``'s id with a SESSION_ID Prolific never gave, in the
        forger's best case: Prolific cannot answer at the arrival (when it can, it says the
        submission is not theirs and the page refuses), so the arrival is provisional."""
        return self._unanswered(client, *self.entry(batch, worker, work_id or self.made_up_work_id()))

    def start(self, client, batch, worker=None, *, platform_down=False):
        """A real participant starts a submission on Prolific and opens our page: (work id,
        page). ``platform_down``: Prolific cannot answer at the arrival (it is confirmed later)."""
        worker = worker or self.worker
        work_id = self.fake.start_submission(batch.hit_rows.first().hit_id, worker)
        return work_id, self.open(client, batch, worker, work_id, platform_down=platform_down)

    def open(self, client, batch, worker, work_id, *, platform_down=False):
        """Our page of the participant's submission (``platform_down``: Prolific cannot answer)."""
        path, params = self.entry(batch, worker, work_id)
        return self._unanswered(client, path, params) if platform_down else client.get(path, params)

    def hand_in(self, client, token, work_id):
        """Finish here, then hand Prolific the completion code."""
        self.fake.complete(work_id, self._finish(client, token))

    def forge(self, client, batch, worker, text="Forged work.", work=None):
        """A made-up SESSION_ID under a real participant's id: worked and finished here,
        never a submission on Prolific (``forged_page``: the forger's best case)."""
        token = token_of(self.forged_page(client, batch, worker, "f" * 24))
        (work or (lambda worker_api: write_pair(worker_api, batch.task.slug, text)))(api(token))
        self._finish(client, token)
        return Assignment.objects.get(assignment_id="f" * 24)

    def paid_to(self, worker) -> list[Decimal]:
        return [Decimal(amount) / 100 for amount in self.fake.paid_to(worker)]

    def approved_there(self, assignment) -> bool:
        return self.fake.submissions[assignment.assignment_id]["status"] == "APPROVED"
