"""The replay's report: one or more seeds' raw scores pooled into accuracies with
intervals, paired gains and the control's comparison. Pure functions, no Django.

``build_report(plan, runs, ...)`` takes what ``run.Replay.run`` returns for each
seed (per-example 1/0 scores of every model on every test set and suite) and
returns the JSON-ready report that ``report.write_outputs`` writes; the schema is
in ``replay.report``'s docstring, and with several seeds ``replay.spread`` adds the
seeds' spread beside every per-seed value. The per-example scores themselves
are not kept: the report holds what the tables show.
"""

from __future__ import annotations

from collections import defaultdict

from . import stats
from .controls import DESCRIPTIONS, control_names
from .data import ReplayPlan, plan_summary
from .spread import add_spreads


def _suite_stats(name: str, scored: list[dict]) -> dict:
    """A suite's accuracy with its interval, overall and per functionality; a cluster
    bootstrap over its templates where the scores name them (``clusters``)."""
    groups, clusters = scored[0]["groups"], scored[0].get("clusters")
    out = stats.accuracy([s["scores"] for s in scored], name, clusters=clusters)
    members: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    out["by_functionality"] = {
        group: stats.accuracy([[s["scores"][i] for i in idx] for s in scored], f"{name}:{group}",
                              clusters=None if clusters is None else [clusters[i] for i in idx])
        for group, idx in sorted(members.items())}
    return out


def _scored(entries: list[dict]) -> dict:
    """``test`` and ``functional`` of one model (one entry per seed)."""
    first = entries[0]
    test = {name: stats.accuracy([e["scores"][name] for e in entries], name) for name in first["scores"]}
    functional = {name: _suite_stats(name, [e["functional"][name] for e in entries])
                  for name in first.get("functional") or {}}
    return {"test": test, "functional": functional}


def _compare(better: list[dict], worse: list[dict]) -> dict:
    """Paired differences of two models (per seed) on every test set and suite both have."""
    out = {}
    for name in better[0]["scores"]:
        if name in worse[0]["scores"]:
            out[name] = stats.paired_difference([e["scores"][name] for e in better],
                                                [e["scores"][name] for e in worse], name)
    for name in better[0].get("functional") or {}:
        if name in (worse[0].get("functional") or {}):
            out[name] = stats.paired_difference([e["functional"][name]["scores"] for e in better],
                                                [e["functional"][name]["scores"] for e in worse], name,
                                                clusters=better[0]["functional"][name].get("clusters"))
    return out


def _majority_scores(plan: ReplayPlan, report_references: dict) -> dict[str, tuple[list[float], list | None]]:
    """Per test set and suite: the majority answer's 1/0 score per example (in the plan's
    order, as the models' scores are) and the suite's template clusters (None: by example)."""
    out = {}
    for data in plan.rounds:
        label = ((report_references.get(data.name) or {}).get("majority") or {}).get("label")
        out[data.name] = ([float(r.label == label) for r in data.test], None)
    for suite in plan.suites:
        label = ((report_references.get(suite.name) or {}).get("majority") or {}).get("label")
        out[suite.name] = ([float(r.label == label) for r in suite.records], suite.clusters())
    return out


def _vs_majority(entries: list[dict], majority: dict) -> dict:
    """A model (one entry per seed) against the majority answer on every set and suite it was
    scored on: paired differences (the constant's scores against the model's, example by example)."""
    out = {}
    for name in entries[0]["scores"]:
        if name in majority and len(majority[name][0]) == len(entries[0]["scores"][name]):
            out[name] = stats.paired_difference([e["scores"][name] for e in entries],
                                                [majority[name][0]] * len(entries), name)
    for name in entries[0].get("functional") or {}:
        scores = [e["functional"][name]["scores"] for e in entries]
        if name in majority and len(majority[name][0]) == len(scores[0]):
            out[name] = stats.paired_difference(scores, [majority[name][0]] * len(entries), name,
                                                clusters=entries[0]["functional"][name].get("clusters"))
    return out


def _collection(entries: list[dict]) -> tuple[float | None, dict | None]:
    collections = [e["collection"] for e in entries]
    if collections[0] is None:
        return None, None
    rates = [c["model_error_rate"] for c in collections]
    rate = stats.mean(rates)
    submitted = round(stats.mean([c["submitted"] for c in collections]) or 0)
    low, high = stats.wilson(round((rate or 0) * submitted), submitted)
    first = collections[0]
    return rate, {"submitted": first["submitted"], "fooled": first["fooled"], "refused": first.get("refused", 0),
                  "model_error_rate": rate, "ci_low": low, "ci_high": high, "target": first["target"],
                  "by_seed": rates}


def build_report(plan: ReplayPlan, runs: list[dict], *, task: str, mode: str, strategy: str,
                 control, training: dict, started_at: str, seconds: float) -> dict:
    """``control``: None, a control's name or a list of them (``controls.control_names``);
    the report's ``control`` is the first (null: none), ``control_names`` all of them."""
    data = plan_summary(plan)
    names = control_names(control)
    majority = _majority_scores(plan, data["references"])
    report = {
        "task": task, "mode": mode, "strategy": strategy, "control": names[0] if names else None,
        "control_names": names,
        "seeds": [run["seed"] for run in runs], "training": training, "started_at": started_at,
        "seconds": seconds, "statistics": {"resamples": stats.RESAMPLES, "confidence": stats.CONFIDENCE},
        "data": data, "references": data["references"], "rounds": [], "controls": {},
    }
    chains = [run["rounds"] for run in runs]
    for i, first in enumerate(chains[0]):
        entries = [chain[i] for chain in chains]
        rate, collection = _collection(entries)
        entry = {"number": first["number"], "name": first["name"], "model": first["model"],
                 "error_rate_at_collection": rate, "collection": collection,
                 "train_seconds": stats.mean([e["train_seconds"] for e in entries]), **_scored(entries),
                 "vs_majority": _vs_majority(entries, majority)}
        if i:
            before = [chain[i - 1] for chain in chains]
            name = first["name"]
            entry["gain_over_previous"] = {
                "test_set": name, "previous_model": before[0]["model"],
                **stats.paired_difference([e["scores"][name] for e in entries],
                                          [e["scores"][name] for e in before], name)}
        report["rounds"].append(entry)

    for control in names:
        controls = [run["controls"][control] for run in runs]
        rounds = [{"number": chains[0][0]["number"], "name": chains[0][0]["name"], "model": chains[0][0]["model"],
                   "control_for": chains[0][0]["model"], **_scored([chain[0] for chain in chains]),
                   "vs_majority": report["rounds"][0]["vs_majority"]}]
        for j, first in enumerate(controls[0]):
            entries = [c[j] for c in controls]
            adversarial = [chain[j + 1] for chain in chains]
            rounds.append({"number": first["number"], "name": first["name"], "model": first["model"],
                           "control_for": first["control_for"], "training_rows": first["training_rows"],
                           **({"fresh_labels": first["fresh_labels"]} if "fresh_labels" in first else {}),
                           "train_seconds": stats.mean([e["train_seconds"] for e in entries]), **_scored(entries),
                           "vs_majority": _vs_majority(entries, majority)})
            comparison = _compare(adversarial, entries)
            report["rounds"][j + 1].setdefault("vs_controls", {})[control] = comparison
            if control == names[0]:
                report["rounds"][j + 1]["vs_control"] = comparison
        report["controls"][control] = {"description": DESCRIPTIONS[control], "rounds": rounds}

    report["runs"] = [
        {"seed": run["seed"], "slug": run["slug"], "seconds": run.get("seconds"),
         "rounds": [{"number": e["number"], "model": e["model"], "collection": e["collection"],
                     "train_seconds": e["train_seconds"], "training": (e.get("training") or {}).get("counts")}
                    for e in run["rounds"]],
         "controls": {name: [{"number": e["number"], "model": e["model"], "train_seconds": e["train_seconds"],
                              "training_rows": e["training_rows"]} for e in chain]
                      for name, chain in run["controls"].items()}}
        for run in runs]
    return add_spreads(report)  # the seeds' spread beside every per-seed value
