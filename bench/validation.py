"""Validation replayed on real annotators: the task config's default rule against the
simple rules the cost-accuracy frontier names, with and without spammers.

    .venv/bin/python bench/validation.py                     # 5 seeds, bench/results/validation.json
    .venv/bin/python bench/validation.py --seeds 5 --out /tmp/validation.json
    .venv/bin/python bench/validation.py --quick             # 300 cases, 1 seed: a smoke run
    .venv/bin/python bench/validation.py --doc write         # runs nothing: the block in bench/RESULTS.md

The data: HateCheck's ``all_annotations.csv`` (in ``$DYNABENCH_DATA_DIR/hatecheck``,
``manage.py fetch_data hatecheck``): 3,901 cases, each labelled by 5 of 10 annotators,
with a gold label. Nothing from it is copied into the repository.

The setup, per seed:

- **The writer** gives the gold label, flipped on a seeded ``--flip`` share of the
  cases (default 20%): those are the mislabelled examples validators must catch. The
  truth the rules are scored against is whether the writer's label is the gold one.
- **The validators** are the case's 5 real annotators, in a seeded random order; each
  votes "correct" when their own label is the writer's, else "incorrect".
- **Spammers** (the stated adversaries) take a share of the vote slots: for a share
  ``p`` each case gets on average ``5 p / (1 - p)`` spammer votes, at random
  positions among the real ones, from a pool of ``SPAMMER_ACCOUNTS`` accounts per kind.
  An "always correct" spammer says correct to everything; a "random" one tosses a coin.
- **The cases arrive one after another** in a seeded order, and each rule consumes
  its case's votes in order until it decides; a case whose votes run out undecided goes
  to a researcher. Every rule reads the very same vote sequences (a paired comparison).
- **The rules.** The task config's default (``VALIDATION_DEFAULTS``: the adaptive rule,
  ``annotation.reliability_model``'s ``fit``, ``posterior_right`` and ``decide`` as the
  validation service calls them, refitted every ``--refit-every`` votes as the periodic
  job does, with the researchers' decisions as anchors; or fixed k-matching where the
  default is fixed), unless ``--target`` and friends say otherwise; beside it the simple
  rules that ``bench/validation_frontier.py``'s committed run names
  (``frontier_report.simple_rivals``): the strongest simple rule (the one the frontier's
  choice rule picks when only simple rules compete) and the simple rule nearest the
  default in votes per example. Fixed k-matching is the platform's
  ``num_matching_validations`` rule; "lead-2, cap 5" decides on a lead of two votes.

Reported per run (rule, spammers, seed), every share over all examples: votes per
example (those spent on escalated examples included), decided correctly (with a 95%
Wilson interval), decided wrongly, escalated (a cost, its own column: a researcher's
answer is not counted as the crowd's), and the refit's cost. The block in
``bench/RESULTS.md`` compares the default with each simple rule per spammer mix (which
beats which in every seed) and checks issue 23's targets for the default against each
(``benchlib/validation_report.py``).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import BENCH, RESULTS
from benchlib.data import data_dir
from benchlib.frontier_report import SPAMMER_MIXES, simple_rivals, spam_label
from benchlib.report_sections import replace_block
from benchlib.results import (
    command_line,
    display_path,
    library_versions,
    log,
    utc_now,
    write_atomic,
    write_json,
)
from benchlib.validation_report import check_targets, doc_block, table

from annotation import reliability_model as R
from replay.stats import wilson

FIXED_MATCHING = 3
LABELS = ("hateful", "non-hateful")  # HateCheck's label_gold values
SPAMMER_ACCOUNTS = 5  # per kind of spammer


@dataclass(frozen=True)
class Case:
    key: str
    gold: str
    labels: dict[str, str]  # annotator -> their label


def read_cases(path: Path) -> list[Case]:
    cases = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            labels = {f"annotator-{k}": row[f"label_{k}"] for k in range(1, 11) if row.get(f"label_{k}")}
            cases.append(Case(key=row["case_id"], gold=row["label_gold"], labels=labels))
    return cases


@dataclass
class Sequence_:
    """One case as the rules see it: whether the writer is right, and its votes in order."""

    key: str
    right: bool
    votes: list[tuple[str, bool]]  # (validator, says correct)


def sequences(cases: list[Case], seed: int, flip: float, spammers: dict) -> list[Sequence_]:
    """The cases in their seeded arrival order, each with its writer's truth and its
    vote sequence (real annotators and spammers interleaved)."""
    setup = random.Random(f"{seed}:writer")
    labels = LABELS
    flipped = {c.key for c in cases if setup.random() < flip}
    order = list(cases)
    random.Random(f"{seed}:arrival").shuffle(order)
    spam = random.Random(f"{seed}:spam:{spammers['always_correct']}:{spammers['random']}")
    share = spammers["always_correct"] + spammers["random"]
    result = []
    for case in order:
        writer = case.gold if case.key not in flipped else next(label for label in labels if label != case.gold)
        real = sorted(case.labels)
        random.Random(f"{seed}:voters:{case.key}").shuffle(real)
        votes = [(who, case.labels[who] == writer) for who in real]
        if share > 0:
            expected = len(real) * share / (1 - share)
            count = int(expected) + (spam.random() < expected - int(expected))
            for _ in range(count):
                kind = "always_correct" if spam.random() < spammers["always_correct"] / share else "random"
                who = f"spammer-{kind}-{spam.randrange(SPAMMER_ACCOUNTS)}"
                says = True if kind == "always_correct" else spam.random() < 0.5
                votes.insert(spam.randrange(len(votes) + 1), (who, says))
        result.append(Sequence_(case.key, case.key not in flipped, votes))
    return result


@dataclass
class Outcome:
    decided: int = 0
    correct: int = 0
    votes_on_decided: int = 0
    to_researchers: int = 0
    votes_on_researchers: int = 0
    refits: int = 0
    refit_seconds: float = 0.0
    last_refit_votes: int = 0


def run_fixed(stream: list[Sequence_], needed: int = FIXED_MATCHING) -> Outcome:
    out = Outcome()
    for case in stream:
        yes = no = used = 0
        decision = None
        for _who, says in case.votes:
            used += 1
            yes, no = yes + says, no + (not says)
            if yes >= needed or no >= needed:
                decision = yes >= needed
                break
        if decision is None:
            out.to_researchers += 1
            out.votes_on_researchers += len(case.votes)
            continue
        out.decided += 1
        out.votes_on_decided += used
        out.correct += decision == case.right
    return out


def run_adaptive(stream: list[Sequence_], rule: R.Rule, refit_every: int) -> Outcome:
    out = Outcome()
    log_of_votes: list[R.Vote] = []
    anchors: dict[str, bool] = {}
    fitted = R.fit([])
    since_refit = 0
    for case in stream:
        cast: list[tuple[R.Reliability, bool]] = []
        decision = None
        for who, says in case.votes:
            cast.append((fitted.reliability(who), says))
            log_of_votes.append(R.Vote(case.key, who, says))
            since_refit += 1
            decision = R.decide(R.posterior_right(fitted.prior_for(None), cast), len(cast), rule)
            if decision is not None:
                break
        if decision in (None, R.ESCALATED):  # a researcher decides: the truth, an anchor from now on
            out.to_researchers += 1
            out.votes_on_researchers += len(cast)
            anchors[case.key] = case.right
        else:
            out.decided += 1
            out.votes_on_decided += len(cast)
            out.correct += (decision == R.VERIFIED) == case.right
        if since_refit >= refit_every:
            started = time.perf_counter()
            fitted = R.fit(log_of_votes, anchors=anchors)
            out.refit_seconds += time.perf_counter() - started
            out.refits += 1
            out.last_refit_votes = len(log_of_votes)
            since_refit = 0
    return out


def run_lead(stream: list[Sequence_], lead: int = 2, cap: int = 5) -> Outcome:
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
    """One rule (``{"name", "family", ...}``, as ``validation_frontier.policies`` states them) on a stream."""
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


def summarise(policy: dict, role: str, spammers: dict, seed: int, out: Outcome, cases: int) -> dict:
    """``measure``'s shares over all examples, with the counts they come from and the refits' cost."""
    return {
        **measure(policy, spammers, seed, out, cases), "role": role,
        "decided": out.decided, "correct": out.correct, "escalated_examples": out.to_researchers,
        "validations_per_decided": out.votes_on_decided / out.decided if out.decided else None,
        "refits": out.refits,
        "refit_ms_mean": 1000 * out.refit_seconds / out.refits if out.refits else None,
        "refit_votes_last": out.last_refit_votes,
    }


def default_policy(args, defaults: dict, num_matching: int) -> tuple[dict, dict]:
    """(the task config's default rule, or the one ``--target`` and friends make, as a policy;
    the adaptive vote bounds)."""
    bounds = {"min_votes": args.min_votes or defaults["min_votes"],
              "max_votes": args.max_votes or defaults["max_votes"]}
    if defaults["policy"] != "adaptive" and args.target is None:
        return {"name": f"fixed-{num_matching}", "family": "fixed", "matching": num_matching}, bounds
    target = args.target or defaults["target_confidence"]
    return {"name": f"adaptive {target:g}", "family": "adaptive", "target_confidence": target, **bounds}, bounds


DOC = BENCH / "RESULTS.md"
DOC_BLOCK = "validation"  # its markers: benchlib.report_sections.begin_marker("validation") and end


def with_doc_block(text: str, document: dict) -> str:
    """``text`` (bench/RESULTS.md) with its validation block made from ``document``."""
    return replace_block(text, DOC_BLOCK, doc_block(document))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "validation.json")
    parser.add_argument("--data-dir", type=Path, help="default: $DYNABENCH_DATA_DIR, else var/data")
    parser.add_argument("--flip", type=float, default=0.2, help="share of mislabelled examples (default 0.2)")
    parser.add_argument("--target", type=float, help="target_confidence (default: the task config's)")
    parser.add_argument("--min-votes", type=int, help="min_votes (default: the task config's)")
    parser.add_argument("--max-votes", type=int, help="max_votes (default: the task config's)")
    parser.add_argument("--refit-every", type=int, default=200, help="votes between refits (default 200)")
    parser.add_argument("--frontier", type=Path, default=RESULTS / "validation-frontier.json",
                        help="the frontier run that names the simple rules (default: the committed one)")
    parser.add_argument("--quick", action="store_true", help="300 cases, 1 seed, nothing written by default")
    parser.add_argument("--doc", choices=["write", "check"],
                        help="Run nothing: rewrite (or check) the validation block of bench/RESULTS.md "
                             "from --out's JSON.")
    args = parser.parse_args(argv)
    if args.doc:
        text = DOC.read_text(encoding="utf-8")
        try:
            wanted = with_doc_block(text, json.loads(args.out.read_text(encoding="utf-8")))
        except ValueError as exc:
            log(f"bench/RESULTS.md: {exc}")
            return 1
        if args.doc == "check":
            if wanted != text:
                log(f"bench/RESULTS.md's validation block differs from {args.out}: "
                    "run bench/validation.py --doc write")
                return 1
            return 0
        write_atomic(DOC, wanted)
        log("bench/RESULTS.md's validation block rewritten")
        return 0

    from tasks.config import DEFAULTS, VALIDATION_DEFAULTS

    path = (args.data_dir or data_dir()) / "hatecheck" / "all_annotations.csv"
    if not path.is_file():
        log(f"{path} not found: run manage.py fetch_data hatecheck, or set DYNABENCH_DATA_DIR")
        return 2
    if not args.frontier.is_file():
        log(f"{args.frontier} not found: run bench/validation_frontier.py first (it names the simple rules)")
        return 2
    default, bounds = default_policy(args, VALIDATION_DEFAULTS, DEFAULTS["num_matching_validations"])
    try:
        rivals = simple_rivals(json.loads(args.frontier.read_text(encoding="utf-8")), default["name"])
    except ValueError as exc:
        log(f"{args.frontier}: {exc}")
        return 2
    rules: dict[str, tuple[dict, list[str]]] = {default["name"]: (default, ["default"])}
    for role, policy in rivals.items():
        rules.setdefault(policy["name"], (policy, []))[1].append(role)
    cases = read_cases(path)
    seeds = 1 if args.quick else args.seeds
    if args.quick:  # a seeded sample across the functionalities (the file is ordered by them)
        cases = random.Random("quick").sample(cases, 300)
    log(f"{len(cases)} cases from {path}; {seeds} seed(s); flip {args.flip:.0%}; rules "
        + ", ".join(f"{name} ({'/'.join(roles)})" for name, (_p, roles) in rules.items()))
    started = time.perf_counter()
    runs = []
    for seed in range(seeds):
        for spammers in SPAMMER_MIXES:
            stream = sequences(cases, seed, args.flip, spammers)
            for policy, roles in rules.values():
                out = run_policy(policy, stream, bounds, args.refit_every)
                runs.append(summarise(policy, "/".join(roles), spammers, seed, out, len(cases)))
            log(f"seed {seed}, spammers {spam_label(spammers)}: "
                + "; ".join(f"{r['policy']} {r['votes_per_example']:.2f} votes, {r['accuracy']['value']:.4f} "
                            f"correct, {r['escalated']:.1%} escalated" for r in runs[-len(rules):]))
    document = {
        "benchmark": "validation", "created_at": utc_now(), "command": command_line(argv),
        "data": {"file": "hatecheck/all_annotations.csv", "cases": len(cases), "annotators_per_case": 5},
        "setup": {"flip": args.flip, "refit_every": args.refit_every,
                  "spammer_accounts_per_kind": SPAMMER_ACCOUNTS, "default": default,
                  "frontier": display_path(args.frontier),
                  "roles": {"default": default["name"], **{role: p["name"] for role, p in rivals.items()}},
                  "policies": [policy for policy, _roles in rules.values()],
                  "prior": {"sensitivity": list(R.DEFAULT_PRIOR.sensitivity),
                            "specificity": list(R.DEFAULT_PRIOR.specificity),
                            "writer": list(R.DEFAULT_PRIOR.writer)}},
        "seeds": seeds, "seconds": round(time.perf_counter() - started, 1),
        "versions": library_versions("numpy"),
        "runs": runs,
    }
    document["targets"] = check_targets(runs, document["setup"]["roles"])
    print(table(document))
    for target in document["targets"]:
        print(f"{'met' if target['met'] else 'NOT MET'}: {target['target']} ({target['value']:.3f})")
    if args.quick and args.out == RESULTS / "validation.json":
        return 0
    print(f"wrote {write_json(args.out, document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
