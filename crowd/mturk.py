"""The one module that talks to Amazon Mechanical Turk (through boto3).

Everything else in the project calls these functions; tests replace the MTurk
endpoint (``MTURK_ENDPOINT_URL``, a fake server speaking the real protocol) or
stub boto3's client, never this module's callers.

- ``MTURK_SANDBOX`` (default true) picks the sandbox or the live requester
  endpoint, in us-east-1; ``MTURK_ENDPOINT_URL`` overrides it.
- Credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY``, a profile, an instance role); they never leave the
  server.
- Every failure becomes an ``MTurkError`` whose ``kind`` says what to do about
  it: ``throttled`` and ``unavailable`` are worth a retry later; ``connection``
  means the call may or may not have happened (reconcile before retrying);
  ``insufficient_funds`` and ``request`` need a person; ``duplicate`` means a
  UniqueRequestToken was seen before (the first call went through).
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from xml.sax.saxutils import escape

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from django.conf import settings

from .platform import PlatformError

SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
LIVE_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
# Where a worker's browser posts the finished assignment (the ``turkSubmitTo`` parameter).
SUBMIT_HOSTS = {"https://www.mturk.com": False, "https://workersandbox.mturk.com": True}

# Qualification types MTurk defines for every requester.
LOCALE_QUALIFICATION = "00000000000000000071"
APPROVAL_RATE_QUALIFICATION = "000000000000000000L0"
APPROVED_COUNT_QUALIFICATION = "00000000000000000040"
# Workers who agreed to see adult content (offensive language): MTurk asks requesters to
# require it of HITs with such content; a worker who opted in has the value 1.
ADULT_CONTENT_QUALIFICATION = "00000000000000000060"

THROTTLING_CODES = {"Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
                    "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded"}
ANSWER_NS = "{http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/QuestionFormAnswers.xsd}"
HIT_ID_IN_MESSAGE = re.compile(r"\b([A-Z0-9]{30})\b")


class MTurkError(PlatformError):
    """A failed MTurk call, with a message a researcher can act on."""

    platform = "mturk"


def endpoint_url(sandbox: bool | None = None) -> str:
    """``MTURK_ENDPOINT_URL`` if set; else the sandbox or live endpoint: ``sandbox``'s
    (a batch publishes, syncs and pays where it was published), else ``MTURK_SANDBOX``'s."""
    if settings.MTURK_ENDPOINT_URL:
        return settings.MTURK_ENDPOINT_URL
    sandbox = settings.MTURK_SANDBOX if sandbox is None else sandbox
    return SANDBOX_ENDPOINT if sandbox else LIVE_ENDPOINT


def credentials_found() -> bool:
    """Whether boto3 finds AWS credentials here (environment, profile, role), as a
    client would; nothing is sent anywhere."""
    return boto3.session.Session().get_credentials() is not None


def client(sandbox: bool | None = None):
    """The boto3 MTurk client for the configured endpoint (sandbox by default).

    boto3's standard retry mode retries throttling and connection errors a few
    times with backoff, sending the same request (and UniqueRequestToken) again.
    One client per configuration is kept: making one costs tens of milliseconds,
    and boto3 clients are safe to share between threads."""
    return _client(endpoint_url(sandbox), settings.MTURK_REGION, settings.MTURK_MAX_ATTEMPTS)


CONNECT_TIMEOUT, READ_TIMEOUT = 10, 30  # seconds, per attempt
RETRY_BACKOFF_CAP = 20  # seconds: botocore's standard mode waits at most this long between attempts


def longest_call_seconds() -> int:
    """The longest one call can take with its retries: every attempt times out in full,
    with the longest wait between them. A lease on a ledger row must outlive it."""
    attempts = settings.MTURK_MAX_ATTEMPTS
    return attempts * (CONNECT_TIMEOUT + READ_TIMEOUT) + (attempts - 1) * RETRY_BACKOFF_CAP


@functools.lru_cache(maxsize=4)
def _client(endpoint: str, region: str, attempts: int):
    return boto3.client("mturk", region_name=region, endpoint_url=endpoint,
                        config=Config(retries={"mode": "standard", "total_max_attempts": attempts},
                                      connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT))


def _error(operation: str, exc: Exception) -> MTurkError:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        message = error.get("Message", "") or str(exc)
        turk_code = exc.response.get("TurkErrorCode", "") or error.get("TurkErrorCode", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        lowered = message.lower()
        if code in THROTTLING_CODES or "throttl" in lowered or "rate exceeded" in lowered:
            return MTurkError("throttled", f"MTurk is throttling our requests ({message}); retrying later.",
                              operation=operation, code=code)
        if "insufficientfunds" in turk_code.replace(".", "").lower() or "insufficient funds" in lowered:
            return MTurkError("insufficient_funds", "The requester account has too little money for this: "
                              f"add funds to the MTurk account ({message}).", operation=operation, code=code)
        if "already" in lowered and ("exist" in lowered or "processed" in lowered) or "AlreadyExists" in turk_code:
            return MTurkError("duplicate", message, operation=operation, code=turk_code or code)
        if code == "ServiceFault" or status >= 500:
            return MTurkError("unavailable", f"MTurk had an internal error ({message}); retrying later.",
                              operation=operation, code=code)
        return MTurkError("request", f"MTurk refused the request: {message}", operation=operation,
                          code=turk_code or code)
    if isinstance(exc, (BotoConnectionError, HTTPClientError)):  # lost, timed out, refused
        return MTurkError("connection", f"No answer from MTurk ({exc}); the call may or may not have gone through.",
                          operation=operation, code=type(exc).__name__)
    if isinstance(exc, BotoCoreError):
        return MTurkError("request", f"Could not call MTurk: {exc}", operation=operation, code=type(exc).__name__)
    raise exc


def call(operation: str, *, sandbox: bool | None = None, **params) -> dict:
    """One MTurk call by its boto3 name; an ``MTurkError`` on any failure."""
    try:
        return getattr(client(sandbox), operation)(**params)
    except (ClientError, BotoCoreError) as exc:
        raise _error(operation, exc) from exc


# --- account and HITs ------------------------------------------------------------------


def account_balance(*, sandbox: bool | None = None) -> Decimal:
    return Decimal(call("get_account_balance", sandbox=sandbox)["AvailableBalance"])


def external_question(url: str, frame_height: int = 0) -> str:
    """The ExternalQuestion XML for ``url`` (0: MTurk sizes the frame itself)."""
    return (
        '<ExternalQuestion xmlns="http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/'
        '2006-07-14/ExternalQuestion.xsd">'
        f"<ExternalURL>{escape(url)}</ExternalURL><FrameHeight>{int(frame_height)}</FrameHeight>"
        "</ExternalQuestion>"
    )


def create_hit_type(*, title: str, description: str, keywords: str, reward: Decimal,
                    assignment_duration: int, auto_approval_delay: int, qualifications: list[dict],
                    sandbox: bool | None = None) -> str:
    """A HIT type; MTurk answers the same id for the same parameters."""
    params = dict(Title=title, Description=description, Reward=f"{reward:.2f}",
                  AssignmentDurationInSeconds=assignment_duration, AutoApprovalDelayInSeconds=auto_approval_delay,
                  QualificationRequirements=qualifications)
    if keywords:
        params["Keywords"] = keywords
    return call("create_hit_type", sandbox=sandbox, **params)["HITTypeId"]


def create_hit(*, hit_type_id: str, question: str, max_assignments: int, lifetime: int,
               unique_request_token: str, annotation: str = "", sandbox: bool | None = None) -> str:
    """Post one HIT. Posting again with the same token posts nothing and gives back
    the first HIT's id (MTurk says it exists already, naming it)."""
    params = dict(HITTypeId=hit_type_id, MaxAssignments=max_assignments, LifetimeInSeconds=lifetime,
                  Question=question, UniqueRequestToken=unique_request_token)
    if annotation:
        params["RequesterAnnotation"] = annotation
    try:
        return call("create_hit_with_hit_type", sandbox=sandbox, **params)["HIT"]["HITId"]
    except MTurkError as exc:
        if exc.kind == "duplicate":
            found = HIT_ID_IN_MESSAGE.search(exc.message)
            if found:
                return found.group(1)
        raise


def expire_hit(hit_id: str, *, sandbox: bool | None = None) -> None:
    """Stop the HIT taking workers now (assignments already taken go on)."""
    call("update_expiration_for_hit", sandbox=sandbox, HITId=hit_id, ExpireAt=datetime(2015, 1, 1, tzinfo=UTC))


def list_assignments(hit_id: str, statuses=("Submitted", "Approved", "Rejected"), *,
                     sandbox: bool | None = None) -> Iterator[dict]:
    """Every assignment of the HIT in ``statuses``, page by page."""
    params = {"HITId": hit_id, "MaxResults": 100, "AssignmentStatuses": list(statuses)}
    while True:
        page = call("list_assignments_for_hit", sandbox=sandbox, **params)
        yield from page.get("Assignments", [])
        token = page.get("NextToken")
        if not token or not page.get("Assignments"):
            return
        params["NextToken"] = token


def get_assignment(assignment_id: str, *, sandbox: bool | None = None) -> dict | None:
    """The assignment as MTurk shows it (``AssignmentId``, ``WorkerId``, ``HITId``, ...), or
    None where MTurk says it does not exist. MTurk shows only Submitted, Approved and Rejected
    assignments (GetAssignment's reference), so one a worker still holds and a made-up id
    both answer None."""
    try:
        return call("get_assignment", sandbox=sandbox, AssignmentId=assignment_id).get("Assignment")
    except MTurkError as exc:
        if exc.kind == "request" and ("DoesNotExist" in exc.code or "does not exist" in exc.message.lower()):
            return None
        raise


def parse_answer(answer_xml: str) -> dict[str, str]:
    """The fields of a QuestionFormAnswers document (what the HIT page posted)."""
    if not answer_xml:
        return {}
    try:
        root = ET.fromstring(answer_xml)
    except ET.ParseError:
        return {}
    fields = {}
    for answer in root.iter(f"{ANSWER_NS}Answer"):
        name = answer.findtext(f"{ANSWER_NS}QuestionIdentifier") or ""
        fields[name] = answer.findtext(f"{ANSWER_NS}FreeText") or ""
    return fields


def approve(assignment_id: str, feedback: str = "", *, sandbox: bool | None = None) -> None:
    params = {"AssignmentId": assignment_id}
    if feedback:
        params["RequesterFeedback"] = feedback[:1024]
    call("approve_assignment", sandbox=sandbox, **params)


def reject(assignment_id: str, feedback: str, *, sandbox: bool | None = None) -> None:
    if not feedback:
        raise ValueError("A rejection always tells the worker why.")
    call("reject_assignment", sandbox=sandbox, AssignmentId=assignment_id, RequesterFeedback=feedback[:1024])


# --- bonuses ---------------------------------------------------------------------------


def send_bonus(*, worker_id: str, assignment_id: str, amount: Decimal, reason: str, unique_request_token: str,
               sandbox: bool | None = None) -> None:
    call("send_bonus", sandbox=sandbox, WorkerId=worker_id, AssignmentId=assignment_id,
         BonusAmount=f"{amount:.2f}", Reason=reason, UniqueRequestToken=unique_request_token)


def bonuses_for(assignment_id: str, *, sandbox: bool | None = None) -> list[dict]:
    """The bonuses MTurk has on record for the assignment."""
    found, params = [], {"AssignmentId": assignment_id, "MaxResults": 100}
    while True:
        page = call("list_bonus_payments", sandbox=sandbox, **params)
        found.extend(page.get("BonusPayments", []))
        token = page.get("NextToken")
        if not token or not page.get("BonusPayments"):
            return found
        params["NextToken"] = token


# --- workers ---------------------------------------------------------------------------


def create_qualification_type(name: str, description: str, *, sandbox: bool | None = None) -> str:
    return call("create_qualification_type", sandbox=sandbox, Name=name, Description=description,
                QualificationTypeStatus="Active")["QualificationType"]["QualificationTypeId"]


def find_qualification_type(name: str, *, sandbox: bool | None = None) -> str | None:
    page = call("list_qualification_types", sandbox=sandbox, Query=name, MustBeRequestable=False,
                MustBeOwnedByCaller=True, MaxResults=100)
    for qualification in page.get("QualificationTypes", []):
        if qualification.get("Name") == name:
            return qualification["QualificationTypeId"]
    return None


def give_qualification(qualification_type_id: str, worker_id: str, value: int = 1, *,
                       sandbox: bool | None = None) -> None:
    call("associate_qualification_with_worker", sandbox=sandbox, QualificationTypeId=qualification_type_id,
         WorkerId=worker_id, IntegerValue=value, SendNotification=False)


def take_qualification(qualification_type_id: str, worker_id: str, reason: str = "", *,
                       sandbox: bool | None = None) -> None:
    params = {"QualificationTypeId": qualification_type_id, "WorkerId": worker_id}
    if reason:
        params["Reason"] = reason[:1024]
    call("disassociate_qualification_from_worker", sandbox=sandbox, **params)


def block_worker(worker_id: str, reason: str, *, sandbox: bool | None = None) -> None:
    call("create_worker_block", sandbox=sandbox, WorkerId=worker_id, Reason=reason[:1024])


def unblock_worker(worker_id: str, reason: str = "", *, sandbox: bool | None = None) -> None:
    params = {"WorkerId": worker_id}
    if reason:
        params["Reason"] = reason[:1024]
    call("delete_worker_block", sandbox=sandbox, **params)


def notify(worker_ids: list[str], subject: str, message: str, *, sandbox: bool | None = None) -> list[dict]:
    """Email workers through MTurk (100 per call); the failures MTurk reports."""
    failures = []
    for start in range(0, len(worker_ids), 100):
        answer = call("notify_workers", sandbox=sandbox, Subject=subject[:200], MessageText=message[:4096],
                      WorkerIds=worker_ids[start:start + 100])
        failures.extend(answer.get("NotifyWorkersFailureStatuses", []))
    return failures
