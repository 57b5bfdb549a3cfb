"""``bench/validation.py``'s results in words and tables: the spammer mixes its runs
cover (in the order its table lists them) and the block of ``bench/RESULTS.md`` made from
``bench/results/validation.json``. Pure functions of the JSON, here so that
``report_sections`` renders the block without importing the script."""

from __future__ import annotations

from .results import markdown_table

# The spammers' shares of the vote slots a run covers, in the order of the table's rows.
SPAMMER_MIXES = [
    {"always_correct": 0.0, "random": 0.0},
    {"always_correct": 0.1, "random": 0.0},
    {"always_correct": 0.2, "random": 0.0},
    {"always_correct": 0.3, "random": 0.0},
    {"always_correct": 0.0, "random": 0.1},
    {"always_correct": 0.0, "random": 0.2},
    {"always_correct": 0.0, "random": 0.3},
]


def spam_label(spammers: dict) -> str:
    parts = [f"{int(round(100 * share))}% {kind.replace('_', ' ')}" for kind, share in spammers.items() if share]
    return ", ".join(parts) or "none"


def table(document: dict) -> str:
    """The Markdown table of a run: each policy and spammer mix, means over the seeds
    (accuracy with the range of its per-seed 95% intervals)."""
    runs = document["runs"]
    rows = []
    for spammers in SPAMMER_MIXES:
        for policy in ("fixed", "adaptive"):
            chosen = [r for r in runs if r["policy"] == policy and r["spammers"] == spammers]
            if not chosen:
                continue
            n = len(chosen)
            accuracy = sum(r["accuracy"]["value"] for r in chosen) / n
            low = min(r["accuracy"]["ci_low"] for r in chosen)
            high = max(r["accuracy"]["ci_high"] for r in chosen)
            rows.append([
                spam_label(spammers), policy,
                f"{sum(r['validations_per_decided'] for r in chosen) / n:.2f}",
                f"{sum(r['validations_per_case'] for r in chosen) / n:.2f}",
                f"{100 * accuracy:.2f}% ({100 * low:.2f}–{100 * high:.2f})",
                f"{100 * sum(r['to_researchers'] for r in chosen) / n:.1f}%",
            ])
    return markdown_table(["Spammers (share of votes)", "Policy", "Validations per decided example",
                           "Validations per example, escalated ones too", "Decision accuracy (95% interval)",
                           "To researchers"], rows)


def doc_block(document: dict) -> str:
    """The table in bench/RESULTS.md and the facts it rests on, from a run's JSON."""
    setup = document["setup"]
    rule = setup["adaptive"]
    timed = [r for r in document["runs"] if r["refit_ms_mean"] is not None]
    refit_ms = sum(r["refit_ms_mean"] for r in timed) / len(timed) if timed else 0.0
    refit_votes = max((r["refit_votes_last"] for r in timed), default=0)
    facts = (f"From `bench/results/validation.json`: {document['data']['cases']} HateCheck cases, 5 real "
             f"annotators each, {setup['flip']:.0%} of the writers' labels flipped, {document['seeds']} seeds "
             f"(means; the intervals are the widest of the seeds' 95% Wilson intervals). Adaptive: target "
             f"{rule['target_confidence']}, {rule['min_votes']} to {rule['max_votes']} votes, refitted every "
             f"{setup['refit_every']} votes; a refit's EM took {refit_ms:.1f} ms on average (at most "
             f"{refit_votes} votes).")
    met = "; ".join(f"{'met' if t['met'] else 'NOT met'}: {t['target']}" for t in document["targets"])
    return f"{facts}\n\n{table(document)}\n\nTargets: {met}.\n"
