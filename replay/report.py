"""The replay report: its schema, reading it, and its Markdown tables. Pure functions, no Django.

``replay.summary.build_report`` builds the report; ``results.write_outputs``
writes it with its tables and chart (``chart.svg_chart``). Schema (accuracies, differences and
rates are fractions in [0, 1])::

    {
      "task": "hate", "mode": "full",           # "nli" | "hate"; "fast" | "full"
      "strategy": "cumulative",                 # "cumulative" | "continue" | "retrain"
      "control": "static",                      # the first control, or null: no control chain
      "control_names": ["static", "balanced"],  # every control chain (controls.CONTROLS)
      "seeds": [0],                             # the training seeds pooled
      "training": {...}, "started_at": "...", "seconds": 812.5,
      "statistics": {"resamples": 1000, "confidence": 0.95},
      "data": {...},                            # replay.data.plan_summary(plan); its
                                                # "leakage" holds "rules", "removed" (round -> split ->
                                                # rule -> rows) and "pairs" (round -> {training, test,
                                                # removed}: contrastive pair counts)
      "references": {                           # per test set and suite (also in data)
        "DynaHate R1": {"num_examples": 1000, "chance": 0.5,
                        "constant": {"hateful": 0.55, "not-hateful": 0.45},
                        "majority": {"label": "hateful", "accuracy": 0.55}},
        "HateCheck": {..., "by_functionality": {"derog_neg_emote_h": {...}, ...}}
      },
      "rounds": [                               # index 0: round 0 (static data)
        {
          "number": 1, "name": "DynaHate R1", "model": "hate-m1",
          "error_rate_at_collection": 0.60,     # null for round 0; mean over seeds
          "collection": {"submitted": 1089, "fooled": 655, "refused": 0, "model_error_rate": 0.60,
                         "ci_low": 0.57, "ci_high": 0.63, "target": "hate-m0", "by_seed": [0.60]},
          "train_seconds": 95.1,
          "test": {                             # this round's model on every test set
            "DynaHate R1": {"accuracy": 0.82, "ci_low": 0.80, "ci_high": 0.85,
                            "num_examples": 1000, "by_seed": [0.82]}, ...},
          "functional": {"HateCheck": {"accuracy": ..., "ci_low": ..., "ci_high": ..., "num_examples": ...,
                                       "by_seed": [...], "by_functionality": {name: {accuracy, ci_low, ...}}}},
          "gain_over_previous": {               # M(r) against M(r-1) on round r's test split (paired)
            "test_set": "DynaHate R1", "previous_model": "hate-m0",
            "difference": 0.49, "ci_low": 0.45, "ci_high": 0.52, "p_value": 0.001, "num_examples": 1000},
          "vs_control": {                       # M(r) against the (first) control C(r), every set and suite
            "DynaHate R1": {"difference": ..., "ci_low": ..., "ci_high": ..., "p_value": ...}, ...},
          "vs_controls": {"static": {...}, "balanced": {...}},   # against each control asked for
          "vs_majority": {"DynaHate R1": {...}, "HateCheck": {..., "num_clusters": 845}}  # minus the majority answer
        }, ...
      ],
      "controls": {"static": {"description": "...", "rounds": [   # round 0: M0 itself
          {"number": 1, "name": "DynaHate R1", "model": "hate-control-c1", "control_for": "hate-m1",
           "training_rows": 1960, "test": {...}, "functional": {...}}, ...]}},
      "runs": [{"seed": 0, "slug": "...", "seconds": ..., "rounds": [...], "controls": {...}}]
    }

With several seeds (``summary.json``), every value with a ``by_seed`` list also has the
seeds' spread beside it: ``seed_min``, ``seed_max`` and ``seed_sd`` (``replay.spread``),
and every paired difference its own ``by_seed`` and spread.

A value that is missing, null or not a finite number shows as a dash in the
tables and is left out of the chart.
"""

from __future__ import annotations

import json

from .cells import DASH, cell, ci_text, gain_text, legend, number, pct, table


def replace_block(text: str, begin: str, end: str, body: str, what: str) -> str:
    """``text`` with what stands between the marker lines ``begin`` and ``end`` replaced by
    ``body``; a ValueError naming ``what`` where the markers are not there once each, in order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(end) < text.index(begin):
        raise ValueError(f"no {what}: add the lines {begin!r} and {end!r}, once each, in order")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


# --- reading the report -----------------------------------------------------


def rounds_of(report: dict) -> list[dict]:
    return [r for r in report.get("rounds") or [] if isinstance(r, dict)]


def model_name(round_entry: dict) -> str:
    return str(round_entry.get("model") or f"M{round_entry.get('number', '?')}")


def error_rate(collection: dict | None) -> float | None:
    """The model error rate at collection: as reported, or fooled / submitted."""
    if not isinstance(collection, dict):
        return None
    rate = number(collection.get("model_error_rate"))
    if rate is None:
        submitted, fooled = number(collection.get("submitted")), number(collection.get("fooled"))
        if submitted and fooled is not None:
            rate = fooled / submitted
    return rate


def evaluated_sets(report: dict) -> list[str]:
    """Test set names: each round's (round order), then any other evaluated set (first seen)."""
    names = [str(r.get("name")) for r in rounds_of(report) if r.get("name") is not None]
    for entry in rounds_of(report):
        for name in entry.get("test") or {}:
            if name not in names:
                names.append(name)
    return names


def suite_names(report: dict) -> list[str]:
    names: list[str] = []
    for entry in rounds_of(report):
        for name in entry.get("functional") or {}:
            if name not in names:
                names.append(name)
    return names


def metric_matrix(report: dict, metric: str = "accuracy", section: str = "test"
                  ) -> tuple[list[str], list[str], list[list[float | None]]]:
    """(models, columns, cells): one row per round's model, one column per test set
    (``section="test"``) or suite."""
    columns = evaluated_sets(report) if section == "test" else suite_names(report)
    models, cells = [], []
    for entry in rounds_of(report):
        results = entry.get(section) or {}
        models.append(model_name(entry))
        cells.append([number((results.get(c) or {}).get(metric))
                      if isinstance(results.get(c), dict) else None for c in columns])
    return models, columns, cells


# --- Markdown ---------------------------------------------------------------


def _references_table(report: dict) -> list[str]:
    references = report.get("references") or {}
    labels = list((report.get("data") or {}).get("labels") or [])
    shown = set(evaluated_sets(report)) | set(suite_names(report))
    rows = []
    for name, ref in references.items():
        if not isinstance(ref, dict) or name not in shown:
            continue
        majority = ref.get("majority") or {}
        constant = ref.get("constant") or {}
        rows.append([cell(name), cell(ref.get("num_examples", DASH)), pct(number(ref.get("chance"))),
                     f"{pct(number(majority.get('accuracy')))} ({cell(majority.get('label', DASH))})",
                     *(pct(number(constant.get(label))) for label in labels)])
    if not rows:
        return ["No reference lines."]
    return table(["Test set", "Examples", "Chance", "Majority answer", *(f"Always {cell(x)}" for x in labels)],
                  rows)


def _leakage_table(report: dict) -> list[str]:
    leakage = ((report.get("data") or {}).get("leakage") or {})
    rules = leakage.get("rules") or {}
    rows = [[cell(name), cell(split), *(str(counts.get(rule, 0)) for rule in rules)]
            for name, splits in (leakage.get("removed") or {}).items() for split, counts in splits.items()]
    if not rows:
        return ["No training or dev row shared a premise, a text" + (" or a contrastive pair" if "pair" in rules
                                                                       else "") + " with a test set."]
    return table(["Round", "Split", *(f"Removed: {cell(rule)}" for rule in rules)], rows, right_from=2)


def _pairs_table(report: dict) -> list[str]:
    """Contrastive pairs per round: whole in training, whole in test, and the training
    rows removed because their other side is a test example."""
    pairs = (((report.get("data") or {}).get("leakage") or {}).get("pairs") or {})
    rows = [[cell(name), *(cell(counts.get(key, 0)) for key in ("training", "test", "removed"))]
            for name, counts in pairs.items() if isinstance(counts, dict)]
    if not rows:
        return []
    return ["", "Contrastive pairs (an entry and its minimally edited, opposite-label perturbation, by the data "
                "set's own pair id) are kept on one side: a pair in training shares one dev hold-out group, and "
                "a training row whose other side is a test example is removed.", "",
            *table(["Round", "Pairs whole in training", "Pairs whole in test",
                    "Training rows removed (other side in test)"], rows)]


def _matrix(report: dict, rounds: list[dict], section: str) -> list[str]:
    columns = evaluated_sets(report) if section == "test" else suite_names(report)
    references = report.get("references") or {}
    rows = [[cell(model_name(e)), *(ci_text((e.get(section) or {}).get(c)) for c in columns)] for e in rounds]
    rows.append(["*majority answer*", *(pct(number(((references.get(c) or {}).get("majority") or {})
                                                     .get("accuracy"))) for c in columns)])
    return table([legend("Model", report), *map(cell, columns)], rows)


def markdown_tables(report: dict, level: int = 1) -> str:
    """The report's tables: data and leakage, reference lines, collection, accuracy with
    intervals, paired gains, functional suites and the static control's comparison.
    ``level``: the Markdown level of the title (sections one below)."""
    h1, h2 = "#" * level, "#" * (level + 1)
    task, mode = cell(report.get("task", "?")), cell(report.get("mode", "?"))
    rounds = rounds_of(report)
    seeds = report.get("seeds") or []
    statistics = report.get("statistics") or {}
    lines = [f"{h1} Replay of real adversarial rounds: {task} ({mode} mode)", ""]
    facts = [f"strategy `{cell(report.get('strategy', '?'))}`",
             f"static control: {'yes' if report.get('control') else 'no'}",
             f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds)) or DASH})"]
    seconds = number(report.get("seconds"))
    if seconds is not None:
        facts.append(f"took {seconds / 60:.0f} min")
    lines += ["Run: " + "; ".join(facts) + f"; training `{cell(json.dumps(report.get('training') or {}))}`.", "",
              f"Accuracies carry a {100 * (statistics.get('confidence') or 0.95):.0f}% bootstrap interval over "
              f"the test set's examples ({statistics.get('resamples', '?')} resamples, the same for every model, "
              "so differences are paired). With several seeds the accuracy is the seeds' mean, the interval "
              "covers the examples only, the brackets give the seeds' lowest and highest value (the header "
              "of each such table says so), and each seed's own report is under seed-<n>/.", ""]

    rules = (((report.get("data") or {}).get("leakage") or {}).get("rules") or {})
    lines += [f"{h2} Data: what the leakage filter removed", "",
              "Training and dev rows that share a premise or a text with any test set or suite"
              + (", or whose contrastive pair is in one," if "pair" in rules else "")
              + " are removed before training: "
              + "; ".join(f"*{cell(k)}*: {cell(v)}" for k, v in rules.items()) + ".", ""]
    lines += _leakage_table(report)
    lines += _pairs_table(report)
    pool = ((report.get("data") or {}).get("control_pool"))
    if pool:
        lines += ["", f"The static control's pool: {pool} rows of round 0's training split, set aside "
                      "before M0 is trained."]
    lines.append("")

    lines += [f"{h2} Reference lines", "",
              "What answers that look at nothing score: chance (a uniform guess, in expectation), the "
              "majority answer and each constant answer.", ""]
    lines += _references_table(report) + [""]

    lines += [f"{h2} M(r\u22121)'s error on round r's examples", "",
              "Each round's training examples, written by the data set's annotators against other models, "
              "are submitted through the platform with the model of the round before, M(r\u22121), as the "
              "live target; the rate is the share it gets wrong (fooled / submitted), with its 95% Wilson "
              "interval. Nothing here measures annotators adapting to a target.", ""]
    rows = []
    for entry in rounds:
        collection = entry.get("collection")
        if not isinstance(collection, dict):
            continue
        submitted, fooled = number(collection.get("submitted")), number(collection.get("fooled"))
        rate = {"accuracy": error_rate(collection), "ci_low": collection.get("ci_low"),
                "ci_high": collection.get("ci_high"), "seed_min": collection.get("seed_min"),
                "seed_max": collection.get("seed_max")}
        rows.append([cell(entry.get("number", "?")), cell(entry.get("name", "")),
                     cell(collection.get("target") or DASH),
                     _count_text(report, entry.get("number"), "submitted", submitted),
                     _count_text(report, entry.get("number"), "fooled", fooled), ci_text(rate)])
    varies = {key: any(len(set(_seed_counts(report, e.get("number"), key))) > 1 for e in rounds)
              for key in ("submitted", "fooled")}
    lines += (table([legend("Round", report), "Data", "Target model",
                     *(f"{key.capitalize()} (the seeds' lowest\u2013highest)" if varies[key] else key.capitalize()
                       for key in ("submitted", "fooled")),
                     "M(r\u22121)'s error rate"], rows,
                     right_from=3) if rows else ["No round collected examples."]) + [""]

    lines += [f"{h2} Accuracy on each round's test split", "",
              "Rows: the model trained at the end of each round; columns: test sets (round 0 is the static "
              "data). The last row is the majority answer.", ""]
    lines += (_matrix(report, rounds, "test") if evaluated_sets(report) else ["No evaluations."]) + [""]

    gains = [e for e in rounds if isinstance(e.get("gain_over_previous"), dict)]
    if gains:
        lines += [f"{h2} Does each round's model beat the one before, on that round's test split?", "",
                  "Paired bootstrap of M(r) minus M(r-1) on round r's test split: the difference in accuracy "
                  "points, its 95% interval and a two-sided p-value.", ""]
        rows = []
        for i, entry in enumerate(rounds):
            gain = entry.get("gain_over_previous")
            if not isinstance(gain, dict):
                continue
            name = gain.get("test_set", entry.get("name"))
            previous = rounds[i - 1] if i else {}
            rows.append([cell(entry.get("number", "?")), cell(name), cell(gain.get("previous_model", DASH)),
                         ci_text((previous.get("test") or {}).get(name)), cell(model_name(entry)),
                         ci_text((entry.get("test") or {}).get(name)), gain_text(gain)])
        lines += table([legend("Round", report), "Test set", "Before", "Accuracy", "After", "Accuracy",
                        "Difference"], rows,
                        right_from=3) + [""]

    if suite_names(report):
        clustered = sorted({f"{cell(name)} ({cell(stat['num_clusters'])} templates)" for e in rounds
                            for name, stat in (e.get("functional") or {}).items()
                            if isinstance(stat, dict) and number(stat.get("num_clusters")) is not None})
        lines += [f"{h2} Functional tests", "",
                  "A dash: the suite is not in use yet for that model's round. The last row is the majority "
                  "answer; the reference lines above give every constant answer."
                  + (" The suites' cases are written from templates, so their intervals and paired differences "
                     "are cluster bootstraps that resample templates, each with all its cases: "
                     + ", ".join(clustered) + "." if clustered else ""), ""]
        lines += _matrix(report, rounds, "functional") + [""]

    for control, body in (report.get("controls") or {}).items():
        crounds = [r for r in body.get("rounds") or [] if isinstance(r, dict)]
        lines += [f"{h2} The {cell(control)} control", "",
                  f"C(r): {cell(body.get('description', ''))}; the same backbone, epochs, batch size, seed "
                  "and number of training steps as M(r).", ""]
        lines += _matrix(report, crounds, "test") + [""]
        if suite_names(report):
            lines += _matrix(report, crounds, "functional") + [""]
        columns = evaluated_sets(report) + suite_names(report)

        def versus(entry, name=control):
            both = entry.get("vs_controls")
            return both.get(name) if isinstance(both, dict) else entry.get("vs_control")

        rows = [[cell(model_name(e)), *(gain_text((versus(e) or {}).get(c), with_p=False) for c in columns)]
                for e in rounds if isinstance(versus(e), dict)]
        if rows:
            lines += [f"{h2} Adversarial minus {cell(control)} control", "",
                      "M(r) minus C(r) in accuracy points, with the paired 95% interval: above zero, the "
                      "adversarial round helped more than as many static examples.", ""]
            lines += table([legend("Model", report), *map(cell, columns)], rows) + [""]
        lines += _functionality_table(report, rounds, crounds)
    lines += _majority_table(report, rounds, h2)
    return "\n".join(lines)


def _seed_counts(report: dict, number_: int | None, key: str) -> list[float]:
    """Each seed's ``collection[key]`` for round ``number_`` (from ``runs``); [] where none."""
    values = []
    for run in report.get("runs") or []:
        for entry in (run or {}).get("rounds") or []:
            if entry.get("number") == number_ and isinstance(entry.get("collection"), dict):
                value = number(entry["collection"].get(key))
                if value is not None:
                    values.append(value)
    return values


def _count_text(report: dict, number_: int | None, key: str, value: float | None) -> str:
    """A collection count: the seeds' lowest–highest where they differ, else the one value."""
    counts = _seed_counts(report, number_, key)
    if len(set(counts)) > 1:
        return f"{min(counts):g}\u2013{max(counts):g}"
    return DASH if value is None else f"{value:g}"


def _majority_table(report: dict, rounds: list[dict], h2: str) -> list[str]:
    """Every model, adversarial and control, minus the majority answer on every set and suite."""
    models = list(rounds) + [e for body in (report.get("controls") or {}).values()
                             for e in (body.get("rounds") or [])[1:] if isinstance(e, dict)]
    models = [e for e in models if isinstance(e.get("vs_majority"), dict)]
    if not models:
        return []
    columns = evaluated_sets(report) + suite_names(report)
    return [f"{h2} Against the majority answer", "",
            "Each model minus the majority answer (the best constant answer) in accuracy points, with the "
            "paired 95% interval: above zero, the model beats answering one label.", "",
            *table([legend("Model", report), *map(cell, columns)],
                   [[cell(model_name(e)), *(gain_text(e["vs_majority"].get(c), with_p=False) for c in columns)]
                    for e in models]), ""]


def _functionality_table(report: dict, rounds: list[dict], crounds: list[dict]) -> list[str]:
    """Per functionality of each suite: the last round's model and control, and the constant answers."""
    if not rounds or not crounds:
        return []
    last, control = rounds[-1], crounds[-1]
    labels = list((report.get("data") or {}).get("labels") or [])
    lines = []
    for suite in suite_names(report):
        ours = (last.get("functional") or {}).get(suite) or {}
        theirs = (control.get("functional") or {}).get(suite) or {}
        refs = ((report.get("references") or {}).get(suite) or {}).get("by_functionality") or {}
        groups = list(ours.get("by_functionality") or {})
        if not groups:
            continue
        lines += [f"{cell(suite)} per functionality: {cell(model_name(last))} against "
                  f"{cell(model_name(control))} and the constant answers.", ""]
        rows = []
        for group in groups:
            constant = (refs.get(group) or {}).get("constant") or {}
            mine = (ours.get("by_functionality") or {}).get(group) or {}
            other = (theirs.get("by_functionality") or {}).get(group) or {}
            rows.append([cell(group), cell(mine.get("num_examples", DASH)),
                         *(pct(number(constant.get(label))) for label in labels), ci_text(mine), ci_text(other)])
        lines += table([legend("Functionality", report), "Examples", *(f"Always {cell(x)}" for x in labels),
                         cell(model_name(last)), cell(model_name(control))], rows) + [""]
    return lines


# --- the interface scripts read -------------------------------------------------


def interface_problems(report: dict) -> list[str]:
    """What the report lacks of the interface scripts depend on (empty: none): a
    ``rounds`` list whose entries have ``error_rate_at_collection`` and ``test`` with
    ``{accuracy, ci_low, ci_high}`` per test set, and a ``controls`` object holding each
    control's rounds in the same shape."""
    problems = []
    rounds = report.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        return ["no rounds list"]
    if not isinstance(report.get("controls"), dict):
        problems.append("no controls object")

    def check(entries, where):
        for entry in entries:
            test = entry.get("test") if isinstance(entry, dict) else None
            if not isinstance(test, dict) or not test:
                problems.append(f"{where} round {entry.get('number') if isinstance(entry, dict) else '?'}: no test")
                continue
            for name, value in test.items():
                if not isinstance(value, dict) or not {"accuracy", "ci_low", "ci_high"} <= set(value):
                    problems.append(f"{where} round {entry.get('number')}: {name} lacks accuracy/ci_low/ci_high")

    for entry in rounds:
        if not isinstance(entry, dict) or "error_rate_at_collection" not in entry:
            problems.append(f"round {entry.get('number') if isinstance(entry, dict) else '?'}: "
                            "no error_rate_at_collection")
    check(rounds, "")
    for name, control in (report.get("controls") or {}).items():
        check((control or {}).get("rounds") or [{}], f"control {name}")
    if report.get("control") and report.get("control") not in (report.get("controls") or {}):
        problems.append(f"the {report['control']} control's scores are missing")
    return [p.strip() for p in problems]
