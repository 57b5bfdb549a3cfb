"""Making a model a round's target: promotion (the next round opens with it), the
checks before it, and the automatic promotions after an evaluation (the demo's
first targets, a real-data model that beats the seed one)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Max, Q

import ml
from annotation.inference import preload
from core.errors import Conflict, DomainError, InvalidInput
from jobs.engine import JobReporter
from jobs.models import Job
from registry.endpoints import endpoint_of
from registry.endpoints import health_check as endpoint_health_check
from registry.models import ModelVersion
from registry.services import target_model
from tasks import services as task_services
from tasks.models import STATIC_ROUND, Round, Task

from . import board
from .evaluation import evaluate_model, has_finished_evaluation
from .models import Evaluation, Promotion
from .rows import primary_metric

log = logging.getLogger(__name__)


MAX_ENSEMBLE = 5


def current_targets(task: Task) -> list[ModelVersion]:
    """The open round's target models (the latest opened round's if none is open)."""
    rnd = task.open_round() or task.rounds.exclude(opened_at=None).order_by("-number").first()
    if rnd is None:
        return []
    return list(rnd.target_models.order_by("pk"))


def ensemble_members(task: Task, model: ModelVersion, size: int) -> list[ModelVersion]:
    """``model`` and the targets of the latest rounds before it, ``size`` in all."""
    members = [model]
    if size > 1:
        rounds = (Round.objects.filter(task=task).exclude(number=STATIC_ROUND).exclude(opened_at=None)
                  .order_by("-number").prefetch_related("target_models"))
        for rnd in rounds:
            for target in sorted(rnd.target_models.all(), key=lambda m: m.pk):
                if target not in members and target.status == ModelVersion.Status.READY:
                    members.append(target)
            if len(members) >= size:
                break
    if len(members) < size:
        raise Conflict(f"An ensemble of {size} needs {size - 1} earlier target model(s); "
                       f"task {task.slug} has {len(members) - 1}.")
    return members[:size]


def check_promotable(task: Task, models: list[ModelVersion]) -> None:
    for member in models:
        if member.task_id != task.pk:
            raise InvalidInput.field("model", f"{member} belongs to another task.")
        if member.status != ModelVersion.Status.READY:
            raise Conflict(f"{member} is {member.status}; only ready models are promoted.")
        if not has_finished_evaluation(member):
            running = Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, status__in=Job.ACTIVE,
                                         params__model_version=member.pk).first()
            hint = f" (job #{running.pk} is {running.status})" if running else "; evaluate it first"
            raise Conflict(f"{member} has no finished evaluation{hint}. Promotion needs its scores on every round.")
        endpoint = endpoint_of(member)
        if endpoint is not None:  # no artifact: it must answer the task's probes, well shaped, in time
            endpoint_health_check(endpoint, task.parsed_config)
            continue
        try:
            ml.verify_artifact(member.artifact_dir, member.sha256)
        except ml.ArtifactError as exc:
            raise Conflict(f"{member}'s artifact does not check: {exc}") from None


OVERRIDE = ("Promote it anyway only with the override (allow_below_baseline) and a stated reason, which is "
            "recorded on the round.")
MAX_REASON = 2000


class PromotionRefused(Conflict):
    """A promotion rule refused the model (``promotion_checks``): 409 with the first
    problem's code (``not_above_majority``, for QA ``not_above_reference``,
    ``below_target``, ``target_not_comparable``, ``stale_evaluation``); ``checks`` holds
    the scores the rules read."""

    def __init__(self, message: str, code: str, checks: dict):
        super().__init__(message)
        self.code = code
        self.checks = checks


def _pct(value) -> str:
    return "–" if value is None else f"{value:.1%}"


def _interval(interval) -> str:
    return f" [{interval[0]:.1%}, {interval[1]:.1%}]" if interval else ""


def _on_shared_examples(mine: Evaluation, theirs: Evaluation, metric: str) -> dict | None:
    """Both models' score on the static test examples both were scored on: the mean of
    the per-example metric over their common examples (``None`` if they share none).
    Evaluations without per-example scores compare their stored values only when they
    counted the same number of examples."""
    if mine.example_ids and theirs.example_ids and mine.per_example and theirs.per_example:
        their_scores = dict(zip(theirs.example_ids, theirs.per_example, strict=False))
        pairs = [(score, their_scores[uid]) for uid, score in zip(mine.example_ids, mine.per_example, strict=False)
                 if uid in their_scores]
        if not pairs:
            return None
        same = len(pairs) == len(mine.example_ids) == len(theirs.example_ids)
        return {"candidate": sum(p[0] for p in pairs) / len(pairs), "target": sum(p[1] for p in pairs) / len(pairs),
                "shared": len(pairs), "same_set": same}
    a, b = mine.metrics.get(metric), theirs.metrics.get(metric)
    if a is None or b is None or mine.num_examples != theirs.num_examples:
        return None
    return {"candidate": a, "target": b, "shared": mine.num_examples, "same_set": True}


REFERENCE_CODES = {"majority": "not_above_majority", "qa": "not_above_reference"}
REFERENCE_LABELS = {"majority": "Majority line", "qa": "Sliding-window line"}


def promotion_checks(task: Task, model: ModelVersion) -> dict:
    """What promoting ``model`` would be measured against, and what the rules find:

    - the reference line: ``model``'s 95% interval on the static test set (round 0) must
      lie strictly above it (equal is not better: a model at the line is no better than
      a rule of thumb, and nearly every example would fool it). Classification: the
      score of always answering the most common label (the majority line, code
      ``not_above_majority``); extractive QA: the F1 of the SQuAD paper's sliding-window
      baseline on the same examples (``leaderboard.reference``, code
      ``not_above_reference``);
    - today's target: ``model`` must not score below each of today's targets on the
      static test examples both were scored on (which today's target must have).

    A task without a static test set has no reference line and no common examples: the
    rules cannot apply there. Returns {"metric", "candidate", "majority", "reference",
    "targets", "problems"}: ``majority`` is the majority line (None for QA),
    ``reference`` {"kind", "label", "description", "value", "exact_match"} the line the
    rule read; problems: a list of {"code", "message"}, empty when both rules pass.
    """
    metric = primary_metric(task)
    targets = [t for t in current_targets(task) if t.pk != model.pk]
    board.forget(task.pk)  # the reference line on the test set as it is now
    scores = board.target_scores(task, [model, *targets])
    mine = scores[0]
    static = task.rounds.filter(number=STATIC_ROUND).first()
    evaluations = {e.model_version_id: e for e in Evaluation.objects.filter(
        model_version__in=[model, *targets], round=static, split="test")} if static else {}
    has_static_test = bool(static) and static.examples.filter(split="test").exists()
    kind = mine["reference_kind"]
    checks = {"metric": metric, "static_test_set": has_static_test,
              "candidate": {"name": model.name, "value": mine["value"], "interval": mine["interval"],
                            "num_examples": mine["num_examples"]},
              "majority": mine["baseline"] if kind == "majority" else None,
              "reference": {"kind": kind, "label": REFERENCE_LABELS[kind], "description": mine["reference"],
                            "value": mine["baseline"], "exact_match": mine["reference_exact_match"]},
              "targets": [], "problems": []}
    problems = checks["problems"]
    if not has_static_test:
        return checks
    label = f"{model.name} scores {_pct(mine['value'])}{_interval(mine['interval'])} {metric}"
    if mine["value"] is None:
        problems.append({"code": "stale_evaluation", "message": (
            f"{model.name} has no {metric} on the static test set; evaluate it again first.")})
    elif mine["grown_to"]:
        problems.append({"code": "stale_evaluation", "message": (
            f"{model.name} was scored on {mine['num_examples']} static test examples; the set has "
            f"{mine['grown_to']} now, so its score cannot be set beside "
            f"{'the majority-class answer' if kind == 'majority' else 'the sliding-window baseline'} there. "
            "Evaluate it again first.")})
    elif mine["baseline"] is not None and not (mine["interval"] and mine["interval"][0] > mine["baseline"]):
        where = ("its interval does not lie above it" if mine["interval"] else "it has no interval to show it")
        problems.append({"code": REFERENCE_CODES[kind], "message": (
            f"{label} on the static test set ({mine['num_examples']} examples), against "
            f"{_pct(mine['baseline'])} for {mine['reference']}: {where}, so as a target "
            "nearly any example would fool it.")})
    for target, theirs in zip(targets, scores[1:], strict=True):
        shared = None
        if model.pk in evaluations and target.pk in evaluations:
            shared = _on_shared_examples(evaluations[model.pk], evaluations[target.pk], metric)
        checks["targets"].append({"name": target.name, "value": theirs["value"], "interval": theirs["interval"],
                                  "num_examples": theirs["num_examples"], "shared": shared})
        if shared is None:
            problems.append({"code": "target_not_comparable", "message": (
                f"Today's target {target.name} has no score on the static test examples {model.name} was scored "
                f"on, so the two cannot be compared: evaluate {target.name} again first.")})
        elif shared["candidate"] < shared["target"]:
            problems.append({"code": "below_target", "message": (
                f"{model.name} scores {_pct(shared['candidate'])} {metric} against {_pct(shared['target'])} for "
                f"today's target {target.name} on the same {shared['shared']} static test examples.")})
    return checks


def refusal(checks: dict) -> PromotionRefused | None:
    """The refusal ``promote`` raises without the override, or None when the rules pass."""
    problems = checks["problems"]
    if not problems:
        return None
    return PromotionRefused(" ".join([*(p["message"] for p in problems), OVERRIDE]), problems[0]["code"], checks)


def round_target_checks(task: Task, rnd: Round, *, fresh: bool = True) -> dict:
    """Whether each target model of ``rnd`` clears the task's reference line (the
    promotion rule's first half, for a round already open): its 95% interval on the
    static test set lies strictly above the majority line, or for QA the sliding-window
    baseline. What a crowd batch that pays for fooling the target checks first.

    Problems (codes): ``not_above_majority`` / ``not_above_reference`` (at or below the
    line), ``target_not_evaluated`` (no score on the static test set: nothing shows it
    clears the line), ``stale_evaluation`` (scored on a smaller static test set). A task
    without a static test set, a round without a target, or a line that cannot be
    computed (no training labels) gives none: the rule cannot apply there. Returns
    {"metric", "static_test_set", "round", "reference", "targets", "problems"}. ``fresh``:
    the line on the test set as it is now (drops the task's cached boards); a page that
    only shows the rule reads the cached line."""
    metric = primary_metric(task)
    targets = list(rnd.target_models.order_by("pk"))
    static = task.rounds.filter(number=STATIC_ROUND).first()
    has_static_test = bool(static) and static.examples.filter(split="test").exists()
    checks = {"metric": metric, "static_test_set": has_static_test, "round": rnd.number, "reference": None,
              "targets": [], "problems": []}
    if not has_static_test or not targets:
        return checks
    if fresh:
        board.forget(task.pk)  # the line on the test set as it is now
    scores = board.target_scores(task, targets)
    kind = scores[0]["reference_kind"]
    line = next((s["baseline"] for s in scores if s["baseline"] is not None), None)
    checks["reference"] = {"kind": kind, "label": REFERENCE_LABELS[kind], "description": scores[0]["reference"],
                           "value": line}
    problems = checks["problems"]
    for target, mine in zip(targets, scores, strict=True):
        checks["targets"].append({"name": target.name, "value": mine["value"], "interval": mine["interval"],
                                  "num_examples": mine["num_examples"], "clears": mine["above_baseline"]})
        if mine["value"] is None:
            problems.append({"code": "target_not_evaluated", "message": (
                f"Round {rnd.number}'s target {target.name} has no {metric} on the static test set, so nothing "
                f"shows it clears {mine['reference']}; evaluate it first.")})
        elif mine["grown_to"]:
            problems.append({"code": "stale_evaluation", "message": (
                f"Round {rnd.number}'s target {target.name} was scored on {mine['num_examples']} static test "
                f"examples; the set has {mine['grown_to']} now. Evaluate it again first.")})
        elif mine["baseline"] is not None and not mine["above_baseline"]:
            problems.append({"code": REFERENCE_CODES[kind], "message": (
                f"Round {rnd.number}'s target {target.name} scores {_pct(mine['value'])}{_interval(mine['interval'])} "
                f"{metric} on the static test set ({mine['num_examples']} examples), against "
                f"{_pct(mine['baseline'])} for {mine['reference']}: its interval does not lie above it, so nearly "
                "any example would fool it.")})
    return checks


def check_above_baseline(task: Task, model: ModelVersion) -> None:
    """PromotionRefused (a Conflict) when a promotion rule refuses ``model``."""
    refused = refusal(promotion_checks(task, model))
    if refused is not None:
        raise refused


def promote(task: Task, model: ModelVersion, *, ensemble_size: int = 1, allow_below_baseline: bool = False,
            reason: str = "", user=None) -> Round:
    """Open the next round with ``model`` (or it and the last rounds' targets, an
    ensemble of ``ensemble_size``) as its target; the open round closes.

    The next round is the newest draft round after the open one, if a researcher
    prepared it (contexts uploaded, say), else a new round r+1. A model that the rules
    of ``promotion_checks`` refuse (its interval does not clear the reference line, or it
    scores below today's target on the same examples) is promoted only with
    ``allow_below_baseline`` AND a non-empty ``reason``; every promotion is recorded
    (``Promotion``: the scores read, whether a rule was overridden, the reason), and an
    overridden one says so in the round's description.
    """
    if not isinstance(ensemble_size, int) or isinstance(ensemble_size, bool) or not 1 <= ensemble_size <= MAX_ENSEMBLE:
        raise InvalidInput.field("ensemble_size", f"Must be a whole number from 1 to {MAX_ENSEMBLE}.")
    reason = (reason or "").strip()
    if len(reason) > MAX_REASON:
        raise InvalidInput.field("reason", f"At most {MAX_REASON} characters.")
    members = ensemble_members(task, model, ensemble_size)
    check_promotable(task, members)
    checks = promotion_checks(task, model)
    refused = refusal(checks)
    if refused is not None and not (allow_below_baseline and reason):
        raise refused
    overridden = refused is not None
    preload([target_model(m) for m in members])  # loaded before it becomes the target: no cold start
    mode = Round.EnsembleMode.SINGLE if len(members) == 1 else Round.EnsembleMode.MEAN
    with transaction.atomic():
        Task.objects.select_for_update().filter(pk=task.pk).exists()
        last_opened = task.rounds.exclude(opened_at=None).aggregate(n=Max("number"))["n"] or STATIC_ROUND
        rnd = task.rounds.filter(status=Round.Status.DRAFT, number__gt=last_opened).order_by("number").first()
        description = f"Target: {', '.join(m.name for m in members)} (promoted" + (
            f" by {user.get_username()}" if user is not None else "") + (
            f"; rules overridden: {reason}" if overridden else "") + ")"
        if rnd is None:
            rnd = task_services.create_round(task, target_models=members, ensemble_mode=mode,
                                             description=description)
        else:
            task_services.set_round_targets(rnd, members, ensemble_mode=mode)
            if not rnd.description:
                Round.objects.filter(pk=rnd.pk).update(description=description)
        rnd = task_services.open_round(rnd)
        Promotion.objects.create(round=rnd, model_version=model, ensemble_size=len(members),
                                 user=user if user is not None and user.is_authenticated else None,
                                 overridden=overridden, reason=reason, checks=checks)
    board.forget(task.pk)
    return rnd


def make_target(task: Task, model: ModelVersion, *, user=None, allow_below_baseline: bool = False,
                reason: str = "") -> tuple[Round, bool]:
    """Make ``model`` the target of the task's next round; returns (the round, promoted).

    The open round, if it has no target model yet: nobody could write an example
    in it (every one would have been refused with 503), so giving it its first
    target changes no round's history. Otherwise ``promote``: the next round
    opens with ``model`` and the open one closes, so each round keeps the one
    target its examples were written against. Either way the model must be
    promotable (ready, its evaluation finished, its artifact intact); a promotion
    follows ``promote``'s rules (``allow_below_baseline`` with a ``reason``).
    """
    check_promotable(task, [model])
    preload([target_model(model)])
    with transaction.atomic():
        Task.objects.select_for_update().filter(pk=task.pk).exists()
        rnd = task.open_round()
        if rnd is not None and not rnd.target_models.exists():
            rnd.target_models.add(model)
            if not rnd.description:
                Round.objects.filter(pk=rnd.pk).update(description=f"Target: {model.name}")
            return rnd, False
    return promote(task, model, user=user, allow_below_baseline=allow_below_baseline, reason=reason), True


def compare_with_target(model: ModelVersion, reporter: JobReporter, job: Job) -> dict:
    """Whether ``model`` should replace the open round's target: it scores higher on
    round 0's test set, and not below always answering the most common label there
    (promotion would refuse that). The target is scored again first, on that set as it is now (an
    import may have grown it since its own evaluation), so both numbers count the same
    examples. Returns {"promote": bool, "reason": str}, and logs the reason."""
    task = model.task
    rnd = task.open_round()
    targets = list(rnd.target_models.all()) if rnd is not None else []
    static = task.rounds.filter(number=STATIC_ROUND).first()
    metric = primary_metric(task)

    def decided(promote: bool, reason: str) -> dict:
        reporter.progress(100, reason)
        return {"promote": promote, "reason": reason}

    if rnd is None:
        return decided(False, "no open round: nothing to promote into")
    if model in targets:
        return decided(False, f"{model.name} is the target already")
    mine = Evaluation.objects.filter(model_version=model, round=static, split="test").first() if static else None
    if mine is None or mine.metrics.get(metric) is None:
        return decided(False, f"{model.name} has no {metric} on round 0's test split: the target stays")
    if not targets:
        return decided(True, f"round {rnd.number} has no target yet: {model.name} becomes it")
    reporter.progress(100, f"scoring the target ({', '.join(t.name for t in targets)}) on round 0's "
                           f"{mine.num_examples} test examples too")
    theirs = [evaluation.metrics.get(metric) for target in targets
              for evaluation in evaluate_model(target, [static], job=job)]
    theirs = [value for value in theirs if value is not None]
    if not theirs:
        return decided(True, f"the target has no {metric} on round 0: {model.name} becomes the target")
    score, best = mine.metrics[metric], max(theirs)
    board.forget(task.pk)  # the reference line on the test set as it is now (an import may have grown it)
    line = board.target_scores(task, [model])[0]
    majority = line["baseline"]
    summary = (f"{model.name} {score:.1%} against the target's {best:.1%} {metric} on round 0's "
               f"{mine.num_examples} test examples"
               + (f" ({line['reference']}: {majority:.1%})" if majority is not None else ""))
    problems = promotion_checks(task, model)["problems"]
    if majority is not None and score < majority:
        where = "the majority line" if line["reference_kind"] == "majority" else "the sliding-window line"
        return decided(False, f"{summary}: below {where}, the target stays")
    if problems:  # promotion would refuse it: the same rules as a researcher's promotion
        return decided(False, f"{summary}: {problems[0]['message']} The target stays")
    if score > best:
        return decided(True, f"{summary}: {model.name} becomes the target")
    return decided(False, f"{summary}: the target stays")


def challenger(task: Task) -> dict:
    """For the public task page: a model on its way to replace the target if it scores
    higher (its job, queued or running), and the last such decision. Either may be None.
    One query: the page's budget is small."""
    rows = list(Job.objects.filter(task=task).filter(
        Q(status__in=Job.ACTIVE) & (Q(params__promote_if_better=True) | Q(params__has_key="then_train"))
        | Q(kind=Job.Kind.EVALUATE_MODEL, status=Job.Status.SUCCEEDED, result__has_key="promotion"))
        .order_by("-pk")[:20])
    pending = [job for job in rows if job.status in Job.ACTIVE]
    decided = next((job for job in rows if job.status == Job.Status.SUCCEEDED), None)
    if decided is not None and _superseded(task, decided):
        decided = None
    return {"job": pending[-1] if pending else None, "last": decided.result["promotion"]["reason"] if decided else None}


def _superseded(task: Task, decided: Job) -> bool:
    """Whether a comparison with the target is stale: a round opened since with a target
    it did not make (a researcher promoted another model). Its sentence names the target
    of then, beside today's target, as if it were still."""
    rnd = task.open_round()
    if rnd is None or rnd.opened_at is None or decided.finished_at is None or decided.finished_at >= rnd.opened_at:
        return False
    return not rnd.target_models.filter(pk=decided.params.get("model_version")).exists()


def make_target_or_log(model: ModelVersion) -> None:
    """``make_target``, a refusal logged (the evaluation it follows has succeeded)."""
    try:
        rnd, promoted = make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become a target of %s: %s", model, model.task.slug, exc.message)
        return
    log.info("%s is the target of %s round %s%s", model, model.task.slug, rnd.number,
             " (promoted: the round before closed)" if promoted else "")


def target_if_none(model: ModelVersion) -> bool:
    """Make ``model`` the target of its task's open round if that round has none yet
    (nobody can write in it before). True if it did. A refusal is logged, not raised:
    the evaluation it follows has succeeded all the same."""
    rnd = model.task.open_round()
    if rnd is None or rnd.target_models.exists():
        return False
    try:
        make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become the target of %s round %s: %s", model, model.task.slug, rnd.number,
                    exc.message)
        return False
    return True
