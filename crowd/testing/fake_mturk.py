# Long on purpose: a fake of MTurk's requester API that behaves like the real one: every operation the crowd calls.
"""A fake Amazon Mechanical Turk requester service, for tests and local trials.

The tests run the crowd against it, and ``manage.py crowd_demo`` (``make
crowd-demo``) lets a researcher try the HIT flow without an AWS account. Nothing in
the platform's own code paths imports it: it is reached only through
``MTURK_ENDPOINT_URL``, as the real service is.

moto has no MTurk, so this is our own. It serves the real wire protocol (AWS
JSON 1.1: ``POST /`` with ``X-Amz-Target: MTurkRequesterServiceV20170117.<Op>``)
on 127.0.0.1, so an unmodified boto3 client reaches it through ``endpoint_url``,
retries and error parsing included.

What it emulates:
- Every request is checked against botocore's own MTurk service model (operation
  exists; required members present; no unknown members; JSON types; string
  pattern, enum and length; numeric range). A violation answers 400
  ``ValidationException`` naming the member and is appended to ``violations``,
  so a test can assert ``fake.violations == []``. Responses are checked against
  the output shapes too (prefix ``response``), which guards the fake itself.
- State: balance, HIT types, HITs, assignments, bonuses, qualification types and
  scores, worker blocks, notifications; ``calls`` lists every request.
- MTurk's rules as far as we know them: same HIT-type parameters give the same
  HITTypeId; UniqueRequestToken on CreateHIT*/SendBonus (24 h); a worker's
  in-progress assignment is invisible to the requester; approve/reject only a
  Submitted assignment (approve a Rejected one with OverrideRejection); fees of
  20% (40% when MaxAssignments >= 10), at least $0.01; funds are checked when a
  HIT is created (its full cost) and charged on approval and bonus;
  ExternalQuestion XML must be well formed, in MTurk's namespace, with an https
  URL; DeleteHIT only for a Reviewable HIT with nothing left to review. Error
  messages copy MTurk's where known, with its "(<epoch ms>)" suffix.
- Workers are simulated in Python, not over HTTP: ``accept``, ``submit``,
  ``return_assignment``. Time is ``time.time()`` plus ``advance(seconds)``;
  assignments past their deadline are abandoned and Submitted ones past their
  AutoApprovalTime are approved whenever a request (or ``auto_approve_due``) runs.
- Faults: ``inject(operation, fault, times)`` with ``drop_after_commit`` (apply,
  then close the connection without answering), ``server_error`` (500
  ServiceFault), ``throttle`` (400 ThrottlingException, "Rate exceeded") or
  ``duplicate`` (400 DuplicateRequest, "already been processed", without applying
  anything: an answer that proves nothing about what MTurk did).

What it does not: authentication (signatures are ignored), HIT layouts, review
policies, qualification requests and tests, system qualifications (locale,
approval rate: always met), notifications settings, the sandbox/live split,
escrow of funds at HIT creation, and the many limits of the web site. Operations
in the model that are not implemented answer 400 ``NotImplementedByFake`` and
record a violation. Messages and TurkErrorCodes seen in real MTurk answers are
copied (HITDoesNotExist, InvalidAssignmentState, InsufficientFunds, the
"idempotency token ... has already been processed" text, ThrottlingException
"Rate exceeded"); the others (HitAlreadyExists' wording, DuplicateRequest,
InvalidHITState, ParameterOutOfRange, ...) are plausible guesses: match on
``__type`` and on what a message says, not on its exact text.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import re
import socket
import string
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from http.server import BaseHTTPRequestHandler
from xml.sax.saxutils import escape

import botocore.session

from .local_service import LocalService

TARGET_PREFIX = "MTurkRequesterServiceV20170117."
ANSWERS_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/QuestionFormAnswers.xsd"
QUESTION_NAMESPACES = {
    "ExternalQuestion": {"http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"},
    "HTMLQuestion": {"http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2011-11-11/HTMLQuestion.xsd"},
    "QuestionForm": {"http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/QuestionForm.xsd",
                     "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2017-11-06/QuestionForm.xsd"},
}
FAULTS = ("drop_after_commit", "server_error", "throttle", "duplicate")
DEFAULT_AUTO_APPROVAL_DELAY = 30 * 24 * 3600  # MTurk's default and maximum: 30 days
TOKEN_LIFETIME = 24 * 3600
CENT = Decimal("0.01")
# MTurk's Adult Content qualification (a system type: workers opt in to adult content).
ADULT_CONTENT = "00000000000000000060"
INSUFFICIENT_FUNDS = ("This Requester has insufficient funds in their account to complete this transaction. "
                      "Please visit https://requester.mturk.com/prepayments/new to purchase Prepaid HITs.")
WORKER_ID = re.compile(r"^A[A-Z0-9]+$")
HIDDEN = ("Accepted", "Returned", "Abandoned")  # assignment states the requester API never shows

_model = botocore.session.get_session().get_service_model("mturk")


class RequestError(Exception):
    """An MTurk client error (HTTP 400, ``__type`` RequestError unless told)."""

    def __init__(self, message, turk_code="", error_type="RequestError", status=400):
        super().__init__(message)
        self.status = status
        self.body = {"__type": error_type, "Message": f"{message} ({int(time.time() * 1000)})"}
        if turk_code:
            self.body["TurkErrorCode"] = turk_code


class WorkerActionError(Exception):
    """A simulated worker action that MTurk would not allow."""


@dataclass
class Hit:
    hit_id: str
    hit_type_id: str
    question: str
    max_assignments: int
    created: float
    expires: float
    seq: int
    requester_annotation: str | None = None
    disposed: bool = False


@dataclass
class Assignment:
    assignment_id: str
    hit_id: str
    worker_id: str
    status: str  # Accepted, Submitted, Approved, Rejected (+ Returned, Abandoned: gone)
    accept_time: float
    deadline: float
    seq: int
    submit_time: float | None = None
    auto_approval_time: float | None = None
    approval_time: float | None = None
    rejection_time: float | None = None
    answer: str | None = None
    requester_feedback: str | None = None


def money(value) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def fee(amount: Decimal, rate: str) -> Decimal:
    """MTurk's commission: ``rate`` of the amount, rounded to the cent, at least $0.01."""
    if amount <= 0:
        return Decimal("0.00")
    return max(CENT, money(amount * Decimal(rate)))


def answer_xml(answers: dict[str, str]) -> str:
    """The Answer MTurk stores for an ExternalQuestion form post (ASCII, non-ASCII as char refs)."""

    def text(value):
        return escape(str(value)).encode("ascii", "xmlcharrefreplace").decode("ascii")

    items = "".join(f"<Answer><QuestionIdentifier>{text(k)}</QuestionIdentifier><FreeText>{text(v)}</FreeText></Answer>"
                    for k, v in answers.items())
    return (f'<?xml version="1.0" encoding="ASCII"?><QuestionFormAnswers xmlns="{ANSWERS_NS}">'
            f'{items}</QuestionFormAnswers>')


def check_shape(shape, value, path: str) -> list[str]:
    """Problems of ``value`` against a botocore shape, as 'path: problem' strings."""
    kind = shape.type_name
    problems = []
    if kind == "structure":
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        problems += [f"{path}.{name}: missing required member" for name in shape.required_members
                     if name not in value]
        for name, member_value in value.items():
            if name not in shape.members:
                problems.append(f"{path}.{name}: unknown member")
            else:
                problems += check_shape(shape.members[name], member_value, f"{path}.{name}")
        return problems
    if kind == "list":
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        problems += _range(shape, len(value), path, "length")
        for i, item in enumerate(value):
            problems += check_shape(shape.member, item, f"{path}[{i}]")
        return problems
    if kind == "map":
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        for key, item in value.items():
            problems += check_shape(shape.key, key, f"{path}.<key>")
            problems += check_shape(shape.value, item, f"{path}.{key}")
        return problems
    if kind == "string":
        if not isinstance(value, str):
            return [f"{path}: expected a string, got {type(value).__name__}"]
        if shape.enum and value not in shape.enum:
            problems.append(f"{path}: {value!r} is not one of {shape.enum}")
        problems += _range(shape, len(value), path, "length")
        pattern = shape.metadata.get("pattern")
        if pattern and not re.search(pattern, value):
            problems.append(f"{path}: {value!r} does not match pattern {pattern}")
        return problems
    if kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{path}: expected an integer, got {type(value).__name__}"]
        return _range(shape, value, path, "value")
    if kind in ("float", "double", "timestamp"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            return [f"{path}: expected a number (epoch seconds for timestamps), got {type(value).__name__}"]
        return _range(shape, value, path, "value")
    if kind == "boolean":
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean, got {type(value).__name__}"]
    return [] if isinstance(value, str) else [f"{path}: expected {kind}, got {type(value).__name__}"]


def _range(shape, number, path, what):
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if low is not None and number < low:
        return [f"{path}: {what} {number} is below the minimum {low}"]
    if high is not None and number > high:
        return [f"{path}: {what} {number} is above the maximum {high}"]
    return []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    # Headers and body go out in two writes: without TCP_NODELAY the body of each reply on a
    # kept-alive connection waits for the client's delayed ACK.
    disable_nagle_algorithm = True
    timeout = 30

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = self.server.fake._handle(self.headers.get("X-Amz-Target", ""),
                                         self.headers.get("Content-Type", ""), body)
        if reply is None:  # drop_after_commit: no status line, no body, connection closed
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        status, payload = reply
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # keep test output quiet
        pass


class FakeMTurk(LocalService):
    """The fake service: ``start()``/``stop()`` or ``with FakeMTurk() as fake:``."""

    handler = _Handler
    thread_name = "fake-mturk"

    def __init__(self, balance="10000.00", seed=None):
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._seq = itertools.count(1)
        self._faults: dict[str, list[str]] = {}
        self._tokens: dict[tuple[str, str], tuple[float, str]] = {}
        self._hit_type_keys: dict[str, str] = {}
        self.clock_offset = 0.0
        self.balance = balance
        self.calls: list[tuple[str, dict]] = []
        self.violations: list[str] = []
        self.hit_types: dict[str, dict] = {}
        self.hits: dict[str, Hit] = {}
        self.assignments: dict[str, Assignment] = {}
        self.bonuses: list[dict] = []
        self.qualification_types: dict[str, dict] = {}
        self.qualification_scores: dict[tuple[str, str], dict] = {}  # (type id, worker id) -> score
        self.blocks: dict[str, str] = {}  # worker id -> reason
        # MTurk's Adult Content qualification is the worker's own choice: those here have
        # not opted in to adult content (everyone else has, with the value 1).
        self.adult_content_declined: set[str] = set()
        self.notifications: list[dict] = []

    @property
    def endpoint_url(self) -> str:
        return self.base_url

    # -- test controls ----------------------------------------------------------------------
    @property
    def balance(self) -> Decimal:
        return self._balance

    @balance.setter
    def balance(self, value):
        self._balance = money(value)

    def now(self) -> float:
        return time.time() + self.clock_offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock forward (deadlines, expiry, auto-approval, token lifetime)."""
        with self._lock:
            self.clock_offset += seconds

    def inject(self, operation: str, fault: str, times: int = 1) -> None:
        if operation not in _model.operation_names:
            raise ValueError(f"unknown MTurk operation {operation!r}")
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")
        with self._lock:
            self._faults.setdefault(operation, []).extend([fault] * times)

    def count(self, operation: str) -> int:
        """How many requests for ``operation`` arrived (retries included)."""
        return sum(1 for op, _ in self.calls if op == operation)

    # -- worker side ------------------------------------------------------------------------
    def accept(self, hit_id: str, worker_id: str, assignment_id: str | None = None) -> str:
        """A worker accepts the HIT; returns the assignment id.

        ``assignment_id`` reuses the id of a returned or abandoned assignment of this HIT,
        as MTurk may do when it hands the freed slot to the next worker."""
        with self._lock:
            self._tick()
            if not WORKER_ID.match(worker_id):
                raise WorkerActionError(f"{worker_id!r} is not an MTurk worker id (^A[A-Z0-9]+$)")
            hit = self.hits.get(hit_id)
            if hit is None or hit.disposed:
                raise WorkerActionError(f"HIT {hit_id} does not exist")
            if self.now() >= hit.expires:
                raise WorkerActionError(f"HIT {hit_id} has expired")
            if worker_id in self.blocks:
                raise WorkerActionError(f"worker {worker_id} is blocked by this requester")
            for requirement in self.hit_types[hit.hit_type_id]["QualificationRequirements"]:
                if not self._meets(worker_id, requirement):
                    raise WorkerActionError(f"worker {worker_id} lacks {requirement['QualificationTypeId']}")
            live = self._live(hit_id)
            if any(a.worker_id == worker_id for a in live):
                raise WorkerActionError(f"worker {worker_id} already holds an assignment of HIT {hit_id}")
            if len(live) >= hit.max_assignments:
                raise WorkerActionError(f"HIT {hit_id} has no assignment available")
            if assignment_id is not None:
                old = self.assignments.get(assignment_id)
                if old is not None and (old.hit_id != hit_id or old.status not in ("Returned", "Abandoned")):
                    raise WorkerActionError(f"assignment {assignment_id} is in use")
            now = self.now()
            assignment = Assignment(
                assignment_id=assignment_id or self._new_id(self.assignments), hit_id=hit_id,
                worker_id=worker_id, status="Accepted", accept_time=now,
                deadline=now + self.hit_types[hit.hit_type_id]["AssignmentDurationInSeconds"], seq=next(self._seq))
            self.assignments[assignment.assignment_id] = assignment
            return assignment.assignment_id

    def submit(self, assignment_id: str, answers: dict[str, str]) -> None:
        """The worker's form posts to MTurk's externalSubmit: the assignment becomes Submitted."""
        with self._lock:
            self._tick()
            assignment = self._worker_assignment(assignment_id)
            hit_type = self.hit_types[self.hits[assignment.hit_id].hit_type_id]
            now = self.now()
            assignment.status = "Submitted"
            assignment.answer = answer_xml(answers)
            assignment.submit_time = now
            assignment.auto_approval_time = now + hit_type["AutoApprovalDelayInSeconds"]

    def return_assignment(self, assignment_id: str) -> None:
        """The worker returns the HIT: the assignment vanishes and its slot is free again."""
        with self._lock:
            self._tick()
            self._worker_assignment(assignment_id).status = "Returned"

    def auto_approve_due(self, now: float | None = None) -> list[str]:
        """Approve (and pay) Submitted assignments whose AutoApprovalTime has come; returns their ids.

        One the balance cannot pay stays Submitted."""
        with self._lock:
            now = self.now() if now is None else now
            approved = []
            for a in self.assignments.values():
                if a.status == "Submitted" and a.auto_approval_time <= now:
                    cost = self._approval_cost(self.hits[a.hit_id])
                    if cost <= self.balance:
                        self.balance -= cost
                        a.status, a.approval_time = "Approved", now
                        approved.append(a.assignment_id)
            return approved

    def _worker_assignment(self, assignment_id):
        assignment = self.assignments.get(assignment_id)
        if assignment is None or assignment.status != "Accepted":
            state = assignment.status if assignment else "unknown"
            raise WorkerActionError(f"assignment {assignment_id} is not in progress ({state})")
        return assignment

    # -- request handling -------------------------------------------------------------------
    def _handle(self, target: str, content_type: str, body: bytes):
        """One request: (status, JSON payload), or None to drop the connection."""
        operation = target.removeprefix(TARGET_PREFIX) if target.startswith(TARGET_PREFIX) else ""
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = None
        with self._lock:
            self.calls.append((operation or target, params))
        if not operation or operation not in _model.operation_names:
            return self._reject(f"{target or '<no X-Amz-Target>'}: unknown operation", "UnknownOperationException")
        if not content_type.startswith("application/x-amz-json-1.1"):
            return self._reject(f"{operation}: Content-Type {content_type!r} is not application/x-amz-json-1.1",
                                "SerializationException")
        if not isinstance(params, dict):
            return self._reject(f"{operation}: body is not a JSON object", "SerializationException")
        op_model = _model.operation_model(operation)
        problems = check_shape(op_model.input_shape, params, operation)
        if problems:
            return self._reject(problems, "ValidationException")
        handler = getattr(self, f"_op_{operation}", None)
        if handler is None:
            return self._reject(f"{operation}: not implemented by the fake", "NotImplementedByFake")
        with self._lock:
            queue = self._faults.get(operation)
            fault = queue.pop(0) if queue else None
            if fault == "throttle":
                return 400, {"__type": "ThrottlingException", "Message": "Rate exceeded"}
            if fault == "duplicate":
                return 400, RequestError(f"The idempotency token \"{params.get('UniqueRequestToken')}\" has already "
                                         "been processed.", "AWS.MechanicalTurk.DuplicateRequest").body
            if fault == "server_error":
                return 500, RequestError("Internal server error. Try again.", "AWS.MechanicalTurk.ServiceFault",
                                         "ServiceFault", 500).body
            self._tick()
            try:
                status, payload = 200, handler(params)
            except RequestError as error:
                status, payload = error.status, error.body
            except Exception as error:  # a bug in the fake: fail loudly, not as a dropped connection
                self.violations.append(f"{operation}: the fake crashed: {error!r}")
                status, payload = 500, {"__type": "ServiceFault", "Message": f"fake crashed: {error!r}"}
            if status == 200:
                self.violations += [f"response {p}" for p in
                                    check_shape(op_model.output_shape, payload, operation)]
        return None if fault == "drop_after_commit" else (status, payload)

    def _reject(self, problems, error_type):
        problems = [problems] if isinstance(problems, str) else problems
        with self._lock:
            self.violations += problems
        count = f"{len(problems)} validation error{'s' if len(problems) > 1 else ''} detected: "
        prefix = count if error_type == "ValidationException" else ""
        return 400, {"__type": error_type, "Message": prefix + "; ".join(problems)}

    def _tick(self):
        """Let time act: abandon overdue assignments, auto-approve due ones."""
        now = self.now()
        for a in self.assignments.values():
            if a.status == "Accepted" and a.deadline <= now:
                a.status = "Abandoned"
        self.auto_approve_due(now)

    # -- helpers ----------------------------------------------------------------------------
    def _new_id(self, taken) -> str:
        while True:
            new = "".join(self._rng.choices(string.ascii_uppercase + string.digits, k=30))
            if new not in taken:
                return new

    def _live(self, hit_id):
        return [a for a in self.assignments.values()
                if a.hit_id == hit_id and a.status not in ("Returned", "Abandoned")]

    def _hit(self, hit_id, allow_disposed=False) -> Hit:
        hit = self.hits.get(hit_id)
        if hit is None or (hit.disposed and not allow_disposed):
            raise RequestError(f"Hit {hit_id} does not exist.", "AWS.MechanicalTurk.HITDoesNotExist")
        return hit

    def _assignment(self, assignment_id) -> Assignment:
        a = self.assignments.get(assignment_id)
        if a is None or a.status in HIDDEN:
            raise RequestError(f"Assignment {assignment_id} does not exist.",
                               "AWS.MechanicalTurk.AssignmentDoesNotExist")
        return a

    def _qualification_type(self, type_id) -> dict:
        if type_id not in self.qualification_types:
            raise RequestError(f"QualificationType {type_id} does not exist.",
                               "AWS.MechanicalTurk.QualificationTypeDoesNotExist")
        return self.qualification_types[type_id]

    def _hit_status(self, hit) -> str:
        if hit.disposed:
            return "Disposed"
        live = self._live(hit.hit_id)
        if self.now() < hit.expires and len(live) < hit.max_assignments:
            return "Assignable"
        return "Unassignable" if any(a.status == "Accepted" for a in live) else "Reviewable"

    def _approval_cost(self, hit) -> Decimal:
        return self._approval_cost_for(hit.hit_type_id, hit.max_assignments)

    def _approval_cost_for(self, hit_type_id, max_assignments) -> Decimal:
        """Reward plus MTurk's fee for one assignment."""
        reward = self.hit_types[hit_type_id]["Reward"]
        return reward + fee(reward, "0.40" if max_assignments >= 10 else "0.20")

    def _charge(self, amount: Decimal):
        if amount > self.balance:
            raise RequestError(INSUFFICIENT_FUNDS, "AWS.MechanicalTurk.InsufficientFunds")
        self.balance -= amount

    def _check_token(self, operation, token, duplicate_error):
        """Raise ``duplicate_error(first result id)`` if ``token`` was used in the last 24 hours."""
        if token is None:
            return
        seen = self._tokens.get((operation, token))
        if seen and self.now() - seen[0] < TOKEN_LIFETIME:
            raise duplicate_error(seen[1])

    def _meets(self, worker_id, requirement) -> bool:
        """Custom qualifications, and the Adult Content one (the worker's opt-in); MTurk's
        other system ones (locale, approval rate) count as met."""
        type_id = requirement["QualificationTypeId"]
        if type_id == ADULT_CONTENT:
            score = None if worker_id in self.adult_content_declined else {"IntegerValue": 1}
        elif type_id not in self.qualification_types:
            return True
        else:
            score = self.qualification_scores.get((type_id, worker_id))
        comparator, values = requirement["Comparator"], requirement.get("IntegerValues", [])
        if comparator == "Exists":
            return score is not None
        if comparator == "DoesNotExist":
            return score is None
        if score is None:
            return False
        value = score["IntegerValue"]
        tests = {"LessThan": lambda v: value < v, "LessThanOrEqualTo": lambda v: value <= v,
                 "GreaterThan": lambda v: value > v, "GreaterThanOrEqualTo": lambda v: value >= v,
                 "EqualTo": lambda v: value == v, "NotEqualTo": lambda v: value != v}
        if comparator in tests:
            return bool(values) and tests[comparator](values[0])
        return (value in values) == (comparator == "In")

    @staticmethod
    def _page(items, params, key, list_name, to_wire, default_size=10):
        """Keyset pagination over ``items`` sorted by ``key``; NextToken is opaque base64."""
        items = sorted(items, key=key)
        token = params.get("NextToken")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))["after"]
            except (ValueError, KeyError, TypeError):
                raise RequestError("The pagination token is invalid.",
                                   "AWS.MechanicalTurk.InvalidPaginationToken") from None
            items = [item for item in items if key(item) > after]
        size = params.get("MaxResults", default_size)
        page = items[:size]
        result = {"NumResults": len(page), list_name: [to_wire(item) for item in page]}
        if len(items) > size:
            result["NextToken"] = base64.urlsafe_b64encode(json.dumps({"after": key(page[-1])}).encode()).decode()
        return result

    def _check_limits(self, params):
        limits = {"Title": 128, "Description": 2000, "Keywords": 1000, "RequesterAnnotation": 255}
        for name, limit in limits.items():
            if len(params.get(name) or "") > limit:
                raise RequestError(f"{name} must be at most {limit} characters.", "AWS.ParameterOutOfRange")
        for name, low, high in (("AssignmentDurationInSeconds", 30, 31536000),
                                ("LifetimeInSeconds", 30, 31536000),
                                ("AutoApprovalDelayInSeconds", 0, DEFAULT_AUTO_APPROVAL_DELAY),
                                ("MaxAssignments", 1, 1000000)):
            if name in params and not low <= params[name] <= high:
                raise RequestError(f"Value {params[name]} for {name} is invalid: it must be between {low} and "
                                   f"{high}.", "AWS.ParameterOutOfRange")
        if "Reward" in params and money(params["Reward"]) < CENT:
            raise RequestError("The reward must be at least $0.01.", "AWS.ParameterOutOfRange")
        if len(params.get("QualificationRequirements", [])) > 10:
            raise RequestError("A HIT can have at most 10 QualificationRequirements.", "AWS.ParameterOutOfRange")

    @staticmethod
    def _check_question(question):
        def bad(detail):
            return RequestError("There was an error parsing the XML question or answer data in your request. "
                                "Please make sure the data is well-formed and validates against the appropriate "
                                f"schema. Details: {detail}", "AWS.MechanicalTurk.XMLParseError")

        if question is None:
            raise RequestError("Either a Question or a HITLayoutId must be provided (the fake supports Question).",
                               "AWS.MechanicalTurk.InvalidParameterValue")
        if len(question.encode()) > 65535:
            raise bad("the question is larger than 64 kilobytes")
        try:
            root = ET.fromstring(question)
        except ET.ParseError as error:
            raise bad(str(error)) from None
        namespace, _, name = root.tag[1:].partition("}") if root.tag.startswith("{") else ("", "", root.tag)
        if name not in QUESTION_NAMESPACES or namespace not in QUESTION_NAMESPACES[name]:
            raise bad(f"root element {root.tag} is not an ExternalQuestion, HTMLQuestion or QuestionForm")
        if name == "ExternalQuestion":
            url = root.findtext(f"{{{namespace}}}ExternalURL") or ""
            height = root.findtext(f"{{{namespace}}}FrameHeight") or ""
            if not url.strip().startswith("https://"):
                raise bad(f"ExternalURL must be an https URL, got {url.strip()!r}")
            if not height.strip().isdigit():
                raise bad("FrameHeight must be a non-negative integer")

    # -- wire representations -----------------------------------------------------------------
    def _hit_wire(self, hit) -> dict:
        hit_type = self.hit_types[hit.hit_type_id]
        live = self._live(hit.hit_id)
        wire = {
            "HITId": hit.hit_id, "HITTypeId": hit.hit_type_id, "HITGroupId": hit_type["HITGroupId"],
            "CreationTime": hit.created, "Title": hit_type["Title"], "Description": hit_type["Description"],
            "Question": hit.question, "HITStatus": self._hit_status(hit), "MaxAssignments": hit.max_assignments,
            "Reward": f"{hit_type['Reward']:.2f}", "AutoApprovalDelayInSeconds": hit_type["AutoApprovalDelayInSeconds"],
            "Expiration": hit.expires, "AssignmentDurationInSeconds": hit_type["AssignmentDurationInSeconds"],
            "QualificationRequirements": hit_type["QualificationRequirements"], "HITReviewStatus": "NotReviewed",
            "NumberOfAssignmentsPending": sum(a.status == "Accepted" for a in live),
            "NumberOfAssignmentsAvailable": max(0, hit.max_assignments - len(live)),
            "NumberOfAssignmentsCompleted": sum(a.status in ("Approved", "Rejected") for a in live),
        }
        if hit_type["Keywords"]:
            wire["Keywords"] = hit_type["Keywords"]
        if hit.requester_annotation is not None:
            wire["RequesterAnnotation"] = hit.requester_annotation
        return wire

    @staticmethod
    def _assignment_wire(a) -> dict:
        wire = {"AssignmentId": a.assignment_id, "WorkerId": a.worker_id, "HITId": a.hit_id,
                "AssignmentStatus": a.status, "AutoApprovalTime": a.auto_approval_time,
                "AcceptTime": a.accept_time, "SubmitTime": a.submit_time, "Deadline": a.deadline,
                "Answer": a.answer, "ApprovalTime": a.approval_time, "RejectionTime": a.rejection_time,
                "RequesterFeedback": a.requester_feedback}
        return {k: v for k, v in wire.items() if v is not None}

    # -- operations (called with the lock held) -------------------------------------------------
    def _op_GetAccountBalance(self, p):
        return {"AvailableBalance": f"{self.balance:.2f}"}

    def _op_CreateHITType(self, p):
        self._check_limits(p)
        spec = {
            "Title": p["Title"], "Description": p["Description"], "Reward": money(p["Reward"]),
            "AssignmentDurationInSeconds": p["AssignmentDurationInSeconds"],
            "AutoApprovalDelayInSeconds": p.get("AutoApprovalDelayInSeconds", DEFAULT_AUTO_APPROVAL_DELAY),
            "Keywords": p.get("Keywords", ""), "QualificationRequirements": p.get("QualificationRequirements", []),
        }
        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._hit_type_keys:
            type_id = self._new_id(self.hit_types)
            self.hit_types[type_id] = {**spec, "HITTypeId": type_id, "HITGroupId": self._new_id(self.hit_types)}
            self._hit_type_keys[key] = type_id
        return {"HITTypeId": self._hit_type_keys[key]}

    def _op_CreateHITWithHITType(self, p):
        if p["HITTypeId"] not in self.hit_types:
            raise RequestError(f"HITType {p['HITTypeId']} does not exist.", "AWS.MechanicalTurk.HITTypeDoesNotExist")
        return self._create_hit(p["HITTypeId"], p)

    def _op_CreateHIT(self, p):
        type_params = {k: p[k] for k in ("Title", "Description", "Reward", "AssignmentDurationInSeconds",
                                         "AutoApprovalDelayInSeconds", "Keywords", "QualificationRequirements")
                       if k in p}
        return self._create_hit(self._op_CreateHITType(type_params)["HITTypeId"], p)

    def _create_hit(self, hit_type_id, p):
        def duplicate(hit_id):
            return RequestError(f"There is already a HIT which exists with the same UniqueRequestToken. "
                                f"The HIT ID is {hit_id}.", "AWS.MechanicalTurk.HitAlreadyExists")

        token = p.get("UniqueRequestToken")
        self._check_token("CreateHIT", token, duplicate)  # one token space for both create operations
        self._check_limits(p)
        if p.get("HITLayoutId") or p.get("AssignmentReviewPolicy") or p.get("HITReviewPolicy"):
            raise RequestError("HIT layouts and review policies are not supported by the fake.")
        self._check_question(p.get("Question"))
        max_assignments = p.get("MaxAssignments", 1)
        if self._approval_cost_for(hit_type_id, max_assignments) * max_assignments > self.balance:
            raise RequestError(INSUFFICIENT_FUNDS, "AWS.MechanicalTurk.InsufficientFunds")
        now = self.now()
        hit = Hit(hit_id=self._new_id(self.hits), hit_type_id=hit_type_id, question=p["Question"],
                  max_assignments=max_assignments, created=now, expires=now + p["LifetimeInSeconds"],
                  seq=next(self._seq), requester_annotation=p.get("RequesterAnnotation"))
        self.hits[hit.hit_id] = hit
        if token is not None:
            self._tokens[("CreateHIT", token)] = (now, hit.hit_id)
        return {"HIT": self._hit_wire(hit)}

    def _op_GetHIT(self, p):
        return {"HIT": self._hit_wire(self._hit(p["HITId"], allow_disposed=True))}

    def _op_ListHITs(self, p):
        live = [h for h in self.hits.values() if not h.disposed]
        return self._page(live, p, lambda h: h.seq, "HITs", self._hit_wire)

    def _op_UpdateExpirationForHIT(self, p):
        hit = self._hit(p["HITId"])
        hit.expires = max(p["ExpireAt"], self.now())  # a time in the past expires the HIT now
        return {}

    def _op_DeleteHIT(self, p):
        hit = self._hit(p["HITId"], allow_disposed=True)
        if hit.disposed:
            return {}
        status = self._hit_status(hit)
        if status != "Reviewable":
            raise RequestError(f"This HIT is currently in the state '{status}'.  This operation can be called "
                               "with a status of: Reviewable", "AWS.MechanicalTurk.InvalidHITState")
        if any(a.status == "Submitted" for a in self._live(hit.hit_id)):
            raise RequestError("This HIT has assignments that have not been approved or rejected. Approve or "
                               "reject them before deleting the HIT.", "AWS.MechanicalTurk.InvalidHITState")
        hit.disposed = True
        return {}

    def _op_ListAssignmentsForHIT(self, p):
        self._hit(p["HITId"])
        statuses = set(p.get("AssignmentStatuses") or ("Submitted", "Approved", "Rejected"))
        chosen = [a for a in self.assignments.values() if a.hit_id == p["HITId"] and a.status in statuses]
        return self._page(chosen, p, lambda a: a.seq, "Assignments", self._assignment_wire)

    def _op_GetAssignment(self, p):
        a = self._assignment(p["AssignmentId"])
        return {"Assignment": self._assignment_wire(a), "HIT": self._hit_wire(self.hits[a.hit_id])}

    def _op_ApproveAssignment(self, p):
        a = self._assignment(p["AssignmentId"])
        if not (a.status == "Submitted" or (a.status == "Rejected" and p.get("OverrideRejection"))):
            raise RequestError("This operation can be called with a status of: Submitted",
                               "AWS.MechanicalTurk.InvalidAssignmentState")
        self._check_feedback(p.get("RequesterFeedback"))
        self._charge(self._approval_cost(self.hits[a.hit_id]))
        a.status, a.approval_time = "Approved", self.now()
        if "RequesterFeedback" in p:
            a.requester_feedback = p["RequesterFeedback"]
        return {}

    def _op_RejectAssignment(self, p):
        a = self._assignment(p["AssignmentId"])
        if a.status != "Submitted":
            raise RequestError("This operation can be called with a status of: Submitted",
                               "AWS.MechanicalTurk.InvalidAssignmentState")
        if not p["RequesterFeedback"].strip():
            raise RequestError("RequesterFeedback is required to reject an assignment: tell the worker why.",
                               "AWS.MechanicalTurk.InvalidParameterValue")
        self._check_feedback(p["RequesterFeedback"])
        a.status, a.rejection_time, a.requester_feedback = "Rejected", self.now(), p["RequesterFeedback"]
        return {}

    @staticmethod
    def _check_feedback(feedback):
        if feedback is not None and len(feedback) > 1024:
            raise RequestError("RequesterFeedback must be at most 1024 characters.", "AWS.ParameterOutOfRange")

    def _op_SendBonus(self, p):
        def duplicate(_):
            return RequestError(f'The idempotency token "{token}" has already been processed.',
                                "AWS.MechanicalTurk.DuplicateRequest")

        token = p.get("UniqueRequestToken")
        self._check_token("SendBonus", token, duplicate)
        a = self._assignment(p["AssignmentId"])
        if a.worker_id != p["WorkerId"]:
            raise RequestError(f"Worker {p['WorkerId']} did not work on assignment {a.assignment_id}.",
                               "AWS.MechanicalTurk.InvalidParameterValue")
        if a.status not in ("Approved", "Rejected"):
            raise RequestError("This operation can be called with a status of: Approved, Rejected",
                               "AWS.MechanicalTurk.InvalidAssignmentState")
        amount = money(p["BonusAmount"])
        if amount < CENT:
            raise RequestError("The bonus amount must be at least $0.01.", "AWS.ParameterOutOfRange")
        if not p["Reason"].strip():
            raise RequestError("A Reason is required for a bonus.", "AWS.MechanicalTurk.InvalidParameterValue")
        self._charge(amount + fee(amount, "0.20"))
        now = self.now()
        self.bonuses.append({"WorkerId": a.worker_id, "BonusAmount": f"{amount:.2f}", "AssignmentId": a.assignment_id,
                             "HITId": a.hit_id, "Reason": p["Reason"], "GrantTime": now,
                             "UniqueRequestToken": token, "seq": next(self._seq)})
        if token is not None:
            self._tokens[("SendBonus", token)] = (now, a.assignment_id)
        return {}

    def _op_ListBonusPayments(self, p):
        if ("HITId" in p) == ("AssignmentId" in p):
            raise RequestError("Specify either HITId or AssignmentId.", "AWS.MechanicalTurk.InvalidParameterValue")
        if "HITId" in p:
            self._hit(p["HITId"])
            chosen = [b for b in self.bonuses if b["HITId"] == p["HITId"]]
        else:
            self._assignment(p["AssignmentId"])
            chosen = [b for b in self.bonuses if b["AssignmentId"] == p["AssignmentId"]]
        wire_keys = ("WorkerId", "BonusAmount", "AssignmentId", "Reason", "GrantTime")
        return self._page(chosen, p, lambda b: b["seq"], "BonusPayments", lambda b: {k: b[k] for k in wire_keys})

    def _op_CreateQualificationType(self, p):
        if any(q["Name"] == p["Name"] for q in self.qualification_types.values()):
            raise RequestError("You have already created a QualificationType with this name. A QualificationType's "
                               "name must be unique among all of the QualificationTypes created by the same user.",
                               "AWS.MechanicalTurk.QualificationTypeAlreadyExists")
        type_id = self._new_id(self.qualification_types)
        qualification = {
            "QualificationTypeId": type_id, "CreationTime": self.now(), "Name": p["Name"],
            "Description": p["Description"], "QualificationTypeStatus": p["QualificationTypeStatus"],
            "IsRequestable": bool(p.get("Test") or p.get("AutoGranted")), "AutoGranted": p.get("AutoGranted", False),
            **{k: p[k] for k in ("Keywords", "Test", "AnswerKey", "TestDurationInSeconds", "RetryDelayInSeconds",
                                 "AutoGrantedValue") if k in p},
        }
        self.qualification_types[type_id] = qualification
        return {"QualificationType": qualification}

    def _op_GetQualificationType(self, p):
        return {"QualificationType": self._qualification_type(p["QualificationTypeId"])}

    def _op_ListQualificationTypes(self, p):
        query = (p.get("Query") or "").lower()
        chosen = [q for q in self.qualification_types.values()
                  if (not p["MustBeRequestable"] or q["IsRequestable"])
                  and query in f"{q['Name']} {q['Description']} {q.get('Keywords', '')}".lower()]
        position = {type_id: i for i, type_id in enumerate(self.qualification_types)}
        return self._page(chosen, p, lambda q: position[q["QualificationTypeId"]], "QualificationTypes", dict)

    def _op_AssociateQualificationWithWorker(self, p):
        self._qualification_type(p["QualificationTypeId"])
        self.qualification_scores[(p["QualificationTypeId"], p["WorkerId"])] = {
            "IntegerValue": p.get("IntegerValue", 1), "GrantTime": self.now(), "Status": "Granted",
            "SendNotification": p.get("SendNotification", False)}
        return {}

    def _op_DisassociateQualificationFromWorker(self, p):
        self._qualification_type(p["QualificationTypeId"])
        if self.qualification_scores.pop((p["QualificationTypeId"], p["WorkerId"]), None) is None:
            raise RequestError(f"You requested a Qualification that does not exist: worker {p['WorkerId']} does not "
                               f"have {p['QualificationTypeId']}.", "AWS.MechanicalTurk.QualificationDoesNotExist")
        return {}

    def _qualification_wire(self, key):
        type_id, worker_id = key
        score = self.qualification_scores[key]
        return {"QualificationTypeId": type_id, "WorkerId": worker_id, "GrantTime": score["GrantTime"],
                "IntegerValue": score["IntegerValue"], "Status": score["Status"]}

    def _op_GetQualificationScore(self, p):
        key = (p["QualificationTypeId"], p["WorkerId"])
        self._qualification_type(key[0])
        if key not in self.qualification_scores:
            raise RequestError(f"You requested a Qualification that does not exist: worker {key[1]} does not "
                               f"have {key[0]}.", "AWS.MechanicalTurk.QualificationDoesNotExist")
        return {"Qualification": self._qualification_wire(key)}

    def _op_ListWorkersWithQualificationType(self, p):
        self._qualification_type(p["QualificationTypeId"])
        keys = [k for k, s in self.qualification_scores.items()
                if k[0] == p["QualificationTypeId"] and s["Status"] == p.get("Status", "Granted")]
        return self._page(keys, p, lambda k: k[1], "Qualifications", self._qualification_wire)

    def _op_CreateWorkerBlock(self, p):
        if not p["Reason"].strip():
            raise RequestError("A Reason is required to block a worker.", "AWS.MechanicalTurk.InvalidParameterValue")
        self.blocks[p["WorkerId"]] = p["Reason"]
        return {}

    def _op_DeleteWorkerBlock(self, p):
        self.blocks.pop(p["WorkerId"], None)
        return {}

    def _op_ListWorkerBlocks(self, p):
        return self._page(list(self.blocks), p, lambda w: w, "WorkerBlocks",
                          lambda w: {"WorkerId": w, "Reason": self.blocks[w]})

    def _op_NotifyWorkers(self, p):
        if not 1 <= len(p["WorkerIds"]) <= 100:
            raise RequestError("WorkerIds must name between 1 and 100 workers.", "AWS.ParameterOutOfRange")
        if len(p["Subject"]) > 200 or len(p["MessageText"]) > 4096:
            raise RequestError("The Subject can have up to 200 characters and the MessageText up to 4096.",
                               "AWS.ParameterOutOfRange")
        self.notifications.append({"Subject": p["Subject"], "MessageText": p["MessageText"],
                                   "WorkerIds": list(p["WorkerIds"]), "SentTime": self.now()})
        return {"NotifyWorkersFailureStatuses": []}
