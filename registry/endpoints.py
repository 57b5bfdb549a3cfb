# Long on purpose: one endpoint call's whole path (its key, its address, its slot and rate, its reservation,
# the answer and its errors) read top to bottom; what calls cost is registry/endpoint_budgets.py.
"""Models behind endpoints: registering them, asking them, counting what they cost,
checking their health, and a black-box "Why?".

An endpoint is a ``ModelVersion`` without an artifact and an ``Endpoint`` row that says
how to reach it (``registry.models``). The protocols' clients are ``ml.endpoints``
(no Django); this module adds what needs the database and the settings:

- the key: ``Endpoint.secret_env`` names a key of the operator's map
  (``ENDPOINT_SECRETS``: its environment variable and the hosts it may be sent to),
  never any other variable or setting. It is read in the process that calls, sent only
  to its bound hosts (checked at each call, before anything is sent), never stored,
  logged or returned. Only a superuser picks a key or sets prices; a researcher's
  change of the URL or the model clears the key;
- where requests go (``network_policy``): every connection's address checked after
  resolution and that address connected to (``ml.endpoints.network``), internal
  addresses refused unless on ``ENDPOINT_ALLOWED_HOSTS``, plain http refused with
  DEBUG off except for those hosts;
- bounds across every worker: at most ``max_concurrency`` requests in flight
  (``core.slots``, the Redis slots the explanation lane uses; per process without a
  Redis) and at most ``rate_limit_per_minute`` requests a minute (the shared cache);
- cost (``registry.endpoint_budgets``): the most a call may cost is reserved against
  the endpoint's budget before it is sent and settled when it ends; a call the budget
  cannot cover is refused with a clear message before it is made. An endpoint that
  uses a key is not asked before a superuser has priced it;
- errors: whatever goes wrong (timeouts, 429s, 5xx, connections that fail or drop,
  after the retries that fit the wait budget; refusals; refused addresses; answers in
  the wrong shape) is a 503 (``EndpointUnavailable``) that says nothing was stored, in
  words a researcher can act on, never with the endpoint's own text.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

import ml
from core import slots
from core.errors import Conflict, Forbidden, InvalidInput, Unavailable
from ml import endpoints as remote
from ml.endpoints.network import host_and_port, host_listed

from .endpoint_budgets import (
    PRICES,
    EndpointBudgetRefused,
    amount_field,
    answered_cost,
    budget_spent,
    cost_of,
    priced,
    reserve,
    settle,
)
from .models import Endpoint, ModelVersion, endpoint_of  # noqa: F401 (endpoint_of re-exported)
from .services import check_new_model_name

log = logging.getLogger(__name__)

TIMEOUT_RANGE = (0.1, 120.0)
CONCURRENCY_MAX = 64
SLOT_WAIT = 0.05  # seconds between tries for a free slot


class EndpointUnavailable(Unavailable):
    """The model behind an endpoint gave no usable answer (503, nothing stored)."""

    code = "endpoint_unavailable"


# --- registering ----------------------------------------------------------------------


def network_policy() -> remote.NetworkPolicy:
    """Where this server's requests to endpoints may go: ``ENDPOINT_ALLOWED_HOSTS`` skip
    the address check, and plain http is refused to every other host with DEBUG off."""
    return remote.NetworkPolicy(allowed_hosts=tuple(settings.ENDPOINT_ALLOWED_HOSTS), https_only=not settings.DEBUG)


def key_names() -> list[str]:
    """The names of the keys an endpoint may use (the operator's ``ENDPOINT_SECRETS``)."""
    return sorted(settings.ENDPOINT_SECRETS)


def _check_key(name: str, url: str) -> None:
    """``name`` is a key of the map, and ``url``'s host one it may be sent to."""
    keys = settings.ENDPOINT_SECRETS
    if name not in keys:
        if not keys:
            raise InvalidInput.field("secret_env", "This server has no keys for endpoints (its operators' key map, "
                                                   "ENDPOINT_SECRETS, is empty): leave it empty.")
        raise InvalidInput.field("secret_env", f"Not a key of this server: one of {', '.join(key_names())} (the "
                                               "operators' key map, ENDPOINT_SECRETS), or empty for none.")
    host, port = host_and_port(url)
    if not host_listed(keys[name]["hosts"], host, port):
        raise InvalidInput.field("secret_env", f"The key {name!r} is sent only to {', '.join(keys[name]['hosts'])}; "
                                               f"this URL's host is {host}.")


def check_fields(protocol, url, model, secret_env, timeout_s, max_concurrency, rate_limit_per_minute) -> dict:
    """The endpoint's fields, checked (``InvalidInput`` naming the field that is wrong)."""
    if protocol not in remote.PROTOCOLS:
        raise InvalidInput.field("protocol", f"Must be one of {', '.join(remote.PROTOCOLS)}.")
    if not isinstance(url, str) or len(url) > 500:
        raise InvalidInput.field("url", "Must be an http(s) URL of at most 500 characters.")
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise InvalidInput.field("url", "Must be an http(s) URL.") from None
    try:
        network_policy().check_url(url)  # its scheme and a literal address; a name is checked when connecting
    except remote.EndpointRefused as exc:
        raise InvalidInput.field("url", exc.message) from None
    model = (model or "").strip()
    if len(model) > 200 or "\x00" in model or (protocol == "v2" and not model):
        raise InvalidInput.field("model", "The v2 protocol needs the model's name at the endpoint; a model's name "
                                          "has at most 200 characters.")
    secret_env = secret_env.strip() if isinstance(secret_env, str) else ""
    if secret_env:
        _check_key(secret_env, url)
    try:
        timeout_s = float(timeout_s)
    except (TypeError, ValueError):
        raise InvalidInput.field("timeout_s", "Must be a number of seconds.") from None
    if not TIMEOUT_RANGE[0] <= timeout_s <= TIMEOUT_RANGE[1]:
        raise InvalidInput.field("timeout_s", f"Must be from {TIMEOUT_RANGE[0]} to {TIMEOUT_RANGE[1]} seconds.")
    if not isinstance(max_concurrency, int) or not 1 <= max_concurrency <= CONCURRENCY_MAX:
        raise InvalidInput.field("max_concurrency", f"Must be a whole number from 1 to {CONCURRENCY_MAX}.")
    if rate_limit_per_minute is not None and (not isinstance(rate_limit_per_minute, int)
                                              or not 1 <= rate_limit_per_minute <= 100000):
        raise InvalidInput.field("rate_limit_per_minute", "Must be a whole number from 1 to 100000, or empty.")
    return {"protocol": protocol, "url": url, "remote_model": model, "secret_env": secret_env,
            "timeout_s": timeout_s, "max_concurrency": max_concurrency,
            "rate_limit_per_minute": rate_limit_per_minute}


def _superuser(user) -> bool:
    """``user`` may do a superuser's part: a superuser, or None (the operator at the
    server's shell: ``manage.py`` commands, the demo's set-up)."""
    return user is None or user.is_superuser


@transaction.atomic
def register_endpoint(task, *, name, protocol, url, model="", secret_env="", timeout_s=10.0, max_concurrency=4,
                      rate_limit_per_minute=None, price_per_call=None, price_per_1k_prompt_tokens=None,
                      price_per_1k_completion_tokens=None, is_public=True, user=None) -> ModelVersion:
    """A new model version of ``task`` served at ``url``: ready to be evaluated, made
    a target, ranked. Nothing is called here (the health check before a promotion does).
    Prices are a superuser's (``user`` None: the operator, e.g. ``manage.py``)."""
    fields = check_fields(protocol, url, model, secret_env, timeout_s, max_concurrency, rate_limit_per_minute)
    prices = {price: amount_field(price, value) for price, value in zip(
        PRICES, (price_per_call, price_per_1k_prompt_tokens, price_per_1k_completion_tokens), strict=True)}
    if not _superuser(user) and any(value is not None for value in prices.values()):
        raise Forbidden("Only a superuser sets an endpoint's prices: register it without them, and a superuser "
                        "prices it.")
    name = check_new_model_name(task, name)
    version = ModelVersion.objects.create(
        task=task, name=name, artifact_path="", sha256="", backbone=f"endpoint ({protocol})",
        training_data={"endpoint": {"protocol": protocol, "model": fields["remote_model"]}},
        is_public=is_public, created_by=user)
    Endpoint.objects.create(model_version=version, **fields, **prices)
    return version


def update_endpoint(endpoint: Endpoint, *, user=None, **changes) -> Endpoint:
    """Change how the endpoint is reached or priced (its protocol stays): the same checks
    as registering. Its key and prices are a superuser's (``user`` None: the operator);
    anyone else may clear the key, and their change of the URL or the model clears it
    (the key's price and hosts were a superuser's choice for that model there). A new
    URL or model clears ``healthy_at``. The budgets are ``set_round_budget``'s and
    ``set_evaluation_budget``'s."""
    unknown = set(changes) - {"url", "remote_model", "secret_env", "timeout_s", "max_concurrency",
                              "rate_limit_per_minute", *PRICES}
    if unknown:
        raise InvalidInput.field(sorted(unknown)[0], "Cannot be changed here.")
    current = {"url": endpoint.url, "remote_model": endpoint.remote_model, "secret_env": endpoint.secret_env,
               "timeout_s": endpoint.timeout_s, "max_concurrency": endpoint.max_concurrency,
               "rate_limit_per_minute": endpoint.rate_limit_per_minute}
    proposed = {**current, **{k: v for k, v in changes.items() if k in current}}
    proposed["secret_env"] = (proposed["secret_env"] or "").strip()
    prices = {name: amount_field(name, changes[name]) for name in PRICES if name in changes}
    prices = {name: value for name, value in prices.items() if value != getattr(endpoint, name)}
    moved = proposed["url"] != endpoint.url or (proposed["remote_model"] or "").strip() != endpoint.remote_model
    if not _superuser(user):
        if proposed["secret_env"] not in ("", endpoint.secret_env):
            raise Forbidden("Only a superuser chooses an endpoint's key; you may clear it.")
        if prices:
            raise Forbidden("Only a superuser sets an endpoint's prices.")
        if moved:
            proposed["secret_env"] = ""  # the key went with the URL and model a superuser let it go to
    # The key is checked where it is set or goes to a new URL or model; one left as it was
    # (a row older than the key map, say) is checked, and refused, when the endpoint is asked.
    key = proposed["secret_env"]
    checked_key = key if key != endpoint.secret_env or moved else ""
    fields = check_fields(endpoint.protocol, proposed["url"], proposed["remote_model"], checked_key,
                          proposed["timeout_s"], proposed["max_concurrency"], proposed["rate_limit_per_minute"])
    fields.pop("protocol")
    fields["secret_env"] = key
    fields.update(prices)
    if moved:
        fields["healthy_at"] = None
    for name, value in fields.items():
        setattr(endpoint, name, value)
    endpoint.save(update_fields=list(fields))
    return endpoint


# --- asking ------------------------------------------------------------------------------


def _secret(endpoint: Endpoint) -> tuple[str | None, tuple[str, ...]]:
    """The key's value and the hosts it is bound to, checked now (the map may have
    changed since the endpoint was registered), or ``EndpointUnavailable`` before
    anything is sent."""
    name = endpoint.secret_env
    if not name:
        return None, ()
    label = endpoint.model_version.name
    entry = settings.ENDPOINT_SECRETS.get(name)
    if entry is None:
        raise EndpointUnavailable(f"Endpoint model {label} names the key {name!r}, which is not in this server's key "
                                  "map (ENDPOINT_SECRETS): it is not asked until a superuser picks a key of the map "
                                  "or clears it. Nothing was stored.", retry_after=3600)
    host, port = host_and_port(endpoint.url)
    if not host_listed(entry["hosts"], host, port):
        raise EndpointUnavailable(f"The key {name!r} of endpoint model {label} is not sent to {host}: it is bound to "
                                  "other hosts. Nothing was stored.", retry_after=3600)
    if not priced(endpoint):
        raise EndpointUnavailable(f"Endpoint model {label} uses the key {name!r} but has no price yet: it is not "
                                  "asked until a superuser prices it, so that its calls count against its budget. "
                                  "Nothing was stored.", retry_after=3600)
    value = os.environ.get(entry["env"])
    if not value:
        raise EndpointUnavailable(f"The key {name!r} of endpoint model {label} is not configured on this server (its "
                                  "environment variable is unset); nothing was stored.", retry_after=60)
    return value, entry["hosts"]


def client(endpoint: Endpoint, config) -> remote.Endpoint:
    """The ``ml.endpoints.Endpoint`` for this row and task config (the key read now)."""
    options = config.endpoint_models
    secret, hosts = _secret(endpoint)
    return remote.Endpoint(protocol=endpoint.protocol, url=endpoint.url, model=endpoint.remote_model,
                           secret=secret, secret_hosts=hosts, network=network_policy(), timeout=endpoint.timeout_s,
                           concurrency=1, prompt_template=options.get("prompt_template"),
                           label_descriptions={label["name"]: label.get("description", "")
                                               for label in config.labels})


def spec_of(config) -> ml.TaskSpec:
    return ml.TaskSpec.from_dict(config.ml_spec_dict())


_local_slots: dict[tuple[int, int], threading.BoundedSemaphore] = {}
_local_slots_lock = threading.Lock()


@contextmanager
def _slot(endpoint: Endpoint, wait: float):
    """One of the endpoint's ``max_concurrency`` request slots, across every worker
    (``core.slots`` on the inference Redis; a per-process semaphore without one),
    waiting up to ``wait`` seconds for it."""
    deadline = time.monotonic() + wait
    url = settings.INFERENCE_REPLY_URL
    if not url:
        with _local_slots_lock:
            semaphore = _local_slots.setdefault((endpoint.pk, endpoint.max_concurrency),
                                                threading.BoundedSemaphore(endpoint.max_concurrency))
        if not semaphore.acquire(timeout=max(wait, 0)):
            raise _busy(endpoint)
        try:
            yield
        finally:
            semaphore.release()
        return
    while True:
        try:
            with slots.slot(url, f"endpoint:{endpoint.pk}", endpoint.max_concurrency,
                            ttl=endpoint.timeout_s * 3 + 5):
                yield
            return
        except slots.Full:
            if time.monotonic() + SLOT_WAIT > deadline:
                raise _busy(endpoint) from None
            time.sleep(SLOT_WAIT)


def _busy(endpoint: Endpoint) -> EndpointUnavailable:
    return EndpointUnavailable(f"Endpoint model {endpoint.model_version.name} already has "
                               f"{endpoint.max_concurrency} requests in flight; nothing was stored. Try again in a "
                               "few seconds.", retry_after=2)


def _take_rate(endpoint: Endpoint, requests: int) -> None:
    """Count ``requests`` against the per-minute limit (the shared cache), or refuse."""
    limit = endpoint.rate_limit_per_minute
    if not limit:
        return
    minute = int(time.time() // 60)
    key = f"dynabench:endpoint-rate:{endpoint.pk}:{minute}"
    cache.add(key, 0, 90)
    try:
        used = cache.incr(key, requests)
    except ValueError:  # expired between add and incr
        cache.set(key, requests, 90)
        used = requests
    if used > limit:
        raise EndpointUnavailable(f"Endpoint model {endpoint.model_version.name} is at its limit of {limit} requests "
                                  "a minute; nothing was stored.", retry_after=max(1, 60 - int(time.time()) % 60))


def _unavailable(endpoint: Endpoint, exc: Exception, secret: str | None) -> Unavailable:
    message = str(getattr(exc, "message", exc))
    if secret:
        message = message.replace(secret, "[secret]")
    retry = getattr(exc, "retry_after", None)
    return EndpointUnavailable(f"Endpoint model {endpoint.model_version.name} could not answer: "
                               f"{message.removesuffix('.')}. Nothing was stored.",
                               retry_after=max(1, math.ceil(retry)) if retry else 5)


def predict(endpoint: Endpoint, config, rows: list[dict], *, round_id: int | None = None,
            budget: float | None = None) -> list[dict]:
    """The endpoint's predictions for ``rows`` (``ml`` inputs), in ``ml.predict``'s
    shape with ``endpoint`` (raw answer, its sha256, latency, tokens). Reserves the most
    the requests may cost against the budget for ``round_id`` before any is sent, holds
    a request slot per request in flight, counts calls, tokens and cost (each request
    settled by what it did: answered, failed after the endpoint may have billed, or
    failed before), and turns every failure into a 503 that says nothing was stored."""
    if not rows:
        return []
    budget = settings.INFERENCE_TIMEOUT if budget is None else budget
    spec = spec_of(config)
    try:
        rows = [spec.validate_inputs(r) for r in rows]
    except ml.InputError as exc:
        raise InvalidInput.field("inputs", exc.message) from None
    target = client(endpoint, config)
    chunk = remote.V2_BATCH if endpoint.protocol == "v2" else 1
    parts = [rows[i:i + chunk] for i in range(0, len(rows), chunk)]
    most = [remote.most_usage(target, spec, part) for part in parts]
    holds = [cost_of(endpoint, **m) for m in most]
    held = sum(holds, Decimal(0))
    reserve(endpoint, round_id, held)
    deadline = time.monotonic() + budget

    def ask(index: int) -> tuple[list[dict] | None, Exception | None]:
        left = deadline - time.monotonic()
        try:
            with _slot(endpoint, wait=max(0.0, min(left, budget))):
                _take_rate(endpoint, most[index]["requests"])
                answers = remote.predict(target, spec, parts[index], budget=max(0.1, deadline - time.monotonic()))
            return answers, None
        except (remote.EndpointError, EndpointUnavailable) as exc:  # the endpoint's failure, or no slot or rate
            return None, exc

    cost = held  # were the outcome unknown (an error of ours), the most the calls could cost stays charged
    counts = {}
    try:
        if len(parts) == 1:
            outcomes = [ask(0)]
        else:
            with ThreadPoolExecutor(max_workers=min(endpoint.max_concurrency, len(parts))) as pool:
                outcomes = list(pool.map(ask, range(len(parts))))
        cost, counts = Decimal(0), {"calls": 0, "failed": 0, "unparseable": 0, "prompt_tokens": 0,
                                    "completion_tokens": 0}
        for (answers, error), most_part, hold in zip(outcomes, most, holds, strict=True):
            if error is None:
                charged, prompt, completion = answered_cost(endpoint, answers, most_part)
                cost += charged
                counts["calls"] += most_part["requests"]
                counts["prompt_tokens"] += prompt
                counts["completion_tokens"] += completion
                counts["unparseable"] += sum(1 for a in answers if a.get("unparseable"))
            elif isinstance(error, remote.EndpointError):
                counts["failed"] += 1
                if error.billable:  # answered in the wrong shape, or timed out once sent: it may have billed
                    cost += hold
    finally:
        settle(endpoint, round_id, held=held, cost=cost, **counts)
    for _, error in outcomes:
        if isinstance(error, remote.EndpointError):
            log.warning("endpoint %s failed: %s", endpoint.pk, type(error).__name__)
            raise _unavailable(endpoint, error, target.secret) from None
        if error is not None:
            raise error
    return [answer for answers, _ in outcomes for answer in answers]


# --- the health check, and "Why?" -----------------------------------------------------------


def probe_rows(config) -> list[dict]:
    """The task's probe examples as ``ml`` rows, or one neutral probe per field."""
    kind = config.kind
    probes = config.endpoint_models.get("probe_examples") or []
    if probes:
        return [kind.ml_inputs(p) for p in probes]
    if kind.ml_kind == "extractive_qa":
        return [{"passage": "The library opens at nine in the morning.", "question": "When does the library open?"}]
    return [{name: "This is a short probe sentence." for name in kind.ml_field_names().values()}]


def health_check(endpoint: Endpoint, config) -> dict:
    """Ask the task's probe examples once, within the endpoint's timeout: every
    answer in the protocol's shape, and readable (a label of the task, a span of the
    passage). Passing stamps ``healthy_at``; failing raises ``Conflict`` saying why,
    and a spent evaluation budget ``EndpointBudgetRefused`` before any call."""
    rows = probe_rows(config)
    reason = budget_spent(endpoint, None)  # counted outside rounds, against the evaluation budget
    if reason:
        raise EndpointBudgetRefused(f"The health check of {endpoint.model_version.name} was not run. {reason}")
    started = time.perf_counter()
    try:
        predictions = predict(endpoint, config, rows, budget=endpoint.timeout_s)
    except Unavailable as exc:
        raise Conflict(f"The health check of {endpoint.model_version.name} failed: {exc.message}") from None
    elapsed = time.perf_counter() - started
    unreadable = sum(1 for p in predictions if p.get("unparseable"))
    if unreadable:  # what it said is not repeated here: the check's answer says only what to fix
        raise Conflict(f"The health check of {endpoint.model_version.name} failed: {unreadable} of its {len(rows)} "
                       "answers are not in the task's answer format (a label of the task, or a span of the passage).")
    endpoint.healthy_at = timezone.now()
    endpoint.save(update_fields=["healthy_at"])
    return {"probes": len(rows), "seconds": round(elapsed, 3), "healthy_at": endpoint.healthy_at.isoformat()}


def explain(endpoint: Endpoint, config, inputs: dict, target=None, *, round_id: int | None = None) -> dict:
    """A black-box "Why?" (leave one word out; ``occlusion_max_calls`` calls at most),
    or ``Conflict`` when the task config offers none for endpoint models."""
    max_calls = config.endpoint_models.get("occlusion_max_calls") or 0
    if max_calls < 2:
        raise Conflict(f"Explanations are not available for endpoint model {endpoint.model_version.name} "
                       "on this task.")
    spec = spec_of(config)

    def ask(rows):
        return predict(endpoint, config, rows, round_id=round_id, budget=settings.INFERENCE_TIMEOUT)

    try:
        return remote.explain_by_occlusion(ask, spec, inputs, target, max_calls=max_calls)
    except ml.InputError as exc:
        raise InvalidInput.field("inputs", exc.message) from None
