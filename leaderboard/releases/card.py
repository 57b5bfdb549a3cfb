"""The data card: what a release says about its data, in the Hugging Face Hub's form.

``Tally`` gathers the facts while the rows are written (counts per split, round and
label; how the examples were verified; votes and blind answers; who wrote them), so
every number in the card is counted from the rows in the files, not from anything
beside them. ``card_facts`` adds what the platform knows about the rounds (the model
error rate at collection, from the round counters, with 95% Wilson intervals; the
validation rule; the sections other apps contribute) and ``render_card`` writes
README.md: the Hub's YAML header (license, task_categories, language,
size_categories, configs with each split's data file) and the card's sections.

Text that people wrote (the task's name, goal and instructions, label descriptions,
model names) is escaped for Markdown and HTML: the card never carries markup from it.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from annotation import counters
from ml.metrics import wilson_interval
from tasks.kinds import kind_named
from tasks.licenses import LICENSES
from tasks.models import Round, Task

from .contributions import card_sections
from .rows import VERIFIED_BY, Chunk, Column

DEFAULT_TASK_CATEGORY = "text-classification"  # for a task whose kind is no longer known
SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]


def text(value) -> str:
    """User text for one line of Markdown: HTML escaped, table pipes escaped, one line."""
    return html.escape(" ".join(str(value or "").split()), quote=False).replace("|", "\\|")


def paragraph(value) -> str:
    """User text as Markdown paragraphs: HTML escaped, line breaks kept."""
    return "\n".join(html.escape(line.rstrip(), quote=False) for line in str(value or "").splitlines())


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def interval(low: float | None, high: float | None) -> str:
    return "–" if low is None else f"{percent(low)}–{percent(high)}"


def size_category(rows: int) -> str:
    for bound, name in SIZE_CATEGORIES:
        if rows < bound:
            return name
    return "n>100M"


@dataclass
class Tally:
    """What the written rows say, gathered chunk by chunk."""

    labelled: bool  # answers are labels: rows are counted by label too
    rows: Counter = field(default_factory=Counter)  # split -> rows
    by_round: dict = field(default_factory=lambda: defaultdict(Counter))  # split -> round -> rows
    by_label: dict = field(default_factory=lambda: defaultdict(Counter))  # split -> (round, label) -> rows
    round_rows: Counter = field(default_factory=Counter)  # round -> rows (every split)
    round_written: Counter = field(default_factory=Counter)  # round -> rows written on the platform
    round_fooled: Counter = field(default_factory=Counter)  # round -> of those, that fooled the model
    verified_by: Counter = field(default_factory=Counter)
    votes_correct: int = 0
    votes_incorrect: int = 0
    blind_answers: int = 0
    blind_agreeing: int = 0
    annotators: Counter = field(default_factory=Counter)  # pseudonym -> rows
    models: set = field(default_factory=set)

    def add(self, split: str, chunk: Chunk) -> None:
        for row in chunk.rows:
            number = row["round"]
            self.rows[split] += 1
            self.by_round[split][number] += 1
            if self.labelled:
                self.by_label[split][(number, row["label"])] += 1
            self.round_rows[number] += 1
            self.verified_by[row["verified_by"]] += 1
            if row["source"] == "annotation":
                self.round_written[number] += 1
                self.round_fooled[number] += row["fooled"] is True
                self.votes_correct += row["votes_correct"]
                self.votes_incorrect += row["votes_incorrect"]
            if row["annotator"]:
                self.annotators[row["annotator"]] += 1
            self.models.update(row["target_models"])
        self.blind_answers += chunk.blind_answers
        self.blind_agreeing += chunk.blind_agreeing

    def counts(self, labels: list[str]) -> dict:
        """``Release.counts``: rows per split, per round, and per round and label."""
        splits = {}
        for split, n in self.rows.items():
            entry = {"rows": n, "by_round": {str(r): c for r, c in sorted(self.by_round[split].items())}}
            if self.labelled:
                entry["by_round_label"] = {
                    str(r): {label: self.by_label[split][(r, label)] for label in labels}
                    for r in sorted(self.by_round[split])}
            splits[split] = entry
        return {"rows": sum(self.rows.values()), "splits": splits}


def validation_rule(config) -> str:
    """The task's validation rule, in words."""
    blind = (" Validators give their own answer first and see the writer's only after it (blind validation)."
             if config.blind_validation else "")
    if config.adaptive_validation:
        v = config.validation
        rule = (f"Adaptive validation: each vote is weighed by its validator's estimated reliability, and an "
                f"example is decided once the probability that its writer is right (or wrong) reaches "
                f"{v['target_confidence']}, after {v['min_votes']} to {v['max_votes']} votes; one still "
                "undecided after the most votes goes to a researcher.")
    else:
        n = config.num_matching_validations
        rule = (f"Fixed validation: an example is verified once {n} validator{'s' if n != 1 else ''} "
                f"agree{'' if n != 1 else 's'} that the writer's answer is right (rejected once {n} say it is "
                "wrong).")
    trust = config.validator_trust
    decides = "every example" if trust["decides"] == "all" else "every example that earns a bonus"
    references = int(trust.get("min_reference_answers", 0))
    of_them = (f", {references} of them on examples that others decided after the answer" if references else "")
    return (f"{rule}{blind} On {decides}, the votes that count are those of the task's researchers (who decide "
            "at once), of MTurk workers of a validation batch once MTurk confirmed their work, and of site "
            f"accounts that earned trust on the task (at least {trust['min_answers']} checked answers{of_them}, "
            f"agreeing at {percent(trust['min_agreement'], 0)} or more) or that a researcher vouched for; accounts "
            "that count as the writer (a shared address) never validate the writer's examples.")


def round_facts(rnd: Round, tally: Tally) -> dict:
    """One released round: its targets, the model error rate at collection (the round
    counters: every example written on the platform, not only those released) and the
    share of its released written examples that fooled the model, with intervals."""
    c = counters.counts_of(rnd)
    collected, fooled, verified_fooled = c["collected"], c["fooled"], c["verified_fooled"]
    written, released_fooled = tally.round_written[rnd.number], tally.round_fooled[rnd.number]
    return {
        "number": rnd.number, "static": rnd.is_static,
        "target_models": list(rnd.target_models.order_by("pk").values_list("name", flat=True)),
        "collected": collected, "fooled": fooled, "verified_fooled": verified_fooled,
        "model_error_rate": fooled / collected if collected else None,
        "model_error_interval": list(wilson_interval(fooled, collected)),
        "verified_model_error_rate": verified_fooled / collected if collected else None,
        "verified_model_error_interval": list(wilson_interval(verified_fooled, collected)),
        "released": tally.round_rows[rnd.number], "released_written": written,
        "released_fooled": released_fooled,
        "released_fooled_rate": released_fooled / written if written else None,
        "released_fooled_interval": list(wilson_interval(released_fooled, written)),
    }


def card_facts(task: Task, *, version: int, rounds: list[Round], requested_splits: list[str], tally: Tally,
               columns: list[Column], created_at) -> dict:
    """Everything the card and the Croissant metadata say, as plain data (kept in the
    release job's result)."""
    config = task.parsed_config
    labels = config.label_names if tally.labelled else []
    splits = [s for s in requested_splits if tally.rows[s]]
    counted = tally.votes_correct + tally.votes_incorrect
    sections = card_sections(task, rounds)
    return {
        "task": {"slug": task.slug, "name": task.name, "goal": task.goal, "instructions": task.instructions,
                 "content_warning": task.content_warning, "task_type": task.task_type,
                 "labels": [{"name": label["name"], "description": label.get("description", "")}
                            for label in config.labels]},
        "version": version, "created_at": created_at.isoformat(),
        "license": config.license, "license_url": LICENSES.get(config.license),
        "language": list(config.language),
        "rounds": [r.number for r in rounds], "splits": splits, "requested_splits": list(requested_splits),
        "empty_splits": [s for s in requested_splits if not tally.rows[s]],
        "columns": [{"name": c.name, "kind": c.kind, "description": c.description, "nullable": c.nullable}
                    for c in columns],
        "counts": tally.counts(labels), "labels": labels,
        "round_facts": [round_facts(r, tally) for r in rounds],
        "validation": {
            "rule": validation_rule(config), "policy": config.validation["policy"],
            "verified_by": {key: tally.verified_by[key] for key in VERIFIED_BY},
            "votes_correct": tally.votes_correct, "votes_incorrect": tally.votes_incorrect,
            "vote_agreement": tally.votes_correct / counted if counted else None,
            "vote_agreement_interval": list(wilson_interval(tally.votes_correct, counted)),
            "blind_answers": tally.blind_answers, "blind_agreeing": tally.blind_agreeing,
            "blind_agreement": tally.blind_agreeing / tally.blind_answers if tally.blind_answers else None,
            "blind_agreement_interval": list(wilson_interval(tally.blind_agreeing, tally.blind_answers)),
        },
        "annotators": len(tally.annotators),
        "annotator_rows": sorted(tally.annotators.values(), reverse=True),
        "models": sorted(tally.models),
        "sections": [{"key": s.key, "heading": s.heading, "paragraphs": s.paragraphs, "facts": s.facts}
                     for s in sections],
    }


def citation(facts: dict) -> str:
    """A BibTeX entry for the release (Croissant's ``citeAs`` and the card's last section)."""
    task = facts["task"]
    title = " ".join(str(task["name"]).replace("{", "(").replace("}", ")").split())
    return (f"@misc{{dynabench_{task['slug'].replace('-', '_')}_v{facts['version']},\n"
            f"  title = {{{{{title}}}: Dynabench data release v{facts['version']}}},\n"
            f"  note = {{Verified examples of round(s) {', '.join(map(str, facts['rounds']))} of the Dynabench "
            f"task {task['slug']}}},\n"
            f"  year = {{{facts['created_at'][:4]}}}\n}}")


def hub_category(task_type: str) -> str:
    """The Hub's task category for a task of this type (its kind's)."""
    kind = kind_named(task_type)
    return kind.hub_category if kind else DEFAULT_TASK_CATEGORY


def yaml_header(facts: dict) -> str:
    """The Hub's YAML metadata (``huggingface_hub.DatasetCardData``): what the Hub's search,
    its licence badge and its data viewer read, and which file is which split."""
    from huggingface_hub import DatasetCardData

    license_id = facts["license"]
    data = DatasetCardData(
        license="unknown" if license_id == "unspecified" else license_id,
        language=facts["language"],
        task_categories=[hub_category(facts["task"]["task_type"])],
        size_categories=[size_category(facts["counts"]["rows"])],
        pretty_name=f"{facts['task']['name']} (Dynabench, v{facts['version']})",
        tags=["dynabench", "adversarial", "human-and-model-in-the-loop"],
        configs=[{"config_name": "default",
                  "data_files": [{"split": s, "path": f"data/{s}.parquet"} for s in facts["splits"]]}],
    )
    return data.to_yaml()


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def render_card(facts: dict, files: dict) -> str:
    """README.md: the YAML header, then the card. ``files`` are the data files and the
    Croissant file with their digests (the card cannot list its own)."""
    task, counts, v = facts["task"], facts["counts"], facts["validation"]
    license_id = facts["license"]
    out = ["---", yaml_header(facts).rstrip("\n"), "---", "",
           f"# {text(task['name'])}: Dynabench data release v{facts['version']}", ""]
    if task["content_warning"]:
        out += [f"> **Content warning:** {text(task['content_warning'])}", ""]
    rounds = ", ".join(str(n) for n in facts["rounds"])
    per_split = ", ".join(f"{s}: {counts['splits'][s]['rows']}" for s in facts["splits"])
    out += [
        f"{paragraph(task['goal'])}" if task["goal"] else "",
        "",
        f"Examples written on the Dynabench platform, where people write examples meant to fool a target "
        f"model and other people validate them. This release holds every verified example of round(s) "
        f"{rounds}: {counts['rows']} examples in {len(facts['splits'])} split(s) "
        f"({per_split}). "
        f"Made {facts['created_at'][:10]}; a release never changes after it is made (a new one is a new "
        "version).",
        "",
        f"**Licence:** {license_id}" + (f" ({facts['license_url']})" if facts["license_url"] else "")
        + (" — no licence has been chosen for this data; ask the task's researchers before reusing it."
           if license_id == "unspecified" else ""),
        "",
        "## Loading it", "",
        "```python",
        "from datasets import load_dataset",
        "",
        "data = load_dataset(\"parquet\", data_files={"
        + ", ".join(f"\"{s}\": \"data/{s}.parquet\"" for s in facts["splits"]) + "})",
        "```", "",
        "Each split is one Parquet file; `croissant.json` describes the same files in MLCommons' Croissant format.",
        "",
        "## What the writers were asked", "",
        paragraph(task["instructions"]) or "(no instructions recorded)", "",
    ]
    if task["labels"]:
        out += _table(["Label", "Meaning"], [[text(label["name"]), text(label["description"])]
                                              for label in task["labels"]]) + [""]
    out += ["## Fields", ""]
    out += _table(["Column", "Type", "Description"],
                  [[f"`{c['name']}`", c["kind"] + (", may be null" if c["nullable"] else ""), text(c["description"])]
                   for c in facts["columns"]]) + [""]

    out += ["## Counts", "", "Examples per split and round" + ("" if not facts["labels"] else " and label") + ":",
            ""]
    if facts["labels"]:
        rows = [[s, r, label, n] for s in facts["splits"]
                for r, by_label in counts["splits"][s]["by_round_label"].items() for label, n in by_label.items()]
        out += _table(["Split", "Round", "Label", "Examples"], rows)
    else:
        rows = [[s, r, n] for s in facts["splits"] for r, n in counts["splits"][s]["by_round"].items()]
        out += _table(["Split", "Round", "Examples"], rows)
    out += [""]
    if facts["empty_splits"]:
        out += [f"The split(s) {', '.join(facts['empty_splits'])} had no verified example in these rounds and are "
                "not in the release.", ""]

    out += ["## Model error rate", "",
            "At collection, per round: of the examples written on the platform (verified or not), the share that "
            "fooled the round's target model, and the share that fooled it and was then verified (the verified "
            "model error rate), each with its 95% Wilson interval; then the share of this release's written "
            "examples of the round that fooled the model.", ""]
    rows = []
    for r in facts["round_facts"]:
        if r["static"] and not r["collected"]:
            rows.append([r["number"], "static data (not collected against a model)", "–", "–", "–", "–",
                         r["released"]])
            continue
        rows.append([
            r["number"], text(", ".join(r["target_models"])) or "–", r["collected"],
            f"{percent(r['model_error_rate'])} ({interval(*r['model_error_interval'])})",
            f"{percent(r['verified_model_error_rate'])} ({interval(*r['verified_model_error_interval'])})",
            f"{r['released_fooled']} of {r['released_written']}: {percent(r['released_fooled_rate'])} "
            f"({interval(*r['released_fooled_interval'])})",
            r["released"]])
    out += _table(["Round", "Target model(s)", "Written", "Model error rate (95% interval)",
                   "Verified model error rate (95% interval)", "Released, fooled the model", "Released"], rows)
    out += [""]

    counted = v["votes_correct"] + v["votes_incorrect"]
    out += ["## Validation", "", v["rule"], ""]
    by = v["verified_by"]
    out += [f"Of the {counts['rows']} released examples, {by['validators']} were verified by validators' votes, "
            f"{by['researcher']} by a researcher of the task, and {by['imported']} were imported with their data "
            "set's gold label (not validated on the platform).", ""]
    if counted:
        out += [f"**Agreement:** on the released examples written on the platform, {v['votes_correct']} of "
                f"{counted} counted validator decisions agreed with the outcome: "
                f"{percent(v['vote_agreement'])} (95% Wilson interval {interval(*v['vote_agreement_interval'])}).", ""]
    else:
        out += ["**Agreement:** no counted validator decision on the released examples (researchers or imports "
                "decided them).", ""]
    if v["blind_answers"]:
        out += [f"Validators' own (blind) answers agreed with the writer's in {v['blind_agreeing']} of "
                f"{v['blind_answers']} cases: {percent(v['blind_agreement'])} "
                f"({interval(*v['blind_agreement_interval'])}).", ""]
    out += ["Rejected, flagged and retracted examples, and examples still waiting for a decision, are not "
                "released.", ""]

    out += ["## Annotators", "",
            f"{facts['annotators']} distinct writer(s). The `annotator` column is a pseudonym: a keyed hash "
            "(HMAC-SHA256 under a secret key of the platform) of the writer's account, the same in every release "
            "of this platform, so a writer's examples can be grouped; it is never the account, its username or "
            "an MTurk worker id, and cannot be turned back into them without the key.", ""]
    sections = facts["sections"]
    if not any(s["key"] == "recruitment" for s in sections):
        out += ["### Recruitment and pay", "",
                "The platform holds no crowd-work records for these rounds: the writers and validators used site "
                "accounts, and no payment to them is recorded here.", ""]
    for section in sections:
        out += [f"### {section['heading']}", ""]
        for para in section["paragraphs"]:
            out += [para, ""]

    out += ["## Known limitations", ""]
    out += [f"- {line}" for line in limitations(facts)] + [""]

    out += ["## Citing", "", "```bibtex", citation(facts), "```", ""]
    out += ["## Files", "", "Check a download with `sha256sum`:", ""]
    rows = []
    for name, entry in files.items():
        rows.append([f"`{name}`", entry.get("rows", "–"), entry["bytes"], f"`{entry['sha256']}`"])
    out += _table(["File", "Rows", "Bytes", "sha256"], rows) + [""]
    return "\n".join(out)


def limitations(facts: dict) -> list[str]:
    """What a reader should know before using the data: each line holds for this release."""
    lines = []
    collected = [r for r in facts["round_facts"] if not (r["static"] and not r["collected"])]
    if collected:
        models = sorted({m for r in collected for m in r["target_models"]})
        lines.append("Examples were written to fool particular target models"
                     + (f" ({text(', '.join(models))})" if models else "")
                     + ": which examples fool a model depends on that model, so the shares above are not error "
                       "rates of other models, and the data over-represents those models' weaknesses.")
    v = facts["validation"]
    if v["vote_agreement"] is not None and v["vote_agreement"] < 1:
        lines.append(f"Validators disagreed with the outcome in {percent(1 - v['vote_agreement'])} of their counted "
                     "decisions: some labels are contestable, and verified does not mean certain.")
    if v["verified_by"]["imported"]:
        lines.append(f"{v['verified_by']['imported']} example(s) (source import or seed) come from an imported "
                     "data set: their labels are that data set's, not checked here, and its own licence and terms "
                     "apply to them.")
    if facts["license"] == "unspecified":
        lines.append("No licence was chosen for this data (the task config's `license` is unspecified).")
    if facts["empty_splits"]:
        lines.append(f"No verified example in the split(s) {', '.join(facts['empty_splits'])}.")
    lines.append("Only verified examples are released: the rejected ones, which show what writers got wrong, "
                 "are not, so the data says little about how hard the task is for people.")
    rows = facts["annotator_rows"]
    if len(rows) > 1 and rows[0] > rows[-1]:
        lines.append(f"Writers contributed unequal numbers of examples (from {rows[-1]} to {rows[0]} of the "
                     f"{sum(rows)} with a writer): group by `annotator` when splitting or weighing, so that a few "
                     "prolific writers do not dominate an evaluation.")
    return lines
