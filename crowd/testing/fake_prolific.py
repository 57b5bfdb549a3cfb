"""A fake Prolific researcher API, for tests and local trials: a real HTTP server on 127.0.0.1
(a free port, a thread) with its state in memory, reached only through ``PROLIFIC_API_URL``.
It serves what ``crowd/prolific.py`` calls, with Prolific's paths, fields, status codes and
error body (``{"error": {"status", "error_code", "title", "detail", ...}}``):

- ``Authorization: Token <token>`` on every request (401 without it or with another).
- Studies: create (UNPUBLISHED; in ``workspace_currency`` where set, as a workspace decides), list (pages);
  ``/transition/`` PUBLISH (ACTIVE), PAUSE, START, STOP (AWAITING REVIEW while submissions wait, else
  COMPLETED); a full study whose submissions are all in awaits review, and is COMPLETED once all are reviewed.
- Submissions (pages linked by ``_links.next``; one by id, 404 for an id it does not have, with its
  ``study_id`` and ``participant`` from the moment it starts); participants are simulated in Python
  (``start_submission``, ``complete``, ``add_submission``): ACTIVE, then AWAITING REVIEW with the
  code. APPROVE/REJECT only then (the same transition again is ignored, as Prolific documents);
  a rejection needs a message of 100+ characters and a category.
- Bulk bonuses from ``csv_bonuses`` (``id,amount`` lines; ids of the study's participants or
  submissions; major units, two decimals at most), answered in minor units with ``fees`` at
  ``fee_rate`` of the total (default 33.3%, Prolific's advertised service fee: an assumption,
  the API docs give no rate) rounded half up, and ``total_amount``. ``/pay/`` is NOT idempotent:
  each call pays every row again (``payments``); a payment shows in its submission's
  ``bonus_payments``; ``async_payments=True`` holds them until ``process_payments()``.
- Participant groups: create, list, add, remove; a study's blocklist and allowlist groups say who may start it.
- ``inject(endpoint, fault, times)``: ``drop_after_commit`` (apply, close unanswered),
  ``hang_after_commit`` (apply, answer after ``hang_seconds``), ``throttle`` (429,
  ``Retry-After: retry_after``), ``server_error`` (500, nothing applied). ``calls`` logs requests.

Not modelled: workspaces, other filters, balances, VAT, returns, time-outs, messages, hooks.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from .local_service import LocalService

FAULTS = ("drop_after_commit", "hang_after_commit", "throttle", "server_error")
REJECTION_CATEGORIES = {"TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
                        "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER"}
ROUTES = [  # (method, pattern, endpoint name)
    ("POST", r"/api/v1/studies/", "create_study"),
    ("GET", r"/api/v1/studies/", "list_studies"),
    ("GET", r"/api/v1/studies/(?P<id>[^/]+)/", "get_study"),
    ("POST", r"/api/v1/studies/(?P<id>[^/]+)/transition/", "transition_study"),
    ("GET", r"/api/v1/studies/(?P<id>[^/]+)/submissions/", "list_submissions"),
    ("GET", r"/api/v1/submissions/(?P<id>[^/]+)/", "get_submission"),
    ("POST", r"/api/v1/submissions/(?P<id>[^/]+)/transition/", "transition_submission"),
    ("POST", r"/api/v1/submissions/bonus-payments/", "setup_bonus"),
    ("POST", r"/api/v1/bulk-bonus-payments/(?P<id>[^/]+)/pay/", "pay_bonus"),
    ("POST", r"/api/v1/participant-groups/", "create_participant_group"),
    ("GET", r"/api/v1/participant-groups/(?P<id>[^/]+)/participants/", "group_participants"),
    ("POST", r"/api/v1/participant-groups/(?P<id>[^/]+)/participants/", "add_to_group"),
    ("DELETE", r"/api/v1/participant-groups/(?P<id>[^/]+)/participants/", "remove_from_group"),
]
ENDPOINTS = {name for _, _, name in ROUTES}


class ApiError(Exception):
    def __init__(self, status: int, detail, title: str = "", error_code: int = 0):
        super().__init__(str(detail))
        self.status = status
        self.body = {"error": {"status": status, "error_code": error_code or status * 1000 + 1,
                               "title": title or {400: "Invalid request", 401: "Authentication failed",
                                                  404: "Not found"}.get(status, "Error"),
                               "detail": detail, "additional_information": f"/api/v1/errors/{status}",
                               "traceback": "", "interactive": False}}


class ParticipantActionError(Exception):
    """A simulated participant action that Prolific would not allow."""


def _minor(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value(ROUND_HALF_UP))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 30

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        reply = self.server.fake._handle(self.command, self.path, self.headers.get("Authorization", ""), body)
        if reply is None:  # drop_after_commit: no status line, connection closed
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        status, payload, headers = reply
        data = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": len(data)}.items():
            self.send_header(name, str(value))
        try:
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (hang_after_commit): nobody to answer
            self.close_connection = True

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format, *args):  # keep test output quiet
        pass


class FakeProlific(LocalService):
    """The fake service: ``start()``/``stop()`` or ``with FakeProlific() as fake:``."""

    handler = _Handler
    thread_name = "fake-prolific"

    def __init__(self, token="fake-prolific-token", *, fee_rate="0.333", page_size=20, async_payments=False):
        self.token = token
        self.fee_rate = Decimal(fee_rate)
        self.page_size = page_size
        self.async_payments, self.workspace_currency = async_payments, None  # set: every study pays in it
        self.retry_after = 1
        self.hang_seconds = 2.0
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._faults: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str, str, dict | None]] = []
        self.studies: dict[str, dict] = {}
        self.submissions: dict[str, dict] = {}
        self.bulk_bonuses: dict[str, dict] = {}
        self.payments: list[dict] = []  # one per row per pay call: bulk_id, participant_id, amount (minor units)
        self.pending_payments: list[dict] = []
        self.groups: dict[str, dict] = {}

    @property
    def url(self) -> str:
        return self.base_url

    # -- test controls ----------------------------------------------------------------------
    def inject(self, endpoint: str, fault: str, times: int = 1) -> None:
        if endpoint not in ENDPOINTS or fault not in FAULTS:
            raise ValueError(f"unknown endpoint {endpoint!r} or fault {fault!r} (see ENDPOINTS and FAULTS)")
        with self._lock:
            self._faults.setdefault(endpoint, []).extend([fault] * times)

    def clear_faults(self, endpoint: str | None = None) -> None:
        """Drop the faults injected and not met yet (every endpoint's, or ``endpoint``'s)."""
        with self._lock:
            if endpoint is None:
                self._faults.clear()
            else:
                self._faults.pop(endpoint, None)

    def count(self, endpoint: str) -> int:
        return sum(1 for name, *_ in self.calls if name == endpoint)

    def paid_to(self, participant_id: str) -> list[int]:
        return [p["amount"] for p in self.payments if p["participant_id"] == participant_id]

    def process_payments(self) -> int:
        """Apply the payments held back (``async_payments``); how many."""
        with self._lock:
            done, self.pending_payments = self.pending_payments, []
            for payment in done:
                self._apply(payment)
            return len(done)

    # -- participant side -------------------------------------------------------------------
    def start_submission(self, study_id: str, participant_id: str) -> str:
        """A participant opens the study: an ACTIVE submission (its id is the SESSION_ID)."""
        with self._lock:
            study = self.studies.get(study_id)
            if study is None or study["status"] != "ACTIVE":
                raise ParticipantActionError(f"study {study_id} is not taking participants")
            taken = [s for s in self.submissions.values() if s["study_id"] == study_id
                     and s["status"] not in ("RETURNED", "REJECTED", "TIMED-OUT")]
            if any(s["participant"] == participant_id for s in taken):
                raise ParticipantActionError(f"{participant_id} already took study {study_id}")
            if len(taken) >= study["total_available_places"]:
                raise ParticipantActionError(f"study {study_id} is full")
            inside = {g for g, group in self.groups.items() if participant_id in group["participants"]}
            if inside & set(study["_blocklist"]) or (study["_allowlist"] and not inside & set(study["_allowlist"])):
                raise ParticipantActionError(f"{participant_id} is kept out by the study's participant groups")
            submission_id = self._new_id()
            self.submissions[submission_id] = {
                "id": submission_id, "study_id": study_id, "participant": participant_id, "status": "ACTIVE",
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "completed_at": None,
                "entered_code": None, "bonus_payments": [], "return_requested": None}
            return submission_id

    def complete(self, submission_id: str, code: str) -> None:
        """The participant lands on the completion URL with ``code``: AWAITING REVIEW."""
        with self._lock:
            submission = self.submissions.get(submission_id)
            if submission is None or submission["status"] != "ACTIVE":
                raise ParticipantActionError(f"submission {submission_id} is not in progress")
            codes = {c["code"] for c in self.studies[submission["study_id"]]["completion_codes"]}
            if code not in codes:
                raise ParticipantActionError(f"{code!r} is not a completion code of the study")
            submission.update(status="AWAITING REVIEW", entered_code=code,
                              completed_at=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
            self._settle_study(self.studies[submission["study_id"]])

    def add_submission(self, study_id: str, participant_id: str, code: str | None = None) -> str:
        """Start and complete in one step (with the study's first code unless told)."""
        submission_id = self.start_submission(study_id, participant_id)
        self.complete(submission_id, code or self.studies[study_id]["completion_codes"][0]["code"])
        return submission_id

    # -- request handling -------------------------------------------------------------------
    def _handle(self, method: str, raw_path: str, authorization: str, raw_body: bytes):
        parts = urlsplit(raw_path)
        endpoint, match = next(((name, found) for verb, pattern, name in ROUTES
                                if verb == method and (found := re.fullmatch(pattern, parts.path))), ("", None))
        try:
            body = json.loads(raw_body or b"null")
        except ValueError:
            body = None
        with self._lock:
            self.calls.append((endpoint or "unknown", method, parts.path, body))
        if authorization != f"Token {self.token}":
            return 401, ApiError(401, "Invalid token." if authorization else
                                 "Authentication credentials were not provided.").body, {}
        if not endpoint:
            return 404, ApiError(404, f"No route for {method} {parts.path}").body, {}
        with self._lock:
            queue = self._faults.get(endpoint)
            fault = queue.pop(0) if queue else None
            if fault == "throttle":
                return 429, ApiError(429, "Request was throttled.", "Too many requests").body, {
                    "Retry-After": str(self.retry_after)}
            if fault == "server_error":
                return 500, ApiError(500, "Internal server error.", "Server error").body, {}
            try:
                status, payload = getattr(self, f"_{endpoint}")(match.groupdict().get("id"), body or {},
                                                                parse_qs(parts.query))
            except ApiError as error:
                status, payload = error.status, error.body
        if fault == "drop_after_commit":
            return None
        if fault == "hang_after_commit":
            time.sleep(self.hang_seconds)
        return status, payload, {}

    def _new_id(self) -> str:
        return f"{next(self._ids):024x}"  # Prolific ids are 24 hex digits

    def _study(self, study_id) -> dict:
        if study_id not in self.studies:
            raise ApiError(404, f"Study {study_id} not found.")
        return self.studies[study_id]

    @staticmethod
    def _public(study) -> dict:
        return {k: v for k, v in study.items() if not k.startswith("_")}

    def _settle_study(self, study) -> None:
        own = [s for s in self.submissions.values() if s["study_id"] == study["id"]]
        if study["status"] == "ACTIVE":
            counted = [s for s in own if s["status"] not in ("RETURNED", "REJECTED", "TIMED-OUT")]
            if len(counted) >= study["total_available_places"] and all(s["status"] != "ACTIVE" for s in counted):
                study["status"] = "AWAITING REVIEW"
        if study["status"] == "AWAITING REVIEW" and not any(
                s["status"] in ("ACTIVE", "AWAITING REVIEW") for s in own):
            study["status"] = "COMPLETED"

    def _create_study(self, _, body, __):
        problems = {name: ["This field is required."] for name in ("name", "description", "external_study_url")
                    if not isinstance(body.get(name), str) or not body.get(name)}
        problems |= {name: ["A positive whole number is required."] for name in
                     ("estimated_completion_time", "reward", "total_available_places")
                     if not isinstance(body.get(name), int) or body[name] <= 0}
        codes = body.get("completion_codes")
        if not isinstance(codes, list) or not codes or not all(isinstance(c, dict) and c.get("code") for c in codes):
            problems["completion_codes"] = ["At least one completion code is required."]
        if body.get("currency", "GBP") not in ("GBP", "USD"):
            problems["currency"] = [f"{body.get('currency')!r} is not a valid choice."]
        if not str(body.get("external_study_url", "")).startswith(("https://", "http://")):
            problems.setdefault("external_study_url", ["Enter a valid URL."])
        if problems:
            raise ApiError(400, problems)
        lists = {f"_{kind}": [v for f in body.get("filters") or [] if f.get("filter_id") == f"participant_group_{kind}"
                              for v in f.get("selected_values") or []] for kind in ("blocklist", "allowlist")}
        study_id = self._new_id()
        paid_in = {key: self.workspace_currency or body.get("currency", "GBP")
                   for key in ("currency", "currency_code", "presentment_currency_code")}
        self.studies[study_id] = {**body, **lists, **paid_in, "id": study_id, "status": "UNPUBLISHED"}
        return 201, self._public(self.studies[study_id])

    def _get_study(self, study_id, _, __):
        return 200, self._public(self._study(study_id))

    def _transition_study(self, study_id, body, _):
        study = self._study(study_id)
        action, status = body.get("action"), study["status"]
        allowed = {"PUBLISH": ("UNPUBLISHED",), "PAUSE": ("ACTIVE",), "START": ("PAUSED",),
                   "STOP": ("ACTIVE", "PAUSED")}
        if action not in allowed:
            raise ApiError(400, {"action": [f"{action!r} is not a valid choice."]})
        if status not in allowed[action]:
            raise ApiError(400, f"A study in status {status} cannot be transitioned with {action}.")
        if action == "STOP":
            pending = any(s["study_id"] == study_id and s["status"] in ("ACTIVE", "AWAITING REVIEW")
                          for s in self.submissions.values())
            study["status"] = "AWAITING REVIEW" if pending else "COMPLETED"
        else:
            study["status"] = {"PUBLISH": "ACTIVE", "PAUSE": "PAUSED", "START": "ACTIVE"}[action]
        return 200, self._public(study)

    def _paged(self, rows, query, path, shown):
        page = int((query.get("page") or ["1"])[0])
        base, more = f"{self.url}{path}", page * self.page_size < len(rows)
        return 200, {"results": [shown(row) for row in rows[(page - 1) * self.page_size: page * self.page_size]],
                     "_links": {"self": {"href": f"{base}?page={page}", "title": "Current"},
                                "next": {"href": f"{base}?page={page + 1}" if more else None, "title": "Next"}},
                     "meta": {"count": len(rows)}}

    def _list_studies(self, _, __, query):  # each study's summary, as Prolific lists them
        return self._paged(list(self.studies.values()), query, "/api/v1/studies/", lambda s: {k: s.get(k) for k in (
            "id", "name", "internal_name", "status", "total_available_places")})

    def _list_submissions(self, study_id, _, query):
        self._study(study_id)
        rows = [s for s in self.submissions.values() if s["study_id"] == study_id]
        return self._paged(rows, query, f"/api/v1/studies/{study_id}/submissions/", lambda s: {
            "id": s["id"], "participant_id": s["participant"], "status": s["status"], "started_at": s["started_at"],
            "completed_at": s["completed_at"], "study_code": s["entered_code"]})

    def _submission(self, submission_id) -> dict:
        if submission_id not in self.submissions:
            raise ApiError(404, f"Submission {submission_id} not found.")
        return self.submissions[submission_id]

    def _get_submission(self, submission_id, _, __):
        return 200, dict(found := self._submission(submission_id), bonus_payments=list(found["bonus_payments"]))

    def _transition_submission(self, submission_id, body, _):
        submission = self._submission(submission_id)
        action = body.get("action")
        target = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}.get(action)
        if target is None:
            raise ApiError(400, {"action": [f"{action!r} is not a valid choice."]})
        if action == "REJECT":
            if len(str(body.get("message") or "")) < 100:
                raise ApiError(400, {"message": ["Ensure this field has at least 100 characters."]})
            if body.get("rejection_category") not in REJECTION_CATEGORIES:
                raise ApiError(400, {"rejection_category": ["A valid rejection category is required."]})
        if submission["status"] == target:  # Prolific ignores the same transition sent again
            return 200, dict(submission)
        if submission["status"] != "AWAITING REVIEW":
            raise ApiError(400, f"Submission in status {submission['status']} cannot be transitioned to {target}.")
        submission["status"] = target
        self._settle_study(self.studies[submission["study_id"]])
        return 200, dict(submission)

    def _setup_bonus(self, _, body, __):
        study = self._study(body.get("study_id"))
        own = {s["participant"]: s for s in self.submissions.values() if s["study_id"] == study["id"]}
        by_submission = {s["id"]: s for s in own.values()}
        rows, bad = [], []
        for line in str(body.get("csv_bonuses") or "").strip().splitlines():
            ident, _, text = line.partition(",")
            try:
                amount = Decimal(text.strip())
            except InvalidOperation:
                raise ApiError(400, {"csv_bonuses": [f"Invalid amount on line {line!r}."]}) from None
            if not amount.is_finite() or amount <= 0 or amount.as_tuple().exponent < -2:
                raise ApiError(400, {"csv_bonuses": [f"Invalid amount on line {line!r}."]})
            submission = own.get(ident.strip()) or by_submission.get(ident.strip())
            if submission is None:
                bad.append(ident.strip())
            else:
                rows.append((submission["participant"], submission["id"], _minor(amount)))
        if bad:
            raise ApiError(400, {"csv_bonuses": [f"These IDs did not take part in the study: {', '.join(bad)}"]})
        if not rows:
            raise ApiError(400, {"csv_bonuses": ["No bonuses were given."]})
        amount = sum(r[2] for r in rows)
        fees = _minor(Decimal(amount) * self.fee_rate / 100)  # on the total, rounded half up to the penny
        bulk_id = self._new_id()
        self.bulk_bonuses[bulk_id] = {"id": bulk_id, "study": study["id"], "rows": rows, "amount": amount,
                                      "fees": fees, "total_amount": amount + fees, "currency": study["currency"],
                                      "pay_calls": 0}
        return 201, {"id": bulk_id, "study": study["id"], "amount": amount, "fees": fees,
                     "total_amount": amount + fees}

    def _pay_bonus(self, bulk_id, _, __):
        bulk = self.bulk_bonuses.get(bulk_id)
        if bulk is None:
            raise ApiError(404, f"Bulk bonus payment {bulk_id} not found.")
        bulk["pay_calls"] += 1  # not idempotent: every call pays every row again
        for participant_id, submission_id, amount in bulk["rows"]:
            payment = {"bulk_id": bulk_id, "participant_id": participant_id, "submission_id": submission_id,
                       "amount": amount, "currency": bulk["currency"]}
            (self.pending_payments if self.async_payments else self.payments).append(payment)
            if not self.async_payments:
                self._apply(payment, record=False)
        return 202, None

    def _apply(self, payment, record=True):
        if record:
            self.payments.append(payment)
        self.submissions[payment["submission_id"]]["bonus_payments"].append(payment["amount"])

    def _group(self, group_id) -> dict:
        if group_id not in self.groups:
            raise ApiError(404, f"Participant group {group_id} not found.")
        return self.groups[group_id]

    def _create_participant_group(self, _, body, __):
        if not body.get("name"):
            raise ApiError(400, {"name": ["This field is required."]})
        if not body.get("workspace_id") and not body.get("organisation_id"):
            raise ApiError(400, "Either a workspace or organisation ID must be specified.")
        group_id = self._new_id()
        self.groups[group_id] = {"id": group_id, "name": body["name"], "workspace_id": body.get("workspace_id"),
                                 "description": body.get("description"),
                                 "participants": list(dict.fromkeys(body.get("participant_ids") or []))}
        group = self.groups[group_id]
        return 201, {**{k: group[k] for k in ("id", "name", "workspace_id", "description")},
                     "participant_count": len(group["participants"]), "is_deleted": False}

    def _group_participants(self, group_id, body, _, change=None):
        group = self._group(group_id)
        ids = list(body.get("participant_ids") or [])
        if change == "add":
            group["participants"] = list(dict.fromkeys(group["participants"] + ids))
        elif change == "remove":
            group["participants"] = [p for p in group["participants"] if p not in ids]
        return 200, {"results": [{"participant_id": p} for p in group["participants"]]}

    def _add_to_group(self, group_id, body, query):
        return self._group_participants(group_id, body, query, "add")

    def _remove_from_group(self, group_id, body, query):
        return self._group_participants(group_id, body, query, "remove")
