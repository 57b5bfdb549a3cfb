"""Pages: the task page with its researcher section, a job's page, and the round-loop
actions (train next, evaluate, promote) a researcher starts from the task page.

Each action calls the same service the admin and the API call; a refusal comes
back as a message on the page: ``str(exc)``, which for ``InvalidInput`` names the
fields and their problems (its ``message`` is only "Invalid input.")."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from annotation import reliability, stats
from annotation.models import ReliabilityFit
from annotation.views import task_page_context
from core.accounts import too_many
from core.errors import DomainError, InvalidInput, TooLarge
from core.ratelimit import page_wait
from core.uploads import bounded_uploads
from jobs import engine
from jobs.models import Job
from leaderboard import promotion, training
from leaderboard.evaluation import start_evaluation
from registry.models import ModelVersion
from tasks.api import visible_jobs
from tasks.models import Round, Task
from tasks.roles import is_researcher

from . import board, cycle, dynascore, presentation
from .api import parse_dataset_weights_param, parse_weights_param
from .dynascore import DEFAULT_WEIGHTS, METRICS
from .releases import browse
from .submissions import submit_model


def research_context(task) -> dict:
    targets = promotion.current_targets(task)
    candidates = cycle.candidates(task, limit=5)
    comparison = cycle.compare(task, [*targets, *candidates])
    for model in comparison.models:
        model.evaluated = comparison.evaluated[model.pk]
    latest = task.open_round() or task.rounds.exclude(number=0).order_by("-number").first()
    return {
        "targets": targets, "candidates": candidates, "comparison": comparison,
        "comparison_rows": list(comparison.rows()),
        "annotator_stats": stats.round_stats(latest, identify=True) if latest else None,
        "validation_policy": task.parsed_config.validation,
        "validators": list(reliability.validator_rows(task)[:20]),
        "reliability_fit": ReliabilityFit.objects.filter(task=task).first(),
        "jobs": list(Job.objects.filter(task=task).order_by("-created_at", "-pk")[:10]),
        "selections": training.SELECTIONS, "modes": training.MODES, "max_ensemble": promotion.MAX_ENSEMBLE,
        "usable": training.usable_training_counts(task),
        "new_examples": cycle.new_examples(task), "recipe": cycle.seed_recipe(task),
    }


@never_cache
def task_detail(request, slug):
    """The public task page; its researchers also see the loop: candidates beside the
    target, Train / Evaluate / Promote, per-annotator stats and recent jobs."""
    context = task_page_context(request, slug)
    task = context["task"]
    open_round = context["open_round"]  # its target models are prefetched
    context["target_scores"] = board.target_scores(task, list(open_round.target_models.all())) if open_round else []
    context["challenger"] = promotion.challenger(task)
    context["is_researcher"] = is_researcher(request.user, task)
    context["releases"] = browse.releases_with_downloads(task, limit=5)
    if context["is_researcher"]:
        context.update(research_context(task))
    return render(request, "leaderboard/task_detail.html", context)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@login_required
@require_POST
def task_action(request, slug):
    """Train next / evaluate / promote, from the task page's researcher section."""
    context = task_page_context(request, slug)
    task = context["task"]
    if not is_researcher(request.user, task):
        return HttpResponseForbidden("Only the task's researchers can do this.")
    action = request.POST.get("action")
    try:
        if action == "train":
            job = cycle.train_next(task, from_parent=request.POST.get("from_parent") == "on",
                                   selection=request.POST.get("selection", "verified"),
                                   mode=request.POST.get("mode", "full"),
                                   allow_no_new_examples=request.POST.get("allow_no_new_examples") == "on",
                                   user=request.user)
            messages.success(request, f"Training job #{job.pk} queued.")
            return redirect(job.get_absolute_url())
        model = ModelVersion.objects.filter(task=task, pk=_int(request.POST.get("model"))).first()
        if model is None:
            messages.error(request, "Choose one of this task's models.")
        elif action == "evaluate":
            job = start_evaluation(model, user=request.user)
            messages.success(request, f"Evaluation of {model.name} queued: job #{job.pk}.")
            return redirect(job.get_absolute_url())
        elif action == "promote":
            size = _int(request.POST.get("ensemble_size")) or 1
            if not 1 <= size <= promotion.MAX_ENSEMBLE:
                raise InvalidInput.field("ensemble_size", f"Must be a whole number from 1 to {promotion.MAX_ENSEMBLE}.")
            confirm = f"{reverse('promote-confirm', args=[task.slug, model.pk])}?{urlencode({'ensemble_size': size})}"
            if request.POST.get("confirm") != "yes":  # the scores first, then a confirmed promotion
                return redirect(confirm)
            try:
                rnd = promotion.promote(task, model, ensemble_size=size,
                                        allow_below_baseline=request.POST.get("allow_below_baseline") == "on",
                                        reason=request.POST.get("reason", ""), user=request.user)
            except DomainError as exc:
                messages.error(request, str(exc))
                return redirect(confirm)
            names = ", ".join(m.name for m in rnd.target_models.all())
            messages.success(request, f"Round {rnd.number} is open with {names} as its target.")
        else:
            messages.error(request, "Unknown action.")
    except DomainError as exc:
        messages.error(request, str(exc))
    return redirect(task.get_absolute_url())


@never_cache
@login_required
def promote_confirm(request, slug, pk):
    """Before a promotion: the candidate's and today's target's scores on the static test
    set with their intervals, the majority line, and what the promotion rules find; the
    confirmation posts to ``task_action``. Where a rule refuses the model, the form asks
    for the override and a reason (the service refuses it without both)."""
    context = task_page_context(request, slug)
    task = context["task"]
    if not is_researcher(request.user, task):
        return HttpResponseForbidden("Only the task's researchers can promote its models.")
    model = ModelVersion.objects.filter(task=task, pk=pk).first()
    if model is None:
        raise Http404("No such model.")
    size = _int(request.GET.get("ensemble_size")) or 1
    blocked = None
    try:
        promotion.check_promotable(task, promotion.ensemble_members(task, model, size))
    except DomainError as exc:
        blocked = str(exc)
    return render(request, "leaderboard/promote_confirm.html", {
        "task": task, "model": model, "ensemble_size": size, "max_ensemble": promotion.MAX_ENSEMBLE,
        "blocked": blocked, "checks": promotion.promotion_checks(task, model),
        "targets": promotion.current_targets(task)})


@never_cache
@login_required
def job_page(request, pk):
    """A job's progress, time left, log and error; its researchers cancel or re-run it."""
    job = visible_jobs(request.user).select_related("task", "created_by").filter(pk=pk).first()
    if job is None:
        raise Http404("No such job.")
    researcher = request.user.is_superuser or (job.task is not None and is_researcher(request.user, job.task))
    if request.method == "POST":
        if not researcher:
            return HttpResponseForbidden("Only the task's researchers can cancel or re-run its jobs.")
        try:
            if request.POST.get("action") == "cancel":
                engine.cancel_job(job, request.user)
                messages.success(request, f"Job #{job.pk} cancelled.")
            elif request.POST.get("action") == "rerun":
                new = engine.rerun_job(job, request.user)
                messages.success(request, f"Job #{job.pk} queued again as job #{new.pk}.")
                return redirect(new.get_absolute_url())
        except DomainError as exc:
            messages.error(request, str(exc))
        return redirect(job.get_absolute_url())
    model = None
    model_id = job.result.get("model_version") or job.params.get("model_version")
    if model_id:
        model = ModelVersion.objects.filter(pk=model_id).first()
    return render(request, "leaderboard/job.html", {
        "job": job, "researcher": researcher, "model": model, "model_name": job.params.get("name", ""),
        "recipe": presentation.job_recipe(job, model), "scores": presentation.job_scores(job, model),
        "Status": Job.Status, "Round": Round})


def _weights_text(params) -> str | None:
    """The metric weights as one ``name:value`` text: the sliders send one field per
    metric, a link sends ``weights``."""
    if any(name in params for name in METRICS):
        return ",".join(f"{name}:{params[name]}" for name in METRICS if name in params)
    return params.get("weights")


def _dataset_weights_text(params) -> str | None:
    """The datasets' weights: one slider per dataset, named by its round number, or
    ``dataset_weights``."""
    sliders = [key for key in params if key.startswith("dataset-")]
    if sliders:
        return ",".join(f"{key.removeprefix('dataset-')}:{params[key]}" for key in sliders)
    return params.get("dataset_weights")


def _kept_weights(params) -> tuple[dict, list[str]]:
    """The metric weights a page falls back to when those sent are refused, and the names
    reset: each slider's value that is valid by itself, the default for the others;
    every default for a refused ``weights`` link, or for valid values refused together
    (all 0)."""
    sent = [name for name in METRICS if name in params]
    kept, reset = {}, []
    for name in sent:
        try:
            kept[name] = dynascore.parse_weight(name, params[name])
        except ValueError:
            reset.append(name)
    text = ",".join(f"{name}:{value:g}" for name, value in kept.items()) if sent else params.get("weights")
    try:
        return dynascore.parse_weights(text), reset
    except ValueError:
        return dict(DEFAULT_WEIGHTS), list(METRICS)


def _kept_dataset_weights(params) -> tuple[dict, list[str] | None]:
    """The same for the datasets' sliders; ``None`` for every default (a refused
    ``dataset_weights`` link)."""
    sliders = {key.removeprefix("dataset-"): params[key] for key in params if key.startswith("dataset-")}
    if not sliders:
        try:
            return board.parse_dataset_weights(params.get("dataset_weights")), []
        except ValueError:
            return {}, None
    kept, reset = {}, []
    for key, raw in sliders.items():
        try:
            number, kept[number] = board.parse_dataset_weight(key, raw)
        except ValueError:
            reset.append(board.dataset_name(int(key)) if key.isdigit() else repr(key))
    return kept, reset


def _fallback_board(task, params, user) -> tuple[dict, dict, str]:
    """For weights that were refused: the board under the weights kept (``_kept_weights``),
    those weights, and a sentence that says which weights are the defaults instead."""
    weights, reset = _kept_weights(params)
    dataset_weights, datasets_reset = _kept_dataset_weights(params)
    try:
        result = board.board_json(task, weights, user, dataset_weights)
    except DomainError:  # a round with no test set, or dataset weights that add up to 0
        datasets_reset = None
        result = board.board_json(task, weights, user, {})
    every_metric = len(reset) == len(METRICS)
    if every_metric and (datasets_reset is None or not dataset_weights):
        return weights, result, "The board below uses the default weights instead."
    parts = ["the default metric weights" if every_metric else
             f"the default weight of {_and([f'{name} ({DEFAULT_WEIGHTS[name]:g})' for name in reset])}"
             if reset else "",
             "the default dataset weights" if datasets_reset is None else
             f"the default weight of {_and([f'{name} (1)' for name in datasets_reset])}" if datasets_reset else ""]
    parts = [part for part in parts if part]
    return weights, result, f"The board below uses {' and '.join(parts)} instead." if parts else ""


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def leaderboard_page(request, slug):
    """A task's public leaderboard: sortable columns, weight sliders (a GET form, so a
    reweighted board is a link), intervals, ties, and the CSV/JSON exports. Weights that
    are refused (400) give the message once and the board under the defaults instead,
    each refused slider back at its default."""
    wait = page_wait(request)
    if wait:
        return too_many(request, wait, "requests from here")
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    error = fallback = ""
    try:
        weights = parse_weights_param(_weights_text(request.GET))
        result = board.board_json(task, weights, request.user,
                                  parse_dataset_weights_param(_dataset_weights_text(request.GET)))
    except DomainError as exc:
        error = str(exc)
        weights, result, fallback = _fallback_board(task, request.GET, request.user)
    column = request.GET.get("sort", "rank")
    if column not in board.SORTABLE and column not in result["datasets"]:
        column = "rank"
    descending = request.GET.get("dir", "asc" if column in ("rank", "name", "calibration") else "desc") == "desc"
    rows = board.sort_rows(result["rows"], column, descending, result["datasets"])
    return render(request, "leaderboard/leaderboard.html", {
        "task": task, "error": error, "fallback": fallback,
        **presentation.board_table(result, weights, rows, column, descending)}, status=400 if error else 200)


def model_page(request, pk):
    """A model's public page: per-dataset metrics with intervals and a chart; for its
    owner and the task's researchers, its evaluation jobs and their logs."""
    model = ModelVersion.objects.select_related("task", "created_by").filter(pk=pk).first()
    if model is None or not Task.objects.visible_to(request.user).filter(pk=model.task_id).exists() \
            or not board.visible_models(model.task, request.user).filter(pk=pk).exists():
        raise Http404("No such model.")
    mine = request.user.is_authenticated and (model.created_by_id == request.user.pk
                                              or is_researcher(request.user, model.task))
    evaluation_jobs = list(Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, params__model_version=model.pk)
                           .order_by("-created_at")[:5]) if mine else []
    return render(request, "leaderboard/model.html", {
        "model": model, "task": model.task, **presentation.model_table(model), "jobs": evaluation_jobs, "mine": mine})


def _submission_refused(request, exc, slug):
    """The submit page again, with the reason an upload over the size limit was refused (413)."""
    task = get_object_or_404(Task.objects.visible_to(request.user), slug=slug)
    return render(request, "leaderboard/submit.html", _submit_context(task, exc.message, ""), status=413)


def _submit_context(task, error, name) -> dict:
    return {"task": task, "error": error, "name": name, "max_size": f"{settings.SUBMISSION_MAX_BYTES / 1e6:g} MB"}


@login_required
@bounded_uploads(lambda: settings.SUBMISSION_MAX_BYTES, _submission_refused)
def submit_page(request, slug):
    """Upload a model (signed-in users): the same service as the API. The model is
    checked by a job; the page sends the submitter to it."""
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    error, status = None, 200
    if request.method == "POST":
        try:
            job = submit_model(task, request.user, request.FILES.get("file"),
                               name=request.POST.get("name", ""), public=request.POST.get("public") == "on")
        except TooLarge as exc:
            return _submission_refused(request, exc, slug)
        except DomainError as exc:
            error, status = str(exc), 400
        else:
            messages.success(request, f"{job.params['name']} was received; job #{job.pk} checks it, and once it "
                                      "passes it is registered and evaluated.")
            return redirect(job.get_absolute_url())
    return render(request, "leaderboard/submit.html", _submit_context(task, error, request.POST.get("name", "")),
                  status=status)

