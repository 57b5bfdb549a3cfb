"""``bench/validation.py``'s results in words and tables: the task config's default rule
against the simple rules the frontier names, and the block of ``bench/RESULTS.md`` made
from ``bench/results/validation.json``. Pure functions of the JSON (the targets and the
comparisons too), here so that ``report_sections`` renders the block without importing
the script.

Every share is over all examples: an example is decided correctly by the crowd, decided
wrongly, or escalated to a researcher (a cost, its own column: the researcher's answer is
not counted as the crowd's)."""

from __future__ import annotations

from .frontier_report import SPAMMER_MIXES, beats, by_mix, mean, mix_name
from .results import markdown_table

# The rules a run compares, by their part in it (``runs[].role``), in the table's order:
# what the block calls each, and why the frontier names it.
ROLES = {
    "default": "the task config's default",
    "strongest": "the strongest simple rule",
    "nearest_cost": "the simple rule nearest in cost",
}
WHY = {
    "strongest": "the one the frontier's choice rule picks when only the simple rules compete",
    "nearest_cost": "the one whose votes per example without spammers are nearest the default's",
}
SPAM20 = {"always_correct": 0.2, "random": 0.0}


def _runs(runs: list[dict], policy: str, spammers: dict) -> list[dict]:
    return sorted((r for r in runs if r["policy"] == policy and r["spammers"] == spammers), key=lambda r: r["seed"])


def roles(document: dict) -> dict[str, str]:
    """``{role: policy name}`` of the run, in ``ROLES`` order."""
    named = document["setup"]["roles"]
    return {role: named[role] for role in ROLES if role in named}


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def table(document: dict) -> str:
    """Per spammer mix and rule: votes per example and the share decided correctly (mean,
    the seeds' range, each seed, the widest of the seeds' 95% Wilson intervals), decided
    wrongly and escalated (means over the seeds)."""
    order = list(dict.fromkeys(roles(document).values()))
    rows = []
    for spammers in SPAMMER_MIXES:
        for policy in order:
            chosen = _runs(document["runs"], policy, spammers)
            if not chosen:
                continue
            votes = [r["votes_per_example"] for r in chosen]
            right = [r["accuracy"]["value"] for r in chosen]
            low = min(r["accuracy"]["ci_low"] for r in chosen)
            high = max(r["accuracy"]["ci_high"] for r in chosen)
            rows.append([
                mix_name(spammers), policy,
                f"{mean(votes):.3f} ({min(votes):.3f}–{max(votes):.3f})",
                f"{_pct(mean(right))}% ({_pct(min(right))}–{_pct(max(right))}; {_pct(low)}–{_pct(high)})",
                " / ".join(_pct(a) for a in right),
                f"{_pct(mean(r['wrong'] for r in chosen))}%",
                f"{_pct(mean(r['escalated'] for r in chosen))}%",
            ])
    return markdown_table(["Spammers (share of votes)", "Rule", "Votes per example, mean (seeds' range)",
                           "Decided correctly, mean (seeds' range; widest 95% interval)",
                           "Decided correctly, per seed", "Decided wrongly", "Escalated"], rows)


def check_targets(runs: list[dict], named: dict[str, str]) -> list[dict]:
    """Issue 23's targets for the default rule, each against every simple rule beside it:
    at least 30% fewer votes per example (real annotators, mean over seeds); accuracy over
    every example no lower than the low end of the simple rule's 95% interval (real
    annotators, every seed); and, the default alone, with 20% "always correct" spammers,
    accuracy within one point of the spammer-free run (mean over seeds)."""
    clean = SPAMMER_MIXES[0]
    default = named["default"]
    mine = _runs(runs, default, clean)
    targets = []
    for role, rival in named.items():
        if role == "default":
            continue
        theirs = _runs(runs, rival, clean)
        saving = 1 - mean(r["votes_per_example"] for r in mine) / mean(r["votes_per_example"] for r in theirs)
        targets.append({"target": f"at least 30% fewer votes per example than {rival} (real annotators, "
                                  "mean over seeds)", "against": rival, "value": saving, "met": saving >= 0.30})
        ok = [a["accuracy"]["value"] >= b["accuracy"]["ci_low"] for a, b in zip(mine, theirs, strict=True)]
        targets.append({"target": f"accuracy over every example no lower than the low end of {rival}'s 95% "
                                  "interval (real annotators, every seed)", "against": rival,
                        "value": sum(ok), "of": len(ok), "met": all(ok)})
    drop = mean(r["accuracy"]["value"] for r in mine) - mean(r["accuracy"]["value"]
                                                             for r in _runs(runs, default, SPAM20))
    targets.append({"target": "with 20% 'always correct' spammers, accuracy within 1 point of the spammer-free "
                              "run (mean over seeds)", "against": None, "value": -drop, "met": drop <= 0.01})
    return targets


def comparison_sentences(document: dict) -> list[str]:
    """For each simple rule beside the default: at which spammer mixes one beats the other
    (as few or fewer votes per example at as high or higher accuracy, one strictly) in every
    seed, and where the seeds do not agree on either."""
    named = roles(document)
    default = named["default"]
    table_ = by_mix(document["runs"])
    lines = []
    for role, rival in named.items():
        if role == "default" or rival == default:
            continue
        won, lost, neither = [], [], []
        for spammers in SPAMMER_MIXES:
            per_policy = table_.get(tuple(sorted(spammers.items())))
            if not per_policy or default not in per_policy or rival not in per_policy:
                continue
            seeds = sorted(per_policy[default].keys() & per_policy[rival].keys())
            label = mix_name(spammers)
            if seeds and all(beats(per_policy[default][s], per_policy[rival][s]) for s in seeds):
                won.append(label)
            elif seeds and all(beats(per_policy[rival][s], per_policy[default][s]) for s in seeds):
                lost.append(label)
            else:
                neither.append(label)
        lines.append(f"- Against {rival}, {ROLES[role]}: {default} beats it in every seed at "
                     f"{', '.join(won) or 'no mix'}; {rival} beats {default} in every seed at "
                     f"{', '.join(lost) or 'no mix'}; neither beats the other in every seed at "
                     f"{', '.join(neither) or 'no mix'}.")
    return lines


def doc_block(document: dict) -> str:
    """The table in bench/RESULTS.md, the comparisons and the targets, from a run's JSON."""
    setup = document["setup"]
    named = roles(document)
    default = setup["default"]
    timed = [r for r in document["runs"] if r.get("refit_ms_mean") is not None]
    refit_ms = sum(r["refit_ms_mean"] for r in timed) / len(timed) if timed else None
    bounds = (f" ({default['min_votes']} to {default['max_votes']} votes, refitted every {setup['refit_every']} "
              "votes" + (f"; a refit's EM took {refit_ms:.1f} ms on average" if refit_ms is not None else "")
              + ")") if default["family"] == "adaptive" else ""
    beside = "; ".join(f"{ROLES[role]}, {name} ({WHY[role]})" for role, name in named.items() if role != "default")
    facts = (f"From `bench/results/validation.json`: {document['data']['cases']} HateCheck cases, "
             f"{document['data']['annotators_per_case']} real annotators each, {setup['flip']:.0%} of the "
             f"writers' labels flipped, {document['seeds']} seeds on the same streams for every rule. "
             f"{ROLES['default'].capitalize()}: {named['default']}{bounds}. Beside it, as "
             f"`{setup['frontier']}` names them: {beside}. Every share is over all examples; an escalated "
             "example counts as escalated, not as decided correctly.")
    targets = "; ".join(f"{'met' if t['met'] else 'NOT met'}: {t['target']}" for t in document["targets"])
    return "\n\n".join([facts, table(document), "\n".join(comparison_sentences(document)),
                        f"Issue 23's targets for the default: {targets}."]) + "\n"
