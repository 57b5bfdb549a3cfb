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
``run_adaptive`` (``annotation.reliability_model``'s ``fit``, ``posterior_right`` and
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
costs a researcher a look, and is seen), then the one with the fewest votes per example.

The comparisons, the choice and the block in ``bench/RESULTS.md`` (the text under the
tables is generated from the JSON, as the tables are) are pure functions of the runs, in
``benchlib/frontier_report.py``; this script runs the rules and stores what they give.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from benchlib import RESULTS
from benchlib.data import data_dir
from benchlib.frontier_report import SPAMMER_MIXES, choose_default, comparisons, doc_block
from benchlib.results import (
    command_line,
    library_versions,
    log,
    utc_now,
    write_json,
)
from validation import measure, read_cases, run_policy, sequences

TARGETS = (0.9, 0.95, 0.99, 0.995, 0.998, 0.999, 0.9999)
FIXED_K = (1, 2, 3, 4)
LEAD, CAP = 2, 5


def policies(targets=TARGETS) -> list[dict]:
    """The rules compared, each a dict the runner and the report read."""
    rules = [{"name": f"fixed-{k}", "family": "fixed", "matching": k} for k in FIXED_K]
    rules.append({"name": f"lead-{LEAD}, cap {CAP}", "family": "lead", "lead": LEAD, "cap": CAP})
    rules += [{"name": f"adaptive {t:g}", "family": "adaptive", "target_confidence": t} for t in targets]
    return rules


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
