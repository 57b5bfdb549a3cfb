"""Models behind endpoints: registering them, asking them, counting what they cost,
checking their health, and a black-box "Why?".

An endpoint is a ``ModelVersion`` without an artifact and an ``Endpoint`` row that says
how to reach it (``registry.models``). The protocols' clients are ``ml.endpoints``
(no Django); this module adds what needs the database and the settings:

- the secret: ``Endpoint.secret_env`` names an environment variable (or a setting)
  read in the process that calls; the value is never stored, logged or returned;
- bounds across every worker: at most ``max_concurrency`` requests in flight
  (``core.slots``, the Redis slots the explanation lane uses; per process without a
  Redis) and at most ``rate_limit_per_minute`` requests a minute (the shared cache);
- cost: calls, tokens and their price per endpoint and round (``EndpointUsage``),
  against the budgets a superuser sets: ``round_budget`` for each round's annotation
  calls, ``evaluation_budget`` for every call outside rounds (evaluations and health
  checks, in all); once a budget is spent the next call is refused with a clear
  message before it is made;
- errors: whatever goes wrong (timeouts, 429s, 5xx, dropped connections, after the
  retries that fit the wait budget; refusals; answers in the wrong shape) is a 503
  (``EndpointUnavailable``) that says nothing was stored.
"""

from __future__ import annotations

import logging
import math
import os
import re
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
from django.db.models import F
from django.utils import timezone

import ml
from core import slots
from core.errors import Conflict, Forbidden, InvalidInput, Unavailable
from ml import endpoints as remote

from .models import Endpoint, EndpointUsage, ModelVersion, endpoint_of  # noqa: F401 (endpoint_of re-exported)
from .services import check_new_model_name

log = logging.getLogger(__name__)

SECRET_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
TIMEOUT_RANGE = (0.1, 120.0)
CONCURRENCY_MAX = 64
SLOT_WAIT = 0.05  # seconds between tries for a free slot


class EndpointUnavailable(Unavailable):
    """The model behind an endpoint gave no usable answer (503, nothing stored)."""

    code = "endpoint_unavailable"


class EndpointBudgetSpent(Unavailable):
    """The endpoint's budget (the round's, or outside rounds) is spent: it answers no more."""

    code = "endpoint_budget_spent"


class EndpointBudgetRefused(Conflict):
    """A health check or an evaluation not started because the endpoint's budget
    outside rounds is spent (409: the researcher's request clashes with the budget)."""

    code = "endpoint_budget_spent"


# --- registering ----------------------------------------------------------------------


def _decimal(name: str, value) -> Decimal | None:
    if value in (None, ""):
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise InvalidInput.field(name, "Must be a number.") from None
    if not number.is_finite() or number < 0 or number > Decimal("1000000"):
        raise InvalidInput.field(name, "Must be a number from 0 to 1000000.")
    return number


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
    model = (model or "").strip()
    if len(model) > 200 or "\x00" in model or (protocol == "v2" and not model):
        raise InvalidInput.field("model", "The v2 protocol needs the model's name at the endpoint; a model's name "
                                          "has at most 200 characters.")
    secret_env = (secret_env or "").strip()
    if secret_env and not SECRET_ENV.fullmatch(secret_env):
        raise InvalidInput.field("secret_env", "Must be the NAME of an environment variable (letters, digits, _), "
                                               "never the secret itself.")
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


@transaction.atomic
def register_endpoint(task, *, name, protocol, url, model="", secret_env="", timeout_s=10.0, max_concurrency=4,
                      rate_limit_per_minute=None, price_per_call=None, price_per_1k_prompt_tokens=None,
                      price_per_1k_completion_tokens=None, is_public=True, user=None) -> ModelVersion:
    """A new model version of ``task`` served at ``url``: ready to be evaluated, made
    a target, ranked. Nothing is called here (the health check before a promotion does)."""
    fields = check_fields(protocol, url, model, secret_env, timeout_s, max_concurrency, rate_limit_per_minute)
    prices = {"price_per_call": _decimal("price_per_call", price_per_call),
              "price_per_1k_prompt_tokens": _decimal("price_per_1k_prompt_tokens", price_per_1k_prompt_tokens),
              "price_per_1k_completion_tokens": _decimal("price_per_1k_completion_tokens",
                                                         price_per_1k_completion_tokens)}
    name = check_new_model_name(task, name)
    version = ModelVersion.objects.create(
        task=task, name=name, artifact_path="", sha256="", backbone=f"endpoint ({protocol})",
        training_data={"endpoint": {"protocol": protocol, "model": fields["remote_model"]}},
        is_public=is_public, created_by=user)
    Endpoint.objects.create(model_version=version, **fields, **prices)
    return version


PRICES = ("price_per_call", "price_per_1k_prompt_tokens", "price_per_1k_completion_tokens")


def update_endpoint(endpoint: Endpoint, **changes) -> Endpoint:
    """Change how the endpoint is reached or priced (its protocol stays): the same checks
    as registering. The round budget is ``set_round_budget``'s (superusers)."""
    unknown = set(changes) - {"url", "remote_model", "secret_env", "timeout_s", "max_concurrency",
                              "rate_limit_per_minute", *PRICES}
    if unknown:
        raise InvalidInput.field(sorted(unknown)[0], "Cannot be changed here.")
    current = {"url": endpoint.url, "remote_model": endpoint.remote_model, "secret_env": endpoint.secret_env,
               "timeout_s": endpoint.timeout_s, "max_concurrency": endpoint.max_concurrency,
               "rate_limit_per_minute": endpoint.rate_limit_per_minute, **changes}
    fields = check_fields(endpoint.protocol, current["url"], current["remote_model"], current["secret_env"],
                          current["timeout_s"], current["max_concurrency"], current["rate_limit_per_minute"])
    fields.pop("protocol")
    for name in PRICES:
        if name in changes:
            fields[name] = _decimal(name, changes[name])
    for name, value in fields.items():
        setattr(endpoint, name, value)
    endpoint.save(update_fields=list(fields))
    return endpoint


def _set_budget(endpoint: Endpoint, field: str, amount, user) -> Endpoint:
    if user is None or not user.is_superuser:
        raise Forbidden("Only a superuser sets an endpoint's budget.")
    setattr(endpoint, field, _decimal(field, amount))
    endpoint.save(update_fields=[field])
    return endpoint


def set_round_budget(endpoint: Endpoint, amount, user) -> Endpoint:
    """Set what the endpoint's calls may cost per round (None: no limit); superusers only."""
    return _set_budget(endpoint, "round_budget", amount, user)


def set_evaluation_budget(endpoint: Endpoint, amount, user) -> Endpoint:
    """Set what the endpoint's calls outside rounds (evaluations, health checks) may
    cost in all (None: no limit); superusers only."""
    return _set_budget(endpoint, "evaluation_budget", amount, user)


# --- asking ------------------------------------------------------------------------------


def _secret(endpoint: Endpoint) -> str | None:
    name = endpoint.secret_env
    if not name:
        return None
    value = os.environ.get(name) or getattr(settings, name, None)
    if not value or not isinstance(value, str):
        raise EndpointUnavailable(f"The key of endpoint model {endpoint.model_version.name} is not configured on "
                                  f"this server (the variable {name} is unset); nothing was stored.", retry_after=60)
    return value


def client(endpoint: Endpoint, config) -> remote.Endpoint:
    """The ``ml.endpoints.Endpoint`` for this row and task config (the secret read now)."""
    options = config.endpoint_models
    return remote.Endpoint(protocol=endpoint.protocol, url=endpoint.url, model=endpoint.remote_model,
                           secret=_secret(endpoint), timeout=endpoint.timeout_s,
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


def usage_of(endpoint: Endpoint, round_id: int | None) -> EndpointUsage:
    usage, _ = EndpointUsage.objects.get_or_create(endpoint=endpoint, round_id=round_id)
    return usage


def budget_spent(endpoint: Endpoint, round_id: int | None) -> str | None:
    """Why the endpoint may make no more calls for ``round_id`` (None: outside rounds,
    i.e. evaluations and health checks), or None while its budget there is not spent."""
    limit = endpoint.round_budget if round_id is not None else endpoint.evaluation_budget
    if limit is None:
        return None
    spent = (EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).values_list("cost", flat=True)
             .first()) or Decimal(0)
    if spent < limit:
        return None
    name = endpoint.model_version.name
    if round_id is not None:
        return (f"The budget of endpoint model {name} for this round ({limit}) is spent; it answers no more until "
                "a superuser raises it. Nothing was stored.")
    return (f"The evaluation budget of endpoint model {name} ({limit}, for its evaluations and health checks in "
            f"all) is spent ({spent}); it is not asked for either until a superuser raises it. Nothing was stored.")


def check_budget(endpoint: Endpoint, round_id: int | None) -> None:
    """Refuse before any call once the cost for ``round_id`` (None: outside rounds)
    has reached the endpoint's budget for it."""
    reason = budget_spent(endpoint, round_id)
    if reason:
        raise EndpointBudgetSpent(reason, retry_after=3600)


def cost_of(endpoint: Endpoint, requests: int, prompt_tokens: int, completion_tokens: int) -> Decimal:
    cost = Decimal(0)
    if endpoint.price_per_call is not None:
        cost += endpoint.price_per_call * requests
    if endpoint.price_per_1k_prompt_tokens is not None:
        cost += endpoint.price_per_1k_prompt_tokens * prompt_tokens / 1000
    if endpoint.price_per_1k_completion_tokens is not None:
        cost += endpoint.price_per_1k_completion_tokens * completion_tokens / 1000
    return cost.quantize(Decimal("0.000001"))


def record_usage(endpoint: Endpoint, round_id: int | None, predictions: list[dict], requests: int,
                 failed: int = 0) -> None:
    prompt = sum(p.get("endpoint", {}).get("prompt_tokens", 0) for p in predictions)
    completion = sum(p.get("endpoint", {}).get("completion_tokens", 0) for p in predictions)
    unreadable = sum(1 for p in predictions if p.get("unparseable"))
    changes = {"calls": F("calls") + requests, "failed_calls": F("failed_calls") + failed,
               "unparseable": F("unparseable") + unreadable, "prompt_tokens": F("prompt_tokens") + prompt,
               "completion_tokens": F("completion_tokens") + completion,
               "cost": F("cost") + cost_of(endpoint, requests, prompt, completion)}
    # One UPDATE (one commit) on the hot path; the round's row is made on its first call.
    if not EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).update(**changes):
        usage_of(endpoint, round_id)
        EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).update(**changes)


def _requests_for(endpoint: Endpoint, n: int) -> int:
    return math.ceil(n / remote.V2_BATCH) if endpoint.protocol == "v2" else n


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
    shape with ``endpoint`` (raw answer, its sha256, latency, tokens). Checks the round's
    budget, holds a request slot per request in flight, counts calls, tokens and cost,
    and turns every failure into a 503 that says nothing was stored."""
    if not rows:
        return []
    budget = settings.INFERENCE_TIMEOUT if budget is None else budget
    check_budget(endpoint, round_id)
    spec = spec_of(config)
    try:
        rows = [spec.validate_inputs(r) for r in rows]
    except ml.InputError as exc:
        raise InvalidInput.field("inputs", exc.message) from None
    target = client(endpoint, config)
    chunk = remote.V2_BATCH if endpoint.protocol == "v2" else 1
    deadline = time.monotonic() + budget

    def ask(part: list[dict]) -> list[dict]:
        left = deadline - time.monotonic()
        with _slot(endpoint, wait=max(0.0, min(left, budget))):
            _take_rate(endpoint, _requests_for(endpoint, len(part)))
            return remote.predict(target, spec, part, budget=max(0.1, deadline - time.monotonic()))

    parts = [rows[i:i + chunk] for i in range(0, len(rows), chunk)]
    try:
        if len(parts) == 1:
            results = ask(parts[0])
        else:
            with ThreadPoolExecutor(max_workers=min(endpoint.max_concurrency, len(parts))) as pool:
                results = [p for answered in pool.map(ask, parts) for p in answered]
    except remote.EndpointError as exc:
        log.warning("endpoint %s failed: %s", endpoint.pk, type(exc).__name__)
        record_usage(endpoint, round_id, [], 0, failed=1)
        raise _unavailable(endpoint, exc, target.secret) from None
    record_usage(endpoint, round_id, results, _requests_for(endpoint, len(rows)))
    return results


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
    unreadable = [p["endpoint"].get("raw") for p in predictions if p.get("unparseable")]
    if unreadable:
        raise Conflict(f"The health check of {endpoint.model_version.name} failed: its answer "
                       f"{str(unreadable[0])[:100]!r} is not in the task's answer format.")
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
