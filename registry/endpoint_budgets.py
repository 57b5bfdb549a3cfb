"""What an endpoint's calls cost, against its budgets.

Calls, tokens and their price per endpoint and round (``EndpointUsage``), against the
budgets a superuser sets (``ENDPOINT_DEFAULT_BUDGET`` where none is set):
``round_budget`` for each round's annotation calls, ``evaluation_budget`` for every call
outside rounds (evaluations and health checks, in all). The most a call may cost is
reserved before it is sent (``reserve``: one conditional UPDATE, so calls made at once
cannot together pass the budget) and settled when it ends (``settle``: what it cost, or
the reservation where the endpoint may have billed without a usable answer). Only a
superuser sets prices and budgets, and releases what crashed calls held.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.db.models import DecimalField, ExpressionWrapper, F, Value

from core.errors import Conflict, Forbidden, InvalidInput, Unavailable

from .models import Endpoint, EndpointUsage


class EndpointBudgetSpent(Unavailable):
    """The endpoint's budget (the round's, or outside rounds) is spent: it answers no more."""

    code = "endpoint_budget_spent"


class EndpointBudgetRefused(Conflict):
    """A health check or an evaluation not started because the endpoint's budget
    outside rounds is spent (409: the researcher's request clashes with the budget)."""

    code = "endpoint_budget_spent"


def amount_field(name: str, value) -> Decimal | None:
    if value in (None, ""):
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise InvalidInput.field(name, "Must be a number.") from None
    if not number.is_finite() or number < 0 or number > Decimal("1000000"):
        raise InvalidInput.field(name, "Must be a number from 0 to 1000000.")
    return number


PRICES = ("price_per_call", "price_per_1k_prompt_tokens", "price_per_1k_completion_tokens")


def _set_budget(endpoint: Endpoint, field: str, amount, user) -> Endpoint:
    if user is None or not user.is_superuser:
        raise Forbidden("Only a superuser sets an endpoint's budget.")
    setattr(endpoint, field, amount_field(field, amount))
    endpoint.save(update_fields=[field])
    return endpoint


def set_round_budget(endpoint: Endpoint, amount, user) -> Endpoint:
    """Set what the endpoint's calls may cost per round (None: ``ENDPOINT_DEFAULT_BUDGET``);
    superusers only."""
    return _set_budget(endpoint, "round_budget", amount, user)


def set_evaluation_budget(endpoint: Endpoint, amount, user) -> Endpoint:
    """Set what the endpoint's calls outside rounds (evaluations, health checks) may
    cost in all (None: ``ENDPOINT_DEFAULT_BUDGET``); superusers only."""
    return _set_budget(endpoint, "evaluation_budget", amount, user)


def priced(endpoint: Endpoint) -> bool:
    """Whether a superuser has set any of its prices (0 included)."""
    return any(getattr(endpoint, name) is not None for name in PRICES)


def usage_of(endpoint: Endpoint, round_id: int | None) -> EndpointUsage:
    usage, _ = EndpointUsage.objects.get_or_create(endpoint=endpoint, round_id=round_id)
    return usage


def budget_of(endpoint: Endpoint, round_id: int | None) -> Decimal:
    """What the endpoint's calls may cost in ``round_id`` (None: outside rounds, in all):
    the budget a superuser set, else ``ENDPOINT_DEFAULT_BUDGET``."""
    limit = endpoint.round_budget if round_id is not None else endpoint.evaluation_budget
    return settings.ENDPOINT_DEFAULT_BUDGET if limit is None else limit


def budgets_in_effect(endpoint: Endpoint) -> dict[str, Decimal]:
    """Its budgets as they apply now: ``round`` (per round) and ``evaluation`` (outside rounds)."""
    cent = Decimal("0.01")
    return {"round": budget_of(endpoint, 0).quantize(cent),  # 0: any round, they share one budget field
            "evaluation": budget_of(endpoint, None).quantize(cent)}


def _money(amount: Decimal) -> str:
    return format(amount.quantize(Decimal("0.01")) if amount == amount.quantize(Decimal("0.01")) else
                  amount.normalize(), "f")


def _budget_reason(endpoint: Endpoint, round_id: int | None, limit: Decimal, spent: Decimal, held: Decimal,
                   asked: Decimal | None = None) -> str:
    used = f"{_money(spent)} spent" + (f", {_money(held)} held by calls in flight" if held else "")
    if asked is not None:
        used += f"; this call may cost up to {_money(asked)}"
    name = endpoint.model_version.name
    if round_id is not None:
        return (f"The budget of endpoint model {name} for this round ({_money(limit)}) is spent ({used}); it answers "
                "no more until a superuser raises it. Nothing was stored.")
    return (f"The evaluation budget of endpoint model {name} ({_money(limit)}, for its evaluations and health checks "
            f"in all) is spent ({used}); it is not asked for either until a superuser raises it. Nothing was stored.")


def budget_spent(endpoint: Endpoint, round_id: int | None) -> str | None:
    """Why the endpoint may make no more calls for ``round_id`` (None: outside rounds,
    i.e. evaluations and health checks), or None while its budget there is not spent
    (what was spent and what calls in flight hold, against it). An endpoint without a
    price costs nothing and is never refused for money."""
    if not priced(endpoint):
        return None
    limit = budget_of(endpoint, round_id)
    spent, held = (EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id)
                   .values_list("cost", "reserved").first()) or (Decimal(0), Decimal(0))
    if spent + held < limit:
        return None
    return _budget_reason(endpoint, round_id, limit, spent, held)


def cost_of(endpoint: Endpoint, requests: int, prompt_tokens: int, completion_tokens: int) -> Decimal:
    """What so many requests and tokens cost at the endpoint's prices, rounded up to the
    millionth (a small cost never rounds to nothing)."""
    cost = Decimal(0)
    if endpoint.price_per_call is not None:
        cost += endpoint.price_per_call * requests
    if endpoint.price_per_1k_prompt_tokens is not None:
        cost += endpoint.price_per_1k_prompt_tokens * prompt_tokens / 1000
    if endpoint.price_per_1k_completion_tokens is not None:
        cost += endpoint.price_per_1k_completion_tokens * completion_tokens / 1000
    return cost.quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


def reserve(endpoint: Endpoint, round_id: int | None, amount: Decimal) -> None:
    """Hold ``amount`` against the budget for ``round_id`` before the calls it covers
    are sent, or refuse them (``EndpointBudgetSpent``). One conditional UPDATE: it
    holds only while what was spent, what calls in flight hold and ``amount`` stay
    within the budget, so calls made at once cannot together pass it."""
    if amount <= 0:
        return  # costs nothing: never refused for money
    limit = budget_of(endpoint, round_id)
    usage_of(endpoint, round_id)
    room = ExpressionWrapper(Value(limit - amount) - F("reserved"), output_field=DecimalField())
    if EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id, cost__lte=room).update(
            reserved=F("reserved") + amount):
        return
    spent, held = EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).values_list(
        "cost", "reserved").get()
    raise EndpointBudgetSpent(_budget_reason(endpoint, round_id, limit, spent, held, amount),
                              retry_after=5 if held > 0 else 3600)


def settle(endpoint: Endpoint, round_id: int | None, *, held: Decimal, cost: Decimal, calls: int = 0,
            failed: int = 0, unparseable: int = 0, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
    """Count what the calls did and cost, and give back what was held for them (one UPDATE)."""
    changes = {"calls": F("calls") + calls, "failed_calls": F("failed_calls") + failed,
               "unparseable": F("unparseable") + unparseable, "prompt_tokens": F("prompt_tokens") + prompt_tokens,
               "completion_tokens": F("completion_tokens") + completion_tokens, "cost": F("cost") + cost}
    if held:
        changes["reserved"] = F("reserved") - held
    # One UPDATE (one commit) on the hot path; the round's row is made on its first call.
    if not EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).update(**changes):
        usage_of(endpoint, round_id)
        EndpointUsage.objects.filter(endpoint=endpoint, round_id=round_id).update(**changes)


def release_reservations(endpoint: Endpoint, user) -> Decimal:
    """Give back what the endpoint's calls hold against its budgets, in every round:
    for a superuser, after a process was killed with calls in flight (their
    reservations were never settled). Used while calls are in flight, it lets those
    calls pass the budget by what they held. What was given back, in all."""
    if user is None or not user.is_superuser:
        raise Forbidden("Only a superuser releases what an endpoint's calls hold against its budget.")
    rows = EndpointUsage.objects.filter(endpoint=endpoint, reserved__gt=0)
    held = sum(rows.values_list("reserved", flat=True), Decimal(0))
    rows.update(reserved=0)
    return held


def answered_cost(endpoint: Endpoint, answers: list[dict], most: dict) -> tuple[Decimal, int, int]:
    """What a request that answered costs, and its reported tokens; where it reported
    none (and tokens are priced), the most it may have used is charged."""
    reported = [a.get("endpoint", {}) for a in answers]
    prompt = sum(r.get("prompt_tokens", 0) for r in reported)
    completion = sum(r.get("completion_tokens", 0) for r in reported)
    charged_prompt = prompt if all("prompt_tokens" in r for r in reported) else most["prompt_tokens"]
    charged_completion = completion if all("completion_tokens" in r for r in reported) else most["completion_tokens"]
    return cost_of(endpoint, most["requests"], charged_prompt, charged_completion), prompt, completion
