"""The replay's report: one or more seeds' raw scores pooled into accuracies with
intervals, paired gains and the control's comparison. Pure functions, no Django.

``build_report(plan, runs, ...)`` takes what ``run.Replay.run`` returns for each
seed (per-example 1/0 scores of every model on every test set and suite) and
returns the JSON-ready report that ``report.write_outputs`` writes; the schema is
in ``leaderboard.replay.report``'s docstring. The per-example scores themselves
are not kept: the report holds what the tables show.
"""

from __future__ import annotations

from collections import defaultdict

from . import stats
from .data import ReplayPlan, plan_summary


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
                 control: str | None, training: dict, started_at: str, seconds: float) -> dict:
    data = plan_summary(plan)
    report = {
        "task": task, "mode": mode, "strategy": strategy, "control": control,
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
                 "train_seconds": stats.mean([e["train_seconds"] for e in entries]), **_scored(entries)}
        if i:
            before = [chain[i - 1] for chain in chains]
            name = first["name"]
            entry["gain_over_previous"] = {
                "test_set": name, "previous_model": before[0]["model"],
                **stats.paired_difference([e["scores"][name] for e in entries],
                                          [e["scores"][name] for e in before], name)}
        report["rounds"].append(entry)

    if control:
        controls = [run["controls"][control] for run in runs]
        rounds = [{"number": chains[0][0]["number"], "name": chains[0][0]["name"], "model": chains[0][0]["model"],
                   "control_for": chains[0][0]["model"], **_scored([chain[0] for chain in chains])}]
        for j, first in enumerate(controls[0]):
            entries = [c[j] for c in controls]
            adversarial = [chain[j + 1] for chain in chains]
            rounds.append({"number": first["number"], "name": first["name"], "model": first["model"],
                           "control_for": first["control_for"], "training_rows": first["training_rows"],
                           "train_seconds": stats.mean([e["train_seconds"] for e in entries]), **_scored(entries)})
            report["rounds"][j + 1]["vs_control"] = _compare(adversarial, entries)
        report["controls"][control] = {
            "description": "the same recipe with as many fresh static examples in place of each round's "
                           "adversarial ones (round 0: M0 itself)",
            "rounds": rounds}

    report["runs"] = [
        {"seed": run["seed"], "slug": run["slug"], "seconds": run.get("seconds"),
         "rounds": [{"number": e["number"], "model": e["model"], "collection": e["collection"],
                     "train_seconds": e["train_seconds"], "training": (e.get("training") or {}).get("counts")}
                    for e in run["rounds"]],
         "controls": {name: [{"number": e["number"], "model": e["model"], "train_seconds": e["train_seconds"],
                              "training_rows": e["training_rows"]} for e in chain]
                      for name, chain in run["controls"].items()}}
        for run in runs]
    return report
