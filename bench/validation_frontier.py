"""The validation rules on one cost-accuracy frontier: fixed k-matching for k = 1..4, a
lead-of-two rule with a cap, and the adaptive rule at several target confidences, on
the same vote streams, without spammers and with them.

    .venv/bin/python bench/validation_frontier.py             # 5 seeds, bench/results/validation-frontier.json
    .venv/bin/python bench/validation_frontier.py --seeds 3 --out /tmp/frontier.json
    .venv/bin/python bench/validation_frontier.py --quick     # 300 cases, 2 seeds, nothing written by default
    .venv/bin/python bench/report.py                          # the block in bench/RESULTS.md, from the JSON

The streams are ``bench/validation.py``'s (``sequences``: HateCheck's real annotators,
a seeded share of the writers' labels flipped, spammers at random positions), and so
are the two rules it already drives: ``run_fixed`` (the platform's
``num_matching_validations`` rule: the first side to reach k votes) and
``run_adaptive`` (``annotation.reliability``'s ``fit``, ``posterior_right`` and
``decide``, the functions the validation service calls, refitted as the periodic job
does). The rules:

- **fixed-k** for k = 1..4. With two answers (correct, incorrect) fixed-2 is "two
  matching, a third on disagreement": a third vote always settles a split. A stream
  that runs out of votes before k match goes to a researcher (fixed-4 on a 3-2 split).
- **lead-2, cap 5**: two matching decide; on a split, more votes until one side leads
  by two, and a researcher after five votes without a decision (the adaptive rule's
  default cap, with every vote weighted alike).
- **adaptive at each ``--targets`` confidence**, the task config's vote bounds.

Every example counts in every share: an example is decided correctly by the crowd,
decided wrongly, or escalated to a researcher (a cost, its own column; the researcher's
answer is not counted as the crowd's). "Accuracy" is decided correctly over all
examples; the votes per example include those spent on escalated examples.

A rule beats another when it uses as few or fewer votes per example at as high or
higher accuracy, one of them strictly. A comparison is stated only when it holds in
every seed on the same streams (a paired comparison). The frontier, per spammer mix:
the rules no other rule beats in every seed.

The default a task gets (``choose_default``): among the rules on the frontier at every
spammer mix (a task's spammer share is not known in advance), the one with the highest
worst-case accuracy over the mixes; rules whose worst case it does not beat in every
seed tie with it, and of those the one that decides the fewest examples wrongly at its
worst mix is chosen (a wrong decision goes into the training data unseen; an escalation
costs a researcher a look, and is seen), then the one with the fewest votes per example. The text under the tables is generated from the JSON by
``doc_block``, as the tables are.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from benchlib import RESULTS
from benchlib.data import data_dir
from benchlib.results import (
    command_line,
    library_versions,
    log,
    markdown_table,
    utc_now,
    write_json,
)
from validation import (
    SPAMMER_MIXES,
    Outcome,
    Sequence_,
    read_cases,
    run_adaptive,
    run_fixed,
    sequences,
    spam_label,
)

from annotation import reliability as R
from leaderboard.replay.stats import wilson

TARGETS = (0.9, 0.95, 0.99, 0.995, 0.998, 0.999, 0.9999)
FIXED_K = (1, 2, 3, 4)
LEAD, CAP = 2, 5


def policies(targets=TARGETS) -> list[dict]:
    """The rules compared, each a dict the runner and the report read."""
    rules = [{"name": f"fixed-{k}", "family": "fixed", "matching": k} for k in FIXED_K]
    rules.append({"name": f"lead-{LEAD}, cap {CAP}", "family": "lead", "lead": LEAD, "cap": CAP})
    rules += [{"name": f"adaptive {t:g}", "family": "adaptive", "target_confidence": t} for t in targets]
    return rules


def run_lead(stream: list[Sequence_], lead: int = LEAD, cap: int = CAP) -> Outcome:
    """Decide once one side leads by ``lead`` votes; a researcher after ``cap`` votes
    (or when the stream runs out) without a decision."""
    out = Outcome()
    for case in stream:
        yes = no = used = 0
        decision = None
        for _who, says in case.votes[:cap]:
            used += 1
            yes, no = yes + says, no + (not says)
            if abs(yes - no) >= lead:
                decision = yes > no
                break
        if decision is None:
            out.to_researchers += 1
            out.votes_on_researchers += used
            continue
        out.decided += 1
        out.votes_on_decided += used
        out.correct += decision == case.right
    return out


def run_policy(policy: dict, stream: list[Sequence_], bounds: dict, refit_every: int) -> Outcome:
    if policy["family"] == "fixed":
        return run_fixed(stream, policy["matching"])
    if policy["family"] == "lead":
        return run_lead(stream, policy["lead"], policy["cap"])
    rule = R.Rule(target_confidence=policy["target_confidence"], min_votes=bounds["min_votes"],
                  max_votes=bounds["max_votes"])
    return run_adaptive(stream, rule, refit_every)


def measure(policy: dict, spammers: dict, seed: int, out: Outcome, cases: int) -> dict:
    """One run's shares, every one over all ``cases``."""
    low, high = wilson(out.correct, cases)
    return {
        "policy": policy["name"], "family": policy["family"], "spammers": dict(spammers), "seed": seed,
        "cases": cases,
        "votes_per_example": (out.votes_on_decided + out.votes_on_researchers) / cases,
        "accuracy": {"value": out.correct / cases, "ci_low": low, "ci_high": high},
        "wrong": (out.decided - out.correct) / cases,
        "escalated": out.to_researchers / cases,
        "accuracy_of_decided": out.correct / out.decided if out.decided else None,
    }


# --- the comparisons (pure functions of the runs) -----------------------------------------


def _key(spammers: dict) -> tuple:
    return tuple(sorted(spammers.items()))


def by_mix(runs: list[dict]) -> dict[tuple, dict[str, dict[int, dict]]]:
    """``{spammer mix: {policy: {seed: run}}}``."""
    table: dict = {}
    for run in runs:
        table.setdefault(_key(run["spammers"]), {}).setdefault(run["policy"], {})[run["seed"]] = run
    return table


def beats(a: dict, b: dict) -> bool:
    """Run ``a`` uses as few or fewer votes than ``b`` at as high or higher accuracy, one strictly."""
    va, vb = a["votes_per_example"], b["votes_per_example"]
    aa, ab = a["accuracy"]["value"], b["accuracy"]["value"]
    return va <= vb and aa >= ab and (va < vb or aa > ab)


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def means(per_seed: dict[int, dict]) -> dict:
    runs = list(per_seed.values())
    return {"votes_per_example": mean(r["votes_per_example"] for r in runs),
            "accuracy": {"value": mean(r["accuracy"]["value"] for r in runs)},
            "wrong": mean(r["wrong"] for r in runs), "escalated": mean(r["escalated"] for r in runs)}


def frontier(per_policy: dict[str, dict[int, dict]]) -> list[str]:
    """The policies no other beats in every seed (``beats_in_every_seed``), by mean votes
    per example: a rule leaves the frontier only on a comparison the seeds all agree on."""
    kept = [p for p in per_policy
            if not any(beats_in_every_seed(per_policy, q, p) for q in per_policy if q != p)]
    return sorted(kept, key=lambda p: (means(per_policy[p])["votes_per_example"], p))


def beats_in_every_seed(per_policy: dict[str, dict[int, dict]], a: str, b: str) -> bool:
    seeds = per_policy[a].keys() & per_policy[b].keys()
    return bool(seeds) and all(beats(per_policy[a][s], per_policy[b][s]) for s in seeds)


def comparisons(runs: list[dict]) -> list[dict]:
    """Per spammer mix: the frontier, and for each adaptive rule the simple rules it
    beats in every seed and those that beat it in every seed."""
    result = []
    for mix, per_policy in by_mix(runs).items():
        simple = [p for p in per_policy if not p.startswith("adaptive")]
        adaptive = [p for p in per_policy if p.startswith("adaptive")]
        result.append({
            "spammers": dict(mix), "frontier": frontier(per_policy),
            "adaptive": [{"policy": a,
                          "beats": [s for s in simple if beats_in_every_seed(per_policy, a, s)],
                          "beaten_by": [s for s in simple if beats_in_every_seed(per_policy, s, a)]}
                         for a in adaptive],
        })
    return result


def choose_default(runs: list[dict]) -> dict:
    """The rule a task should get when its config says nothing (the module's doc)."""
    table = by_mix(runs)
    names = list(next(iter(table.values())))
    everywhere = [p for p in names if all(p in frontier(per_policy) for per_policy in table.values())]
    seeds = sorted({r["seed"] for r in runs})
    worst = {p: [min(table[m][p][s]["accuracy"]["value"] for m in table) for s in seeds] for p in everywhere}
    worst_votes = {p: max(means(table[m][p])["votes_per_example"] for m in table) for p in everywhere}
    worst_wrong = {p: max(means(table[m][p])["wrong"] for m in table) for p in everywhere}
    best = max(everywhere, key=lambda p: (mean(worst[p]), -worst_votes[p]))
    tied = [p for p in everywhere if not all(b > w for b, w in zip(worst[best], worst[p], strict=True))]
    choice = min(tied, key=lambda p: (worst_wrong[p], worst_votes[p], p))
    return {"on_every_frontier": everywhere,
            "worst_accuracy_mean": {p: mean(worst[p]) for p in everywhere},
            "worst_votes_per_example": worst_votes, "worst_wrong": worst_wrong,
            "highest_worst_accuracy": best, "tied": tied, "choice": choice}


def mix_name(spammers: dict) -> str:
    label = spam_label(spammers)
    return "no spammers" if label == "none" else label


# --- the block in bench/RESULTS.md ---------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def mix_table(per_policy: dict[str, dict[int, dict]], order: list[str], on_frontier: list[str]) -> str:
    rows = []
    for name in order:
        if name not in per_policy:
            continue
        seeds = [per_policy[name][s] for s in sorted(per_policy[name])]
        avg = means(per_policy[name])
        votes = [r["votes_per_example"] for r in seeds]
        accuracy = [r["accuracy"]["value"] for r in seeds]
        rows.append([
            name,
            f"{avg['votes_per_example']:.3f} ({min(votes):.3f}–{max(votes):.3f})",
            f"{_pct(avg['accuracy']['value'])}% ({_pct(min(accuracy))}–{_pct(max(accuracy))})",
            " / ".join(_pct(a) for a in accuracy),
            f"{_pct(avg['wrong'])}%",
            f"{_pct(avg['escalated'])}%",
            "yes" if name in on_frontier else "",
        ])
    return markdown_table(["Rule", "Votes per example, mean (seeds' range)", "Decided correctly, mean (seeds' range)",
                           "Decided correctly, per seed", "Decided wrongly", "Escalated", "On the frontier"], rows)


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def verdicts(comparison: dict, seeds: int) -> list[str]:
    """Plain sentences, one per adaptive rule, from ``comparisons``' lists."""
    lines = []
    for entry in comparison["adaptive"]:
        place = "on the frontier" if entry["policy"] in comparison["frontier"] else "off the frontier"
        wins = (f"it uses as few or fewer votes at as high or higher accuracy than {_names(entry['beats'])}"
                if entry["beats"] else "it beats no simple rule")
        losses = (f"{_names(entry['beaten_by'])} beat{'s' if len(entry['beaten_by']) == 1 else ''} it that way"
                  if entry["beaten_by"] else "no simple rule beats it")
        lines.append(f"- {entry['policy']} is {place}; in every one of the {seeds} seeds {wins}, and {losses}.")
    return lines


def doc_block(document: dict) -> str:
    setup = document["setup"]
    order = [p["name"] for p in setup["policies"]]
    table = by_mix(document["runs"])
    parts = [
        f"From `bench/results/validation-frontier.json`: {document['data']['cases']} HateCheck cases, "
        f"{document['data']['annotators_per_case']} real annotators each, {setup['flip']:.0%} of the writers' "
        f"labels flipped, {document['seeds']} seeds on the same streams for every rule. Adaptive: "
        f"{setup['adaptive_bounds']['min_votes']} to {setup['adaptive_bounds']['max_votes']} votes, refitted "
        f"every {setup['refit_every']} votes. Every share is over all examples; \"decided correctly\" counts "
        f"an escalated example as not decided by the crowd."]
    for comparison in comparisons(document["runs"]):  # from the runs, not the stored copy
        mix = comparison["spammers"]
        parts.append(f"**{mix_name(mix).capitalize()}.** Frontier (fewest mean votes first): "
                     f"{_names(comparison['frontier'])}.\n\n"
                     + mix_table(table[_key(mix)], order, comparison["frontier"]) + "\n\n"
                     + "\n".join(verdicts(comparison, document["seeds"])))
    parts.append(where_adaptive_wins(document["runs"]))
    parts.append(default_sentence(document))
    return "\n\n".join(parts) + "\n"


def where_adaptive_wins(runs: list[dict]) -> str:
    """The summary: at which spammer mixes some adaptive rule beats each simple rule in
    every seed, and at which some simple rule beats every adaptive rule."""
    won, lost = [], []
    for comparison in comparisons(runs):
        label = mix_name(comparison["spammers"])
        beaten = sorted({s for e in comparison["adaptive"] for s in e["beats"]})
        if beaten:
            won.append(f"{label} (over {_names(beaten)})")
        if all(e["beaten_by"] for e in comparison["adaptive"]):
            lost.append(label)
    return ("Where the adaptive rule wins (some target beats a simple rule in every seed): "
            f"{_names(won)}. Where every adaptive target is beaten by some simple rule in every seed: "
            f"{_names(lost)}.")


def default_sentence(document: dict) -> str:
    chosen = choose_default(document["runs"])
    worst = chosen["worst_accuracy_mean"]
    ties = [p for p in chosen["tied"] if p != chosen["highest_worst_accuracy"]]
    current = document["setup"]["task_default"]
    return (f"The default by the rule above: on the frontier at every spammer mix: "
            f"{_names(chosen['on_every_frontier'])}; worst-case accuracy over the mixes (seeds' mean): "
            + ", ".join(f"{p} {_pct(worst[p])}%" for p in chosen["on_every_frontier"])
            + f"; highest: {chosen['highest_worst_accuracy']}"
            + (f", not higher in every seed than that of {_names(ties)}" if ties else "")
            + "; fewest decided wrongly at the worst mix among those (then fewest votes): "
            + ", ".join(f"{p} {_pct(chosen['worst_wrong'][p])}%" for p in chosen["tied"])
            + f": {chosen['choice']}. The task config's default when "
            f"this ran: {current} ({'the same rule' if current == chosen['choice'] else 'a different rule'}).")


# --- the run ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "validation-frontier.json")
    parser.add_argument("--data-dir", type=Path, help="default: $DYNABENCH_DATA_DIR, else var/data")
    parser.add_argument("--flip", type=float, default=0.2, help="share of mislabelled examples (default 0.2)")
    parser.add_argument("--targets", type=lambda s: tuple(float(x) for x in s.split(",")), default=TARGETS,
                        help="the adaptive rule's target confidences, comma-separated")
    parser.add_argument("--refit-every", type=int, default=200, help="votes between refits (default 200)")
    parser.add_argument("--quick", action="store_true", help="300 cases, 2 seeds, nothing written by default")
    args = parser.parse_args(argv)

    from tasks.config import DEFAULTS, VALIDATION_DEFAULTS

    path = (args.data_dir or data_dir()) / "hatecheck" / "all_annotations.csv"
    if not path.is_file():
        log(f"{path} not found: run manage.py fetch_data hatecheck, or set DYNABENCH_DATA_DIR")
        return 2
    cases = read_cases(path)
    seeds = 2 if args.quick else args.seeds
    if args.quick:
        cases = random.Random("quick").sample(cases, 300)
    bounds = {"min_votes": VALIDATION_DEFAULTS["min_votes"], "max_votes": VALIDATION_DEFAULTS["max_votes"]}
    rules = policies(args.targets)
    log(f"{len(cases)} cases from {path}; {seeds} seed(s); {len(rules)} rules; {len(SPAMMER_MIXES)} spammer mixes")
    started = time.perf_counter()
    runs = []
    for seed in range(seeds):
        for spammers in SPAMMER_MIXES:
            stream = sequences(cases, seed, args.flip, spammers)
            for policy in rules:
                runs.append(measure(policy, spammers, seed, run_policy(policy, stream, bounds, args.refit_every),
                                    len(cases)))
        log(f"seed {seed} done ({time.perf_counter() - started:.0f} s)")
    default = VALIDATION_DEFAULTS
    task_default = (f"adaptive {default['target_confidence']:g}" if default["policy"] == "adaptive"
                    else f"fixed-{DEFAULTS['num_matching_validations']}")
    document = {
        "benchmark": "validation-frontier", "created_at": utc_now(), "command": command_line(argv),
        "data": {"file": "hatecheck/all_annotations.csv", "cases": len(cases), "annotators_per_case": 5},
        "setup": {"flip": args.flip, "refit_every": args.refit_every, "adaptive_bounds": bounds,
                  "policies": rules, "spammer_mixes": SPAMMER_MIXES, "task_default": task_default},
        "seeds": seeds, "seconds": round(time.perf_counter() - started, 1),
        "versions": library_versions("numpy"),
        "runs": runs,
    }
    document["comparisons"] = comparisons(runs)
    document["default"] = choose_default(runs)
    print(doc_block(document))
    if args.quick and args.out == RESULTS / "validation-frontier.json":
        return 0
    print(f"wrote {write_json(args.out, document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
