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

from annotation.models import ReliabilityFit
from annotation.services import reliability, stats
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
from tasks.models import Round, Task
from tasks.roles import is_researcher

from . import board, cycle
from .releases import browse


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
            messages.success(request, f"Round {rnd.number} is open with {', '.join(m.name for m in rnd.target_models.all())} "
                                      "as its target.")
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
    from tasks.api import visible_jobs

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
        "recipe": _job_recipe(job, model), "scores": _job_scores(job, model),
        "Status": Job.Status, "Round": Round})


def _job_recipe(job, model) -> dict | None:
    """A training job's recipe as its page shows it: the options it was queued with
    (where they came from) and, once trained, the steps and epochs it ran."""
    if job.kind != Job.Kind.TRAIN_MODEL:
        return None
    params = job.params
    options = params.get("options") or {}
    trained = (model.metrics or {}) if model is not None else {}
    rounds = params.get("rounds")
    return {"options": [(key.replace("_", " "), options[key]) for key in ("epochs", "batch_size", "lr", "seed",
                                                                          "max_steps", "backbone") if key in options],
            "mode": training.MODES.get(params.get("mode", "full"), params.get("mode")),
            "selection": training.SELECTIONS.get(params.get("selection", "verified")),
            "rounds": "every collection round" if rounds is None else (", ".join(map(str, rounds)) or "none"),
            "include_static": params.get("include_static", True), "source": params.get("recipe") or {},
            "steps": trained.get("steps"), "epochs_run": trained.get("epochs_run"),
            "train_count": trained.get("train_count")}


def _job_scores(job, model) -> dict | None:
    """A finished evaluation job's result: the model's score on each round's test set
    (with its interval and number of examples) and the promotion decision, if any."""
    if job.kind != Job.Kind.EVALUATE_MODEL or job.status != Job.Status.SUCCEEDED or model is None:
        return None
    from .models import Evaluation
    from .rows import primary_metric

    metric = primary_metric(model.task)
    found = Evaluation.objects.filter(model_version=model, split=job.params.get("split", "test"))
    mine = found.filter(job=job)
    rows = []
    for evaluation in (mine if mine.exists() else found).select_related("round").order_by("round__number"):
        interval = evaluation.intervals.get(metric)
        rows.append({"round": evaluation.round.number, "n": evaluation.num_examples,
                     "value": evaluation.metrics.get(metric), "low": interval[0] if interval else None,
                     "high": interval[1] if interval else None, "error_rate": evaluation.model_error_rate})
    return {"metric": metric, "rows": rows, "promotion": (job.result.get("promotion") or {}).get("reason")}


METRIC_LABELS = [("calibration", "ECE"), ("throughput", "Examples/s"), ("memory", "Memory (MB)"),
                 ("robustness", "Robustness"), ("fairness", "Fairness")]
# Decimals shown: scores between 0 and 1 keep three; examples per second and megabytes
# are read as whole and tenths (no "90.474 examples/s").
DIGITS = {"throughput": 0, "memory": 1}


def _cell(metric: dict | None, digits: int) -> dict:
    """A number and its interval, formatted once here (the template's floatformat
    costs a Decimal per number: at 200 models x 10 datasets that was most of the page)."""
    if not metric or metric.get("value") is None:
        return {"value": "—", "interval": ""}
    low, high = metric.get("ci_low"), metric.get("ci_high")
    interval = f"[{low:.{digits}f}, {high:.{digits}f}]" if low is not None and high is not None else ""
    return {"value": f"{metric['value']:.{digits}f}", "interval": interval}


def _count(n) -> str:
    """A parameter count as people read it: 22.7 M, 850 k, 1.2 B."""
    if n is None:
        return "—"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def leaderboard_page(request, slug):
    """A task's public leaderboard: sortable columns, weight sliders (a GET form, so a
    reweighted board is a link), intervals, ties, and the CSV/JSON exports."""
    from .api import parse_dataset_weights_param, parse_weights_param
    from .board import SORTABLE, board_json, dataset_number, sort_rows
    from .dynascore import METRICS, format_weights

    wait = page_wait(request)
    if wait:
        return too_many(request, wait, "requests from here")
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    if any(name in request.GET for name in METRICS):  # the sliders: one field per metric
        text = ",".join(f"{name}:{request.GET[name]}" for name in METRICS if name in request.GET)
    else:
        text = request.GET.get("weights")
    sliders = [key for key in request.GET if key.startswith("dataset-")]
    if sliders:  # one slider per dataset, named by its round number
        dataset_text = ",".join(f"{key.removeprefix('dataset-')}:{request.GET[key]}" for key in sliders)
    else:
        dataset_text = request.GET.get("dataset_weights")
    try:
        weights = parse_weights_param(text)
        dataset_weights = parse_dataset_weights_param(dataset_text)
        result = board_json(task, weights, request.user, dataset_weights)
    except DomainError as exc:
        # The form stays, with what was sent and the message beside it.
        from .dynascore import DEFAULT_WEIGHTS

        sent = [{"name": name, "value": request.GET.get(name, DEFAULT_WEIGHTS[name])} for name in METRICS]
        return render(request, "leaderboard/leaderboard.html", {
            "task": task, "error": str(exc), "weights": sent,
            "rows": [], "query": ""}, status=400)
    column = request.GET.get("sort", "rank")
    if column not in SORTABLE and column not in result["datasets"]:
        column = "rank"
    descending = request.GET.get("dir", "asc" if column in ("rank", "name", "calibration") else "desc") == "desc"
    rows = sort_rows(result["rows"], column, descending, result["datasets"])
    weights_text = format_weights(weights)
    numbers = {name: dataset_number(name) for name in result["datasets"]}
    dataset_text = ",".join(f"{numbers[name]}:{weight:g}" for name, weight in result["dataset_weights"].items()
                            if weight != 1)
    query = urlencode({"weights": weights_text, **({"dataset_weights": dataset_text} if dataset_text else {})})
    shown = [name for name, _ in METRIC_LABELS if any(name in row["metrics"] for row in rows)]
    columns = [("rank", "Rank"), ("name", "Model"), ("dynascore", "Dynascore"), ("performance", "Performance"),
               *[(name, name.capitalize()) for name in result["datasets"]],
               *[(name, label) for name, label in METRIC_LABELS if name in shown],
               ("parameters", "Parameters"), ("created", "Date")]
    for row in rows:
        row["parameters_text"] = _count(row["model"].get("parameters"))
        row["cells"] = [_cell(row["metrics"].get("performance"), 3),
                        *[_cell(row["datasets"][name], 3) for name in result["datasets"]],
                        *[_cell(row["metrics"].get(name), DIGITS.get(name, 3)) for name in shown]]
        row["dynascore_cell"] = _cell({"value": row["dynascore"], "ci_low": row.get("dynascore_ci_low"),
                                       "ci_high": row.get("dynascore_ci_high")}, 4)
    headers = [{"key": key, "label": label, "active": key == column,
                "arrow": ("▼" if descending else "▲") if key == column else "",
                "next_dir": "asc" if key == column and descending else "desc"} for key, label in columns]
    return render(request, "leaderboard/leaderboard.html", {
        "task": task, "rows": rows, "datasets": result["datasets"], "headers": headers, "sort": column,
        # A metric no ranked model has (shown as "—") offers no weight: it weighs nothing.
        "weights": [{"name": name, "value": weights[name]} for name in METRICS
                    if name == "performance" or any(name in row["metrics"] for row in rows if row.get("rank"))],
        "weights_text": weights_text,
        "dataset_sliders": [{"field": f"dataset-{numbers[name]}", "name": name, "value": weight}
                            for name, weight in result["dataset_weights"].items()],
        "query": query,
    })


def model_page(request, pk):
    """A model's public page: per-dataset metrics with intervals and a chart; for its
    owner and the task's researchers, its evaluation jobs and their logs."""
    from django.utils.safestring import mark_safe

    from tasks.charts import interval_chart

    from .board import STORED, dataset_name, visible_models
    from .models import Evaluation
    from .rows import primary_metric

    model = ModelVersion.objects.select_related("task", "created_by").filter(pk=pk).first()
    if model is None or not Task.objects.visible_to(request.user).filter(pk=model.task_id).exists() \
            or not visible_models(model.task, request.user).filter(pk=pk).exists():
        raise Http404("No such model.")
    metric = primary_metric(model.task)
    evaluations = list(Evaluation.objects.filter(model_version=model, split="test").select_related("round")
                       .only("round__number", "metrics", "intervals", "num_examples").order_by("round__number"))
    names = ["performance", *STORED]
    keys = {"performance": metric, **STORED}
    rows = []
    for evaluation in evaluations:
        cells = []
        for name in names:
            key = keys[name]
            low, high = (evaluation.intervals.get(key) or (None, None))
            cell = {"value": evaluation.metrics.get(key), "low": low, "high": high}
            if name in ("robustness", "fairness") and evaluation.metrics.get(f"{key}_n") is not None:
                # Measured only where a perturbation changed the text: how many, and the
                # interval of that count over the same resamples.
                n_low, n_high = (evaluation.intervals.get(f"{key}_n") or (None, None))
                cell["n"] = {"value": int(evaluation.metrics[f"{key}_n"]), "low": n_low, "high": n_high}
            cells.append(cell)
        rows.append({"dataset": dataset_name(evaluation.round), "n": evaluation.num_examples, "cells": cells})
    chart = interval_chart([(r["dataset"], r["cells"][0]["value"], r["cells"][0]["low"], r["cells"][0]["high"])
                            for r in rows], title=f"{model.name}: {metric} by dataset")
    mine = request.user.is_authenticated and (model.created_by_id == request.user.pk
                                              or is_researcher(request.user, model.task))
    evaluation_jobs = list(Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, params__model_version=model.pk)
                           .order_by("-created_at")[:5]) if mine else []
    return render(request, "leaderboard/model.html", {
        "model": model, "task": model.task, "metric": metric, "names": names, "rows": rows,
        "chart": mark_safe(chart),  # built from numbers and escaped names only (tasks/charts.py)
        "jobs": evaluation_jobs, "mine": mine})


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
    from .submissions import submit_model

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

