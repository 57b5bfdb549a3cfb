"""Onboarding: the short quiz a task's config may ask for (``onboarding``) before a
worker writes or validates on it.

The quiz is the task's instructions, then its items: examples to label, or to judge
(is the shown answer correct?), each with a known answer and an explanation that
the worker reads once they have answered. The config's items are a *pool*: each try
draws ``per_try`` of them (``draw``) that no earlier try of the same worker served, so
the answers and explanations one try shows are never asked again of that worker, and a
second try cannot be passed from the first one's feedback. (The config checks that the
pool holds ``per_try`` x ``max_tries`` items; only after a researcher lets a blocked
worker try again may a try run short of fresh items, and then it is topped up with
served ones.) The draw is random, keyed by the server's secret, the worker, the task
and the try: the same all through a try, unknown to the worker beforehand. A *try*
ends when every item drawn is answered; it passes when at least ``pass_mark`` of them
were right (``TaskConfig.onboarding_needed``). Passing is recorded once per worker
and task; failing ``max_tries`` tries blocks the worker on the task.
``require_passed`` is the rule every write and validation goes through
(``OnboardingRequired``: a 403 with the code ``onboarding_required``); the task's
researchers are never asked.

The known answers never leave the server before the worker answers: ``shown_items``
leaves them out. MTurk workers take the same quiz through their assignment's token;
the crowd app listens to ``onboarding_passed`` and ``onboarding_blocked`` (sent
after the record is stored) to give the task's MTurk qualifications, and to
``onboarding_reset`` (``let_try_again``, the admin's action) to lift the task block.

A crowd arrival its platform has not confirmed as the worker's is a user of its own
(``annotation.joining``): it may work where the worker passed (``carry_pass``), and
otherwise takes the quiz as itself, so failing it in a worker's name blocks only the
arrival; once confirmed, its record joins the worker's (``join``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.crypto import salted_hmac

from core.errors import Conflict, Forbidden, InvalidInput, OnboardingRequired
from tasks.models import Task
from tasks.onboarding_config import JUDGE_ANSWERS
from tasks.roles import is_researcher

from .models import OnboardingRecord

# Sent with ``task`` and ``user`` once the record says so (outside its transaction).
onboarding_passed = Signal()
onboarding_blocked = Signal()
# Sent with ``task``, ``user`` and ``by`` when a researcher lets a blocked worker try again.
onboarding_reset = Signal()

BLOCKED_MESSAGE = ("Thank you for trying the onboarding of {task}. It was not passed within the {tries} tries "
                   "allowed, so this task's work is not open to you; other tasks may be. We are grateful for "
                   "your time.")


def blocked_message(task: Task) -> str:
    return BLOCKED_MESSAGE.format(task=task.name, tries=task.parsed_config.onboarding["max_tries"])


def required_message(task: Task) -> str:
    return (f"The task {task.name} asks you to pass its short onboarding before you write or validate: "
            f"answer its items (GET /api/tasks/{task.slug}/onboarding/), then go on.")


@dataclass
class Standing:
    """Where ``user`` stands with the task's onboarding."""

    required: bool  # the task has an onboarding and the user is not one of its researchers
    passed: bool
    blocked: bool
    tries: int
    max_tries: int
    answered: list[int]  # items answered in the try under way
    items: int  # items in a try
    needed: int
    last_score: int | None

    @property
    def open(self) -> bool:
        """The user may do the task's work."""
        return not self.required or self.passed

    @property
    def tries_left(self) -> int:
        return max(self.max_tries - self.tries, 0) if not self.passed else 0


def _record(task: Task, user) -> OnboardingRecord | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return OnboardingRecord.objects.filter(task=task, user=user).first()


def standing(task: Task, user) -> Standing:
    config = task.parsed_config.onboarding
    if not config:
        return Standing(False, False, False, 0, 0, [], 0, 0, None)
    record = _record(task, user)
    passed = record is not None and record.passed_at is not None
    required = not passed and not is_researcher(user, task)
    return Standing(
        required=required, passed=passed, blocked=record is not None and record.blocked_at is not None,
        tries=record.tries if record else 0, max_tries=config["max_tries"],
        answered=sorted(int(k) for k in (record.answers if record else {})), items=config["per_try"],
        needed=task.parsed_config.onboarding_needed, last_score=record.last_score if record else None)


def require_passed(task: Task, user) -> None:
    """Raise ``OnboardingRequired`` unless ``user`` may work on ``task``: the task asks
    for no onboarding, they passed it, or they are one of its researchers."""
    if not task.parsed_config.onboarding:
        return
    record = _record(task, user)
    if record is not None and record.passed_at is not None:
        return
    if is_researcher(user, task):
        return
    if record is not None and record.blocked_at is not None:
        raise OnboardingRequired(blocked_message(task))
    raise OnboardingRequired(required_message(task))


def is_blocked(task: Task, user) -> bool:
    """Whether ``user`` failed every try of the task's onboarding (and so may not work on it)."""
    return bool(task.parsed_config.onboarding) and OnboardingRecord.objects.filter(
        task=task, user=user, blocked_at__isnull=False, passed_at__isnull=True).exists()


def blocked_task_ids(user) -> set[int]:
    """The tasks whose onboarding ``user`` failed every try of (one query), as
    ``is_blocked`` judges each; a task that asks for no onboarding any more counts as
    neither, so the caller checks the task's config."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(OnboardingRecord.objects.filter(user=user, blocked_at__isnull=False, passed_at__isnull=True)
               .values_list("task_id", flat=True))


DRAW_SALT = "dynabench.onboarding.draw"


def draw(task: Task, user, record: OnboardingRecord | None = None) -> list[int]:
    """The numbers (in the task's pool) of the items of ``user``'s try under way: ``per_try``
    items that no earlier try of theirs served (``record.seen``), drawn at random with a
    seed keyed by the server's secret, the task, the user, the try and what they have
    seen, so the draw stands all through the try. After a researcher let a blocked
    worker try again the fresh items may run short: the try is topped up with seen ones."""
    config = task.parsed_config.onboarding
    if not config:
        return []
    if record is None:
        record = _record(task, user)
    seen = set(record.seen) if record is not None else set()
    tries = record.tries if record is not None else 0
    pool = range(len(config["items"]))
    fresh, served = [n for n in pool if n not in seen], [n for n in pool if n in seen]
    seed = salted_hmac(DRAW_SALT, f"{task.pk}:{getattr(user, 'pk', None)}:{tries}:{sorted(seen)}").hexdigest()
    rng = random.Random(seed)
    per_try = min(config["per_try"], len(pool))
    chosen = rng.sample(fresh, min(per_try, len(fresh)))
    chosen += rng.sample(served, per_try - len(chosen))
    return sorted(chosen)


def shown_items(task: Task, user) -> list[dict]:
    """The items of ``user``'s try under way (``draw``) as they see them before
    answering: no answer, no explanation."""
    config = task.parsed_config.onboarding or {"items": []}
    shown = []
    for number in draw(task, user):
        item = config["items"][number]
        entry = {"number": number, "kind": item["kind"], "context": item.get("context", {}),
                 "inputs": item["inputs"]}
        if item["kind"] == "judge":
            entry["target"] = item["target"]
            entry["shown_target"] = task.parsed_config.kind.shown_answer(item["target"])
        shown.append(entry)
    return shown


@dataclass
class Answered:
    number: int
    right: bool
    known_answer: object  # what the item's answer is (a label, a span's text, "correct"...)
    explanation: str
    try_finished: bool
    score: int | None  # items right in the try, once it is finished
    standing: Standing


def _item_number(value, items: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < items:
        raise InvalidInput.field("item", f"Must be an item number from 0 to {items - 1}.")
    return value


def _is_right(task: Task, item: dict, answer) -> bool:
    config = task.parsed_config
    if item["kind"] == "judge":
        if answer not in JUDGE_ANSWERS:
            raise InvalidInput.field("answer", f"Must be one of {JUDGE_ANSWERS}.")
        return answer == item["answer"]
    if not isinstance(answer, dict):
        raise InvalidInput.field("answer", "Must be an answer of the task (an object).")
    cleaned = config.clean_target(answer, item.get("context") or None, field="answer", need_start=False)
    return config.answers_agree(cleaned, item["answer"])


def answer_item(task: Task, user, number, answer) -> Answered:
    """``user`` answers item ``number`` of their try under way (``draw``): whether it was
    right, the known answer and its explanation (safe to show: no later try of theirs
    serves the item again). The last item of a try scores the try: a pass is recorded
    once, and failing the last try allowed blocks the user on the task."""
    config = task.parsed_config.onboarding
    if not config:
        raise Conflict(f"The task {task.name} asks for no onboarding.")
    items = config["items"]
    number = _item_number(number, len(items))
    item = items[number]
    right = _is_right(task, item, answer)  # bad input is refused before anything is stored
    passed = blocked = False
    score = None
    with transaction.atomic():
        try:
            with transaction.atomic():
                OnboardingRecord.objects.get_or_create(task=task, user=user)
        except IntegrityError:  # made at the same moment by another request: it stands
            pass
        record = OnboardingRecord.objects.select_for_update().get(task=task, user=user)
        if record.passed_at is not None:
            raise Conflict("You passed this task's onboarding already.")
        if record.blocked_at is not None:
            raise OnboardingRequired(blocked_message(task))
        drawn = draw(task, user, record)
        if number not in drawn:
            raise InvalidInput.field("item", f"Item {number} is not one of your items in this try: answer "
                                             f"{', '.join(map(str, drawn))} (GET /api/tasks/{task.slug}/onboarding/).")
        if str(number) in record.answers:
            raise Conflict("You answered this item in this try already; answer the others.")
        record.answers[str(number)] = right
        if all(str(n) in record.answers for n in drawn):
            score = sum(1 for n in drawn if record.answers[str(n)])
            # Served with feedback (also an answer the draw left behind, had the pool changed): never again.
            record.seen = sorted(set(record.seen) | set(drawn) | {int(k) for k in record.answers})
            record.tries, record.last_score, record.answers = record.tries + 1, score, {}
            if score >= task.parsed_config.onboarding_needed:
                record.passed_at = passed = timezone.now()
            elif record.tries >= config["max_tries"]:
                record.blocked_at = blocked = timezone.now()
        record.save()
    if passed:
        onboarding_passed.send(sender=OnboardingRecord, task=task, user=user)
    if blocked:
        onboarding_blocked.send(sender=OnboardingRecord, task=task, user=user)
    known = item["answer"] if item["kind"] == "judge" else task.parsed_config.kind.shown_answer(item["answer"])
    return Answered(number=number, right=right, known_answer=known, explanation=item["explanation"],
                    try_finished=score is not None, score=score, standing=standing(task, user))


def reset(task: Task, user) -> None:
    """Lift a block from failed tries (a researcher lifting the worker's task block):
    the worker may take the onboarding again, from no tries. The items they saw stay
    seen: their next tries draw fresh items first."""
    OnboardingRecord.objects.filter(task=task, user=user, passed_at__isnull=True).update(
        blocked_at=None, tries=0, answers={}, updated_at=timezone.now())


def let_try_again(task: Task, user, *, by) -> bool:
    """A task's researcher (``by``) lets a worker who failed every try take the onboarding
    again: the record's block and tries are cleared (``reset``), and ``onboarding_reset``
    tells the crowd app to lift the worker's task block there. False when there was no
    block to lift (passed, or never blocked)."""
    if not is_researcher(by, task):
        raise Forbidden("Only the task's researchers let a worker take its onboarding again.")
    if not OnboardingRecord.objects.filter(task=task, user=user, blocked_at__isnull=False,
                                           passed_at__isnull=True).exists():
        return False
    reset(task, user)
    onboarding_reset.send(sender=OnboardingRecord, task=task, user=user, by=by)
    return True


def take_with_known_answers(task: Task, user) -> Standing:
    """A simulated worker (a replay's or a demo's) takes the task's onboarding through
    ``answer_item``, as anyone does, giving each item's known answer: they pass it, and
    the record says so. A task without onboarding, or a user who passed, is left as it is."""
    config = task.parsed_config.onboarding
    if not config or standing(task, user).passed:
        return standing(task, user)
    done = set(standing(task, user).answered)
    result = None
    for number in draw(task, user):
        if number not in done:
            result = answer_item(task, user, number, config["items"][number]["answer"])
    return result.standing if result is not None else standing(task, user)


def passed_task_ids(user) -> set[int]:
    """The tasks whose onboarding ``user`` passed (one query): for a page of their
    standing on many tasks (a task that asks for none counts as neither)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(OnboardingRecord.objects.filter(user=user, passed_at__isnull=False).values_list("task_id", flat=True))


def carry_pass(task: Task, account, arrival) -> bool:
    """``arrival`` (a crowd arrival under ``account``'s worker id that its platform has not
    confirmed yet) may write and validate on ``task`` where ``account`` passed its onboarding,
    as the platform's own admission does (a record of its own, passed; nothing else of the
    account's record is copied). False when ``account`` has not passed: ``arrival`` takes the
    quiz itself, and ``join`` carries its tries over once confirmed."""
    passed = (OnboardingRecord.objects.filter(task=task, user=account, passed_at__isnull=False)
              .values_list("passed_at", flat=True).first())
    if passed is None:
        return False
    OnboardingRecord.objects.get_or_create(task=task, user=arrival, defaults={"passed_at": passed})
    return True


def join(provisional, account) -> None:
    """``provisional``'s onboarding records become ``account``'s (``annotation.joining``): where
    ``account`` has none, as they are; where it has one, a pass or a block of the account's
    stands, else the tries add up (a pass passes; failing ``max_tries`` in all blocks). The
    signals go out for a pass or a block the account gets here."""
    outcomes = []
    with transaction.atomic():
        for record in (OnboardingRecord.objects.select_for_update().filter(user=provisional)
                       .select_related("task").order_by("pk")):
            mine = OnboardingRecord.objects.select_for_update().filter(user=account, task=record.task).first()
            if mine is None:
                record.user = account
                record.save()
                outcomes.append((record.task, record.passed_at is not None, record.blocked_at is not None))
                continue
            if mine.passed_at is None and mine.blocked_at is None:
                config = record.task.parsed_config.onboarding
                mine.tries += record.tries
                mine.last_score = record.last_score if record.tries else mine.last_score
                if record.passed_at is not None:
                    mine.passed_at = record.passed_at
                elif config and (record.blocked_at is not None or mine.tries >= config["max_tries"]):
                    mine.blocked_at = timezone.now()
                mine.save()
                outcomes.append((record.task, mine.passed_at is not None, mine.blocked_at is not None))
            record.delete()
    for task, passed, blocked in outcomes:
        if passed:
            onboarding_passed.send(sender=OnboardingRecord, task=task, user=account)
        elif blocked:
            onboarding_blocked.send(sender=OnboardingRecord, task=task, user=account)
