"""``bench/validation_frontier.py``'s comparisons and its block of ``bench/RESULTS.md``:
pure functions of the runs in ``bench/results/validation-frontier.json`` (which rule beats
which in every seed, the frontier per spammer mix, the default a task gets, and the text
and tables that say so). The script stores what they give; ``report_sections`` renders the
block from the JSON with them, without importing the script."""

from __future__ import annotations

from .results import markdown_table

# The spammers' shares of the vote slots a run covers (``bench/validation.py`` and
# ``bench/validation_frontier.py`` alike), in the order the tables list them.
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
    """The rule a task should get when its config says nothing (``bench/validation_frontier.py``'s doc)."""
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


def simple_rivals(document: dict, default: str) -> dict[str, dict]:
    """The simple rules (every rule but the adaptive ones) that ``bench/validation.py`` sets
    beside the task's default rule ``default``, from a frontier run's ``document``:
    ``strongest``, the rule ``choose_default`` picks when only the simple rules compete (the
    best worst case over the spammer mixes, as the default itself was chosen), and
    ``nearest_cost``, the simple rule whose mean votes per example without spammers are
    nearest the default's. Each is its policy as the frontier's setup states it."""
    runs = document["runs"]
    simple = [r for r in runs if r["family"] != "adaptive"]
    clean = by_mix(runs).get(_key(SPAMMER_MIXES[0])) or {}
    if default not in clean:
        raise ValueError(f"the frontier has no spammer-free run of {default}: run bench/validation_frontier.py "
                         "with the task config's default first")
    votes = means(clean[default])["votes_per_example"]
    names = sorted({r["policy"] for r in simple} & set(clean))
    nearest = min(names, key=lambda p: (abs(means(clean[p])["votes_per_example"] - votes), p))
    policies = {p["name"]: p for p in document["setup"]["policies"]}
    return {"strongest": policies[choose_default(simple)["choice"]], "nearest_cost": policies[nearest]}


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
