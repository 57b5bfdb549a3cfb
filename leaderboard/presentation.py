"""What the leaderboard's pages show, built from what the services return: the
public board's table (columns, sort headers, formatted cells, the weight sliders),
a model's per-dataset rows and chart, and a job's recipe and scores.

Formatting only: no rule is decided here (who sees what, which weights are valid
and how models rank belong to ``board``, ``dynascore`` and ``promotion``). The
views parse the request, call a service, pass its result through here and render."""

from __future__ import annotations

from urllib.parse import urlencode

from django.utils.safestring import mark_safe

from jobs.models import Job
from tasks.charts import interval_chart

from . import training
from .board import STORED, dataset_name, dataset_number
from .dynascore import METRICS, format_weights
from .models import Evaluation
from .rows import primary_metric

METRIC_LABELS = [("calibration", "ECE"), ("throughput", "Examples/s"), ("memory", "Memory (MB)"),
                 ("robustness", "Robustness"), ("fairness", "Fairness")]
# Decimals shown: scores between 0 and 1 keep three; examples per second and megabytes
# are read as whole and tenths (no "90.474 examples/s").
DIGITS = {"throughput": 0, "memory": 1}
# What a model behind an endpoint cannot have measured here (its memory is the server's).
REMOTE_CELL = {"value": "remote", "interval": ""}


def cell(metric: dict | None, digits: int) -> dict:
    """A number and its interval, formatted once here (the template's floatformat
    costs a Decimal per number: at 200 models x 10 datasets that was most of the page)."""
    if not metric or metric.get("value") is None:
        return {"value": "—", "interval": ""}
    low, high = metric.get("ci_low"), metric.get("ci_high")
    interval = f"[{low:.{digits}f}, {high:.{digits}f}]" if low is not None and high is not None else ""
    return {"value": f"{metric['value']:.{digits}f}", "interval": interval}


def count(n) -> str:
    """A parameter count as people read it: 22.7 M, 850 k, 1.2 B."""
    if n is None:
        return "—"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def board_table(result: dict, weights: dict, rows: list[dict], column: str, descending: bool) -> dict:
    """The board page's context from ``board_json``'s result and its rows in the order
    shown: the columns (only the metrics some model has), each row's formatted cells,
    the sort headers, the weight sliders and the query string that reproduces the board."""
    datasets = result["datasets"]
    weights_text = format_weights(weights)
    numbers = {name: dataset_number(name) for name in datasets}
    dataset_text = ",".join(f"{numbers[name]}:{weight:g}" for name, weight in result["dataset_weights"].items()
                            if weight != 1)
    query = urlencode({"weights": weights_text, **({"dataset_weights": dataset_text} if dataset_text else {})})
    shown = [name for name, _ in METRIC_LABELS if any(name in row["metrics"] for row in rows)]
    ranked = [row for row in rows if row.get("rank")]
    weighed = {name for name in METRICS if ranked and all(name in row["metrics"] for row in ranked)}
    columns = [("rank", "Rank"), ("name", "Model"), ("dynascore", "Dynascore"), ("performance", "Performance"),
               *[(name, name.capitalize()) for name in datasets],
               *[(name, label) for name, label in METRIC_LABELS if name in shown],
               ("parameters", "Parameters"), ("created", "Date")]
    for row in rows:
        row["parameters_text"] = count(row["model"].get("parameters"))
        row["cells"] = [cell(row["metrics"].get("performance"), 3),
                        *[cell(row["datasets"][name], 3) for name in datasets],
                        *[REMOTE_CELL if name in row.get("remote_metrics", ()) else
                          cell(row["metrics"].get(name), DIGITS.get(name, 3)) for name in shown]]
        row["dynascore_cell"] = cell({"value": row["dynascore"], "ci_low": row.get("dynascore_ci_low"),
                                      "ci_high": row.get("dynascore_ci_high")}, 4)
    headers = [{"key": key, "label": label, "active": key == column,
                "arrow": ("▼" if descending else "▲") if key == column else "",
                "next_dir": "asc" if key == column and descending else "desc"} for key, label in columns]
    return {
        "rows": rows, "datasets": datasets, "headers": headers, "sort": column,
        # A metric that some ranked model lacks (shown as "—" or "remote") is in no model's
        # Dynascore (``board.build``): it offers no weight, since it weighs nothing.
        "weights": [{"name": name, "value": weights[name]} for name in METRICS
                    if name == "performance" or name in weighed],
        "weights_text": weights_text,
        "dataset_sliders": [{"field": f"dataset-{numbers[name]}", "name": name, "value": weight}
                            for name, weight in result["dataset_weights"].items()],
        "query": query,
        # Shown for some models, weighed for none: the page says why (a model behind an endpoint).
        "left_out": [{"label": label,
                      "remote": [row["model"]["name"] for row in ranked if name in row.get("remote_metrics", ())]}
                     for name, label in METRIC_LABELS if name in shown and name not in weighed],
        **board_notes(rows),
    }


def board_notes(rows: list[dict]) -> dict:
    """Which of the page's notes on reading the Dynascore this board needs: ``one_model``
    (a single ranked model, whose other metrics no comparison can price) and
    ``negative`` (a Dynascore, or an end of its interval, below 0)."""
    ranked = [row for row in rows if row.get("rank") is not None]
    return {"one_model": len(ranked) == 1,
            "negative": any(value is not None and value < 0 for row in ranked
                            for value in (row["dynascore"], row.get("dynascore_ci_low")))}


def model_table(model) -> dict:
    """A model's page: its test scores per dataset (the primary metric and the stored
    ones, each with its interval) and the chart of the primary metric."""
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
            entry = {"value": evaluation.metrics.get(key), "low": low, "high": high,
                     "remote": key in evaluation.metrics.get("remote", ())}  # the endpoint's to know, not ours
            if name in ("robustness", "fairness") and evaluation.metrics.get(f"{key}_n") is not None:
                # Measured only where a perturbation changed the text: how many, and the
                # interval of that count over the same resamples.
                n_low, n_high = (evaluation.intervals.get(f"{key}_n") or (None, None))
                entry["n"] = {"value": int(evaluation.metrics[f"{key}_n"]), "low": n_low, "high": n_high}
            cells.append(entry)
        rows.append({"dataset": dataset_name(evaluation.round), "n": evaluation.num_examples, "cells": cells})
    chart = interval_chart([(r["dataset"], r["cells"][0]["value"], r["cells"][0]["low"], r["cells"][0]["high"])
                            for r in rows], title=f"{model.name}: {metric} by dataset")
    return {"metric": metric, "names": names, "rows": rows,
            "chart": mark_safe(chart)}  # built from numbers and escaped names only (tasks/charts.py)


def job_recipe(job, model) -> dict | None:
    """A training job's recipe as its page shows it: the options it was queued with
    (where they came from) and, once trained, the steps and epochs it ran."""
    if job.kind != Job.Kind.TRAIN_MODEL:
        return None
    params = job.params
    options = params.get("options") or {}
    trained = (model.metrics or {}) if model is not None else {}
    rounds = params.get("rounds")
    option_keys = ("epochs", "batch_size", "lr", "seed", "max_steps", "backbone")
    return {"options": [(key.replace("_", " "), options[key]) for key in option_keys if key in options],
            "mode": training.MODES.get(params.get("mode", "full"), params.get("mode")),
            "selection": training.SELECTIONS.get(params.get("selection", "verified")),
            "rounds": "every collection round" if rounds is None else (", ".join(map(str, rounds)) or "none"),
            "include_static": params.get("include_static", True), "source": params.get("recipe") or {},
            "steps": trained.get("steps"), "epochs_run": trained.get("epochs_run"),
            "train_count": trained.get("train_count")}


def job_scores(job, model) -> dict | None:
    """A finished evaluation job's result: the model's score on each round's test set
    (with its interval and number of examples) and the promotion decision, if any."""
    if job.kind != Job.Kind.EVALUATE_MODEL or job.status != Job.Status.SUCCEEDED or model is None:
        return None
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
