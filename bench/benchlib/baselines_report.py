"""The tables of ``bench/baselines.py``: one row a task (train set, held-out set and
scores, adversarial sets), one row an adversarial or functional evaluation next to
the best constant answer's error; as Markdown (the results' .md file) and as text."""

from __future__ import annotations

from pathlib import Path

from .baselines_tasks import NLI_LABELS
from .results import display_path, markdown_table, pct, plain_table


def constant_error(supports: dict) -> str:
    """Error of the best constant answer (always the most frequent gold label)."""
    total = sum(supports.values())
    if not total:
        return ""
    label, count = max(supports.items(), key=lambda kv: kv[1])
    return f"{pct(1 - count / total)} (always {label})"


def supports_of(report: dict) -> dict:
    return {label: c["support"] for label, c in report.get("per_class", {}).items()}


def table_rows(results: dict) -> tuple[list[list[str]], list[list[str]]]:
    """(main rows, adversarial/functional rows) as lists of cells."""
    main, extra = [], []
    for task, r in results.items():
        if "skipped" in r:
            main.append([task, "skipped", "", r["skipped"], ""])
            continue
        epochs = r["training"]["hyperparameters"]["epochs"]
        train_cell = f"{r['data']['train']['size']:,} ({epochs} ep)"
        if task == "sentiment":
            t = r["test"]
            main.append(
                [
                    "sentiment",
                    f"SST-2 train, random {train_cell}",
                    f"SST-2 test-labeled ({t['count']:,})",
                    f"acc {pct(t['accuracy'])}, macro-F1 {pct(t['macro_f1'])} "
                    f"(dev acc {pct(r['dev']['accuracy'])})",
                    "none offline (DynaSent)",
                ]
            )
        elif task == "nli":
            t = r["test"]
            bs = t["by_source"]
            anli = r["anli_test"]
            anli_cell = ", ".join(f"{k} {pct(v.get('error'))}" for k, v in anli.items())
            main.append(
                [
                    "nli",
                    f"MNLI+SNLI dev, premise split, random {train_cell}",
                    f"held-out pairs ({t['count']:,}: MNLI {bs['mnli']['count']:,}, "
                    f"SNLI {bs['snli']['count']:,})",
                    f"acc {pct(t['accuracy'])} (error {pct(t['error'])}; MNLI "
                    f"{pct(bs['mnli']['accuracy'])}, SNLI {pct(bs['snli']['accuracy'])})",
                    f"ANLI test error: {anli_cell}",
                ]
            )
            extra.append(
                [
                    "nli",
                    "held-out MNLI+SNLI (in-distribution)",
                    f"{t['count']:,}",
                    f"error {pct(t['error'])}",
                    constant_error(supports_of(t)),
                ]
            )
            for k, v in anli.items():
                predicted = v.get("predicted_labels", {})
                extra.append(
                    [
                        "nli",
                        f"ANLI {k} test",
                        f"{v.get('count', 0):,}",
                        f"error {pct(v.get('error'))} (predicted "
                        + ", ".join(f"{lab} {predicted.get(lab, 0):,}" for lab in NLI_LABELS)
                        + ")"
                        if "error" in v
                        else v.get("skipped", ""),
                        constant_error(supports_of(v)),
                    ]
                )
        elif task == "hate":
            t = r["test"]
            h, n = t["per_class"]["hateful"], t["per_class"]["not-hateful"]
            dh = r["dynahate_test"]
            hc = r["hatecheck"]
            dh_cell = ", ".join(
                f"{k} {pct(v['error'])}" for k, v in dh.items() if k.startswith("R")
            )
            hc_cell = f"HateCheck acc {pct(hc.get('accuracy'))}"
            labels = r["data"]["train"]["labels"]
            main.append(
                [
                    "hate",
                    f"Davidson, balanced {labels.get('hateful', 0):,} hateful + "
                    f"{labels.get('not-hateful', 0):,} not ({epochs} ep)",
                    f"Davidson stratified ({t['count']:,}; {h['support']:,} hateful)",
                    f"macro-F1 {pct(t['macro_f1'])}, acc {pct(t['accuracy'])}; hateful "
                    f"P {pct(h['precision'])} R {pct(h['recall'])} F1 {pct(h['f1'])}; "
                    f"not-hateful P {pct(n['precision'])} R {pct(n['recall'])} F1 {pct(n['f1'])}",
                    f"DynaHate test error: {dh_cell}; {hc_cell}",
                ]
            )
            extra.append(
                [
                    "hate",
                    "held-out Davidson (in-distribution)",
                    f"{t['count']:,}",
                    f"error {pct(t['error'])}, macro-F1 {pct(t['macro_f1'])}",
                    constant_error(supports_of(t)),
                ]
            )
            rounds = {k: v for k, v in dh.items() if k.startswith("R")}
            hateful_all = sum(v["hateful_share"] * v["count"] for v in rounds.values())
            for k, v in dh.items():
                if k.startswith("R") or k == "all":
                    extra.append(
                        [
                            "hate",
                            f"DynaHate {'all rounds' if k == 'all' else k} test",
                            f"{v['count']:,}",
                            f"error {pct(v['error'])}"
                            + (
                                f" (hateful recall {pct(v['hateful_recall'])}, not-hateful "
                                f"recall {pct(v['not_hateful_recall'])}, "
                                f"{pct(v['hateful_share'])} hateful)"
                                if k != "all"
                                else ""
                            ),
                            constant_error(
                                {
                                    "hateful": v.get("hateful_share", 0) * v["count"]
                                    if k != "all"
                                    else hateful_all,
                                    "not-hateful": (1 - v.get("hateful_share", 0)) * v["count"]
                                    if k != "all"
                                    else v["count"] - hateful_all,
                                }
                            ),
                        ]
                    )
            if "accuracy" in hc:
                by = hc["accuracy_by_gold_label"]
                weakest = sorted(hc["by_functionality"].items(), key=lambda kv: kv[1]["accuracy"])[
                    :3
                ]
                extra.append(
                    [
                        "hate",
                        "HateCheck (functional)",
                        f"{hc['count']:,}",
                        f"accuracy {pct(hc['accuracy'])} (on hateful cases {pct(by['hateful'])}, "
                        f"on non-hateful {pct(by['not-hateful'])}); weakest: "
                        + ", ".join(f"{name} {pct(e['accuracy'])}" for name, e in weakest),
                        constant_error(hc["support_by_gold_label"]).replace("%", "% error", 1),
                    ]
                )
        elif task == "qa":
            t = r["test"]
            d = r["data"]
            main.append(
                [
                    "qa",
                    f"SQuAD dev, {d['train']['articles']} articles, random {train_cell}",
                    f"{len(d['test']['articles'])} held-out articles ({t['count']:,} questions)",
                    f"EM {pct(t['exact_match'])}, F1 {pct(t['f1'])} (dev F1 {pct(r['dev']['f1'])})",
                    "none offline (AdversarialQA)",
                ]
            )
    return main, extra


MAIN_HEADER = [
    "task",
    "train set (size)",
    "held-out set (size)",
    "held-out metrics",
    "adversarial / functional",
]
EXTRA_HEADER = ["task", "evaluation set", "n", "result", "best constant answer: error"]


def markdown(results: dict, summary: dict, json_path: Path) -> str:
    main, extra = table_rows(results)
    load = summary.get("load_average_1min")
    load_text = (
        f"; 1-minute load average {load['start']:.1f} at the start, {load['end']:.1f} "
        "at the end: other processes share the cores"
        if load
        else ""
    )
    parts = [
        "# Round-0 baselines",
        "",
        f"all-MiniLM-L6-v2 fine-tuned per task with `ml.train` on {summary['device']} "
        f"({summary['cpu_count']} CPU cores, {summary.get('torch_threads', '?')} torch "
        f"thread(s){load_text}); seed {summary['seed']}; total wall time "
        f"{summary['wall_time_s'] / 60:.1f} min. Produced by `{summary['command']}`; "
        "what each number means and which subsets were used: the docstring of "
        f"`bench/baselines.py`; every number, size and setting: `{display_path(json_path)}`.",
        "",
        markdown_table(MAIN_HEADER, main),
    ]
    if extra:
        parts += [
            "",
            "Error = 1 - accuracy. Adversarial and functional evaluations next to the "
            "in-distribution error; the last column is what always answering the most "
            "frequent gold label of that set would score (HateCheck: its error too), the "
            "floor a model has to beat:",
            "",
            markdown_table(EXTRA_HEADER, extra),
        ]
    return "\n".join(parts) + "\n"


def text_table(results: dict) -> str:
    main, extra = table_rows(results)
    tables = [
        plain_table(header, rows)
        for header, rows in ((MAIN_HEADER, main), (EXTRA_HEADER, extra))
        if rows
    ]
    return "\n\n".join(tables) + "\n" if tables else ""
