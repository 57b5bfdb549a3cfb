"""The one module that talks to Prolific's researcher API (plain HTTP with ``requests``).

- ``PROLIFIC_API_URL`` (default https://api.prolific.com) and ``PROLIFIC_TOKEN`` (from the
  environment; sent as ``Authorization: Token …``, never logged). Tests point the URL at
  ``crowd.testing.fake_prolific``, which speaks the same protocol.
- Every failure becomes a ``ProlificError`` whose ``kind`` says what to do about it, as
  ``MTurkError`` does: ``throttled`` (429, ``retry_after`` kept) and ``unavailable`` (5xx) are
  worth a retry later; ``connection`` (timeout, dropped) means the call may or may not have
  happened; ``auth`` (401/403), ``not_found`` (404) and ``request`` (other 4xx) need a person.
- Calls retry 429 (after ``Retry-After``) and 5xx a few times with backoff; reads and the
  idempotent transitions also retry lost connections. ``pay_bonus`` never retries: Prolific's
  pay call is not idempotent (each call pays again).
- Money: the bonus CSV takes amounts in the study currency's major unit (1.50 = £1.50);
  Prolific answers amounts, fees and totals in minor units (pence / cents).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from urllib.parse import quote, urlsplit

import requests
from django.conf import settings

from .platform import PlatformError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT, READ_TIMEOUT = 10, 30  # seconds, per attempt
MAX_ATTEMPTS = 4  # the first included
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 8.0  # seconds; doubled after each failed attempt
RETRY_AFTER_CAP = 60  # a longer Retry-After is not waited for here: ``throttled`` is raised at once
MIN_REJECTION_MESSAGE = 100  # characters, Prolific's rule
CURRENCIES = {"GBP", "USD"}
COMPLETION_URL = "https://app.prolific.com/submissions/complete?cc="
STUDY_URL_PARAMETERS = "PROLIFIC_PID={%PROLIFIC_PID%}&STUDY_ID={%STUDY_ID%}&SESSION_ID={%SESSION_ID%}"
REJECTION_CATEGORIES = ("TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
                        "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER")
sleep = time.sleep  # tests replace it to see the pauses without waiting


class ProlificError(PlatformError):
    """A failed Prolific call, with a message a researcher can act on; ``status`` is the HTTP
    status (0: none came back), ``retry_after`` the seconds a 429 asked us to wait."""

    platform = "prolific"

    def __init__(self, kind: str, message: str, *, operation: str = "", code: str = "", status: int = 0,
                 retry_after: float | None = None):
        super().__init__(kind, message, operation=operation, code=code)
        self.status = status
        self.retry_after = retry_after


# --- the transport -----------------------------------------------------------------------


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _error_text(response) -> tuple[str, str]:
    """(message, code) from Prolific's error body ``{"error": {"title", "detail", "error_code"}}``."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}", ""
    error = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(error, dict):
        return str(error)[:300], ""
    detail = error.get("detail") or error.get("title") or f"HTTP {response.status_code}"
    if isinstance(detail, dict):
        detail = "; ".join(f"{name}: {' '.join(map(str, v)) if isinstance(v, list) else v}"
                           for name, v in detail.items())
    elif isinstance(detail, list):
        detail = " ".join(map(str, detail))
    return str(detail)[:500], str(error.get("error_code") or "")


def _failure(operation: str, response) -> ProlificError:
    status = response.status_code
    message, code = _error_text(response)
    if status == 429:
        after = _retry_after(response.headers.get("Retry-After"))
        return ProlificError("throttled", f"Prolific is throttling our requests ({message}).", operation=operation,
                             code=code, status=status, retry_after=after)
    if status >= 500:
        return ProlificError("unavailable", f"Prolific had an internal error ({message}).", operation=operation,
                             code=code, status=status)
    if status in (401, 403):
        return ProlificError("auth", f"Prolific refused our token ({message}): check PROLIFIC_TOKEN.",
                             operation=operation, code=code, status=status)
    if status == 404:
        return ProlificError("not_found", f"Prolific has no such object ({message}).", operation=operation,
                             code=code, status=status)
    return ProlificError("request", f"Prolific refused the request: {message}", operation=operation, code=code,
                         status=status)


def _url(path_or_url: str) -> str:
    base = settings.PROLIFIC_API_URL.rstrip("/")
    if path_or_url.startswith("/"):
        return base + path_or_url
    parts, own = urlsplit(path_or_url), urlsplit(base)
    if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):  # a next link never sends the token elsewhere
        raise ProlificError("request", f"Prolific answered a link to another host ({parts.netloc}).")
    return path_or_url


def _call(method: str, path: str, operation: str, *, body: dict | None = None, params: dict | None = None,
          retry: bool = True, retry_connection: bool = False) -> dict | None:
    """One Prolific call: the parsed JSON answer (None for an empty one)."""
    token = settings.PROLIFIC_TOKEN
    if not token:
        raise ProlificError("auth", "PROLIFIC_TOKEN is not set: no call was made.", operation=operation)
    headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
    attempts = MAX_ATTEMPTS if retry else 1
    for attempt in range(1, attempts + 1):
        try:
            response = requests.request(method, _url(path), json=body, params=params, headers=headers,
                                        timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), allow_redirects=False)
        except (requests.Timeout, requests.ConnectionError) as exc:
            error = ProlificError("connection", f"No answer from Prolific ({type(exc).__name__}); the call may or "
                                  "may not have gone through.", operation=operation, code=type(exc).__name__)
            if not retry_connection or attempt == attempts:
                raise error from exc
            pause = None
        else:
            if 200 <= response.status_code < 300:
                if not response.content:
                    return None
                try:
                    return response.json()
                except ValueError:
                    raise ProlificError("unavailable", "Prolific's answer is not JSON.", operation=operation,
                                        status=response.status_code) from None
            error = _failure(operation, response)
            if error.kind not in ("throttled", "unavailable") or attempt == attempts:
                raise error
            pause = error.retry_after
            if pause is not None and pause > RETRY_AFTER_CAP:
                raise error
        pause = pause if pause is not None else min(BACKOFF_FIRST * 2 ** (attempt - 1), BACKOFF_MAX)
        log.info("Prolific %s: attempt %d of %d failed (%s); again in %.1f s",
                 operation, attempt, attempts, error.kind, pause)
        sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


# --- money -------------------------------------------------------------------------------


def to_minor(amount: Decimal) -> int:
    """An amount in the major unit (1.50) as Prolific's minor units (150)."""
    return int((Decimal(amount) * 100).to_integral_value())


def _check_amount(amount) -> Decimal:
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        raise ValueError(f"{amount!r} is not an amount.") from None
    if not value.is_finite() or value <= 0 or value.as_tuple().exponent < -2:
        raise ValueError(f"A bonus is a positive amount with at most two decimals, not {amount!r}.")
    return value


# --- studies -----------------------------------------------------------------------------


def study_url_template(base_url: str) -> str:
    """``base_url`` with the parameters Prolific fills in for each participant."""
    return base_url + ("&" if "?" in base_url else "?") + STUDY_URL_PARAMETERS


def completion_url(code: str) -> str:
    """Where a participant goes when done: Prolific records the completion code."""
    return COMPLETION_URL + quote(code, safe="")


def create_study(*, name: str, internal_name: str, description: str, external_study_url: str, completion_code: str,
                 estimated_completion_time_minutes: int, reward_cents: int, total_available_places: int,
                 currency: str = "GBP", device_compatibility=("desktop",), block_group_id: str = "",
                 block_group_ids=(), allow_group_ids=()) -> dict:
    """A draft study (UNPUBLISHED). Completed submissions wait for review (MANUALLY_REVIEW).
    ``block_group_id``, ``block_group_ids``: participant groups whose members may not take it
    (``participant_group_blocklist``); ``allow_group_ids``: groups outside which no one may
    (``participant_group_allowlist``)."""
    if currency not in CURRENCIES:
        raise ValueError(f"Currency {currency!r} is not one of {sorted(CURRENCIES)}.")
    body = {
        "name": name, "internal_name": internal_name, "description": description,
        "external_study_url": external_study_url, "prolific_id_option": "url_parameters",
        "completion_codes": [{"code": completion_code, "code_type": "COMPLETED",
                              "actions": [{"action": "MANUALLY_REVIEW"}]}],
        "estimated_completion_time": int(estimated_completion_time_minutes), "reward": int(reward_cents),
        "total_available_places": int(total_available_places), "currency": currency,
        "device_compatibility": list(device_compatibility),
    }
    blocked = [group for group in (block_group_id, *block_group_ids) if group]
    filters = [{"filter_id": f"participant_group_{kind}", "selected_values": list(groups)}
               for kind, groups in (("blocklist", blocked), ("allowlist", allow_group_ids)) if groups]
    if filters:
        body["filters"] = filters
    return _call("POST", "/api/v1/studies/", "create_study", body=body)


def study_currency(study: dict) -> str | None:
    """The currency a study pays in, as Prolific answers it (its workspace's may decide it,
    whatever a create asked for); None when the answer does not say."""
    return study.get("presentment_currency_code") or study.get("currency_code") or study.get("currency") or None


def check_currency(study: dict, currency: str) -> None:
    """Refuse a study that pays in another currency than the batch was priced and budgeted
    in: its rewards and bonuses would be read in the wrong unit. The study stays a draft."""
    answered = study_currency(study)
    if answered and answered != currency:
        raise ProlificError("request", f"Study {study.get('id')} pays in {answered}, but the batch is priced in "
                            f"{currency}: publish the batch in {answered}, or from a Prolific workspace that pays "
                            f"in {currency}. The study was left an unpublished draft.", operation="create_study",
                            code="currency_mismatch")


def find_study(internal_name: str) -> dict | None:
    """Our study whose ``internal_name`` is this one, or None: Prolific's list of studies
    (``GET /api/v1/studies/``, every page), matched here (the list filters by status only).
    A create whose answer was lost left such a study: looked up, it is never made twice."""
    path = "/api/v1/studies/"
    while path:
        page = _call("GET", path, "list_studies", retry_connection=True) or {}
        found = next((study for study in page.get("results") or [] if study.get("internal_name") == internal_name),
                     None)
        if found is not None:
            return found
        path = ((page.get("_links") or {}).get("next") or {}).get("href")
    return None


def _transition_study(study_id: str, action: str) -> dict:
    return _call("POST", f"/api/v1/studies/{quote(study_id)}/transition/", f"{action.lower()}_study",
                 body={"action": action}, retry_connection=True)


def publish_study(study_id: str) -> dict:
    return _transition_study(study_id, "PUBLISH")


def stop_study(study_id: str) -> dict:
    return _transition_study(study_id, "STOP")


def get_study(study_id: str) -> dict:
    return _call("GET", f"/api/v1/studies/{quote(study_id)}/", "get_study", retry_connection=True)


# --- submissions -------------------------------------------------------------------------


def list_submissions(study_id: str) -> Iterator[dict]:
    """Every submission of the study, following the answer's ``_links.next`` pages."""
    path = f"/api/v1/studies/{quote(study_id)}/submissions/"
    while path:
        page = _call("GET", path, "list_submissions", retry_connection=True) or {}
        yield from page.get("results", [])
        path = ((page.get("_links") or {}).get("next") or {}).get("href")


def get_submission(submission_id: str, *, retry: bool = True) -> dict:
    """One submission: its ``study_id``, ``participant``, ``status`` (RESERVED and ACTIVE while
    the participant works), ``bonus_payments``; a ``not_found`` error for an id Prolific does
    not have. ``retry=False``: one attempt, for a page a participant waits on."""
    return _call("GET", f"/api/v1/submissions/{quote(submission_id)}/", "get_submission", retry=retry,
                 retry_connection=retry)


def _transition_submission(submission_id: str, body: dict, operation: str) -> dict:
    # Prolific: the same transition sent twice is ignored the second time, so a lost answer is retried.
    return _call("POST", f"/api/v1/submissions/{quote(submission_id)}/transition/", operation, body=body,
                 retry_connection=True)


def approve_submission(submission_id: str) -> dict:
    return _transition_submission(submission_id, {"action": "APPROVE"}, "approve_submission")


def reject_submission(submission_id: str, message: str, category: str) -> dict:
    """Reject: the participant reads ``message`` (at least 100 characters); ``category`` is one
    of ``REJECTION_CATEGORIES``."""
    if len((message or "").strip()) < MIN_REJECTION_MESSAGE:
        raise ValueError(f"Prolific needs a rejection message of at least {MIN_REJECTION_MESSAGE} characters "
                         f"(this one has {len((message or '').strip())}).")
    if category not in REJECTION_CATEGORIES:
        raise ValueError(f"Rejection category {category!r} is not one of {', '.join(REJECTION_CATEGORIES)}.")
    return _transition_submission(submission_id, {"action": "REJECT", "message": message,
                                                  "rejection_category": category}, "reject_submission")


# --- bonuses -----------------------------------------------------------------------------


def setup_bonus(study_id: str, rows: list[tuple[str, Decimal]]) -> dict:
    """Set up (not pay) a bulk bonus: one ``(participant id, amount)`` row each, amounts in the study
    currency's major unit. The answer: ``id`` (to pay), ``amount``, ``fees``, ``total_amount`` in
    minor units. Sent once: a lost answer leaves at most an unpaid set-up behind."""
    if not rows:
        raise ValueError("A bulk bonus needs at least one row.")
    seen, lines = set(), []
    for participant_id, amount in rows:
        if not participant_id or any(c in participant_id for c in ",\n\r "):
            raise ValueError(f"{participant_id!r} is not a Prolific participant id.")
        if participant_id in seen:
            raise ValueError(f"Participant {participant_id} is in the rows twice: add the amounts up.")
        seen.add(participant_id)
        lines.append(f"{participant_id},{_check_amount(amount):.2f}")
    return _call("POST", "/api/v1/submissions/bonus-payments/", "setup_bonus",
                 body={"study_id": study_id, "csv_bonuses": "\n".join(lines) + "\n"})


def pay_bonus(bulk_id: str) -> None:
    """Pay a set-up bulk bonus. Sent exactly once, never retried here: each call pays again.
    ``connection`` or ``unavailable``: the payment may have been made; reconcile with
    ``bonus_payment_status`` before anything else, never call again blindly."""
    _call("POST", f"/api/v1/bulk-bonus-payments/{quote(bulk_id)}/pay/", "pay_bonus", retry=False)


def bonuses_paid(study_id: str, participant_ids) -> dict[str, list[int]]:
    """What Prolific shows as paid to each participant on this study: the ``bonus_payments`` of
    their submissions (minor units), read submission by submission."""
    wanted = set(participant_ids)
    paid: dict[str, list[int]] = {pid: [] for pid in wanted}
    for submission in list_submissions(study_id):
        pid = submission.get("participant_id") or submission.get("participant")
        if pid in wanted:
            detail = get_submission(submission["id"])
            paid[pid].extend(int(round(float(a))) for a in detail.get("bonus_payments") or [])
    return paid


@dataclass
class BonusPaymentStatus:
    """``state``: ``paid`` (every row shows a new payment of its amount), ``not_seen`` (none does:
    not paid, or Prolific has not processed it yet: it pays "in the following minutes"),
    ``partial`` (some do). ``paid_twice``: participants showing the amount more than once anew."""

    state: str
    seen: dict[str, list[int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    paid_twice: list[str] = field(default_factory=list)


def bonus_payment_status(study_id: str, rows: list[tuple[str, Decimal]], *,
                         paid_before: Mapping[str, list[int]] | None = None) -> BonusPaymentStatus:
    """Whether the bulk bonus of ``rows`` shows as paid. Prolific has no read of a bulk bonus; what
    it shows is each submission's ``bonus_payments``. ``paid_before``: what ``bonuses_paid`` gave
    before the pay call (a participant's earlier bonuses on the study are not counted)."""
    seen = bonuses_paid(study_id, [pid for pid, _ in rows])
    missing, twice = [], []
    for pid, amount in rows:
        new = Counter(seen[pid]) - Counter((paid_before or {}).get(pid, []))
        count = new[to_minor(_check_amount(amount))]
        if count == 0:
            missing.append(pid)
        elif count > 1:
            twice.append(pid)
    state = "not_seen" if len(missing) == len(rows) else "partial" if missing else "paid"
    return BonusPaymentStatus(state, seen, missing, twice)


# --- blocking: a participant group used as the studies' blocklist ----------------------------


def create_participant_group(name: str, *, workspace_id: str, description: str = "") -> dict:
    body = {"name": name, "workspace_id": workspace_id}
    if description:
        body["description"] = description
    return _call("POST", "/api/v1/participant-groups/", "create_participant_group", body=body)


def group_participants(group_id: str) -> list[str]:
    page = _call("GET", f"/api/v1/participant-groups/{quote(group_id)}/participants/", "group_participants",
                 retry_connection=True) or {}
    return [row.get("participant_id") for row in page.get("results") or []]


def block_participant(group_id: str, participant_id: str) -> None:
    """Add to the blocklist group (Prolific ignores one already there)."""
    _call("POST", f"/api/v1/participant-groups/{quote(group_id)}/participants/", "block_participant",
          body={"participant_ids": [participant_id]}, retry_connection=True)


def unblock_participant(group_id: str, participant_id: str) -> None:
    """Remove from the blocklist group (Prolific ignores one not there)."""
    _call("DELETE", f"/api/v1/participant-groups/{quote(group_id)}/participants/", "unblock_participant",
          body={"participant_ids": [participant_id]}, retry_connection=True)
