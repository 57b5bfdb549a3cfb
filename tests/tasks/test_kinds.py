"""Task kinds (``tasks.kinds``): no app switches on a task's type, and a new kind is one
class. ``YesNoWithRationaleKind``, registered for this module only, goes through the
annotation API, an import, an evaluation, an export and a release's columns without a
line of product code knowing it."""

import csv
import io
import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from core.errors import InvalidInput
from tasks.config import TASK_TYPES, text_problem, validate_task_config
from tasks.kinds import KINDS, ClassificationKind, ExtractiveQAKind, register, unregister

# --- no switch on the kind outside the kinds ------------------------------------------

SCANNED = ["annotation", "leaderboard", "crowd", "tasks", "core"]
OWNERS = {"tasks/kinds.py", "tasks/config.py"}
SWITCHES = re.compile(
    r"""task_type\s*(==|!=|\bin\b|\bnot\s+in\b)"""  # task.task_type == "..."
    r"""|(==|!=)\s*[\w.]*task_type\b"""  # "..." == config.task_type
    r"""|["'](extractive_qa|classification)["']"""  # a kind's name spelled out
    r"""|\b(EXTRACTIVE_QA|CLASSIFICATION)\b"""  # or imported
    r"""|\b_?is_qa\b|\bis_classification\b"""  # or asked by another name
    r"""|\b(isQA|taskType)\b|data-task-type"""  # in a page's script or its template
)


def switches_in(text: str, where: str) -> list[str]:
    return [f"{where}:{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
            if SWITCHES.search(line)]


def test_no_app_switches_on_the_task_kind():
    root = Path(settings.BASE_DIR)
    found = []
    for app in SCANNED:
        for path in sorted((root / app).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where in OWNERS or "/migrations/" in where:
                continue
            found += switches_in(path.read_text(encoding="utf-8"), where)
    # The pages' scripts and templates: a kind's answer shape comes from the server
    # (data-answer-shape, from the kind's ``answer_shape``), never its name.
    for path in [*sorted((root / "static" / "js").glob("*.js")), *sorted(root.glob("*/templates/**/*.html"))]:
        found += switches_in(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())
    assert not found, "Ask the task's kind (tasks/kinds.py) instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    'if config.task_type == "extractive_qa":',
    "qa = task.parsed_config.task_type != EXTRACTIVE_QA",
    'labels = None if "extractive_qa" == config.task_type else config.label_names',
    "if task_type in (CLASSIFICATION, 'x'):",
    "if reference.is_qa(task):",
    "def _is_qa(self, created):",
    "kind = 'classification'",
    'var isQA = root.dataset.taskType === "extractive_qa";',
    "if (root.dataset.taskType === 'classification') {",
    '<div id="annotate" data-task-type="{{ task.task_type }}">',
])
def test_the_scan_finds_a_switch(line):
    assert switches_in(f"x = 1\n{line}\n", "app/module.py") == [f"app/module.py:2: {line.strip()}"]


@pytest.mark.parametrize("line", [
    'fields = ["name", "slug", "task_type"]',
    "validate_task_config(task.task_type, task.config)",
    "task_categories=[hub_category(facts['task']['task_type'])]",
    'DEFAULT_TASK_CATEGORY = "text-classification"',
])
def test_the_scan_leaves_plain_uses_of_the_type_alone(line):
    assert switches_in(line, "app/module.py") == []


def test_the_built_in_kinds_are_the_models_choices():
    assert [name for name, _ in TASK_TYPES] == ["classification", "extractive_qa"]
    assert KINDS["classification"] is ClassificationKind and KINDS["extractive_qa"] is ExtractiveQAKind


# --- a kind made for this module only ------------------------------------------------


class YesNoWithRationaleKind(ClassificationKind):
    """A yes/no question about a passage, answered with a label and the writer's reason
    (BoolQ with rationales). The labels are the kind's own, not the config's; a model
    reads passage + question and answers the label; the rationale is data the export
    and the release carry, never scored. A validator's blind answer is the label alone."""

    name = "yes_no_rationale"
    title = "Yes/no with a rationale (tests only)"
    hub_category = "question-answering"
    export_target_parts = ("label", "rationale")
    export_prediction_parts = ("label",)
    LABELS = ("no", "yes")

    @classmethod
    def config_problems(cls, merged, context_names, label_names):
        problems = []
        if label_names:
            problems.append("config.labels: a yes/no task answers no or yes; list no labels.")
        if merged["model_wrong_metric"]["type"] != "exact_match":
            problems.append("config.model_wrong_metric: yes/no tasks use exact_match.")
        if len(merged["model_inputs"]) != 2 or merged["model_inputs"][0] not in context_names:
            problems.append("config.model_inputs: [passage field, question field], passage first.")
        return problems

    @property
    def label_names(self):
        return list(self.LABELS)

    def clean_target(self, target, context_fields, *, field, need_start):
        answer = super().clean_target(target, context_fields, field=field, need_start=need_start)
        rationale = target.get("rationale")
        if rationale is None and not need_start:
            return answer
        problem = text_problem(rationale, self.config.max_input_length, required=True)
        if problem:
            raise InvalidInput.field(f"{field}.rationale", problem)
        return {**answer, "rationale": rationale}

    def release_answer_columns(self):
        return [*super().release_answer_columns(), ("rationale", "text", "Why the writer answered so.")]

    def release_answer_values(self, target):
        return {**super().release_answer_values(target), "rationale": target.get("rationale")}


CONFIG = {
    "context_fields": [{"name": "passage"}],
    "input_fields": [{"name": "question", "label": "A yes/no question about the passage"}],
    "model_inputs": ["passage", "question"],
}
PASSAGES = ["The river freezes every winter and thaws in March.",
            "The library closes at noon on Sundays and opens late on Mondays."]
QUESTIONS = [("Does the river freeze in winter?", "yes"), ("Does the river thaw in June?", "no"),
             ("Is the library open on Sunday morning?", "yes"), ("Does the library open early on Monday?", "no")]
TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}


@pytest.fixture
def yes_no():
    """The kind, a task type for one test."""
    register(YesNoWithRationaleKind)
    yield YesNoWithRationaleKind
    unregister(YesNoWithRationaleKind)


def passage_of(n: int) -> str:
    return PASSAGES[(n % len(QUESTIONS)) // 2]  # two questions about each passage


@pytest.fixture(scope="module")
def yes_no_artifact(tmp_path_factory):
    """A tiny model for the kind, trained once for the module on rows the kind makes."""
    import ml
    from leaderboard.rows import example_row

    register(YesNoWithRationaleKind)
    try:
        config = validate_task_config(YesNoWithRationaleKind.name, CONFIG)
        rows = [example_row(config, {"passage": passage_of(n)}, {"question": QUESTIONS[n % len(QUESTIONS)][0]},
                            {"label": QUESTIONS[n % len(QUESTIONS)][1], "rationale": "the passage says so"})
                for n in range(8)]
        spec = ml.TaskSpec.from_dict(config.ml_spec_dict())
    finally:
        unregister(YesNoWithRationaleKind)
    assert rows[0] == {"inputs": {"passage": PASSAGES[0], "question": QUESTIONS[0][0]}, "label": "yes"}
    return ml.train(spec, rows, [], tmp_path_factory.mktemp("yes-no") / "artifact", **TINY)


@pytest.fixture
def boolq(db, yes_no, yes_no_artifact):
    """A public yes/no task with round 1 open, two passages and a tiny target model."""
    from registry.services import register_model
    from tasks.models import Context, Round, Task

    task = Task.objects.create(slug="boolq", name="BoolQ with reasons", task_type=yes_no.name, config=CONFIG)
    for passage in PASSAGES:
        Context.objects.create(task=task, fields={"passage": passage})
    model = register_model(task, yes_no_artifact, name="boolq-tiny")
    Round.objects.create(task=task, number=1, status=Round.Status.OPEN).target_models.add(model)
    return task


def test_the_kind_has_its_own_config_rules(yes_no):
    config = validate_task_config(yes_no.name, CONFIG)
    assert isinstance(config.kind, YesNoWithRationaleKind)
    assert config.label_names == ["no", "yes"] and config.kind.import_labels == ["no", "yes"]
    assert config.ml_spec_dict()["kind"] == "classification"
    assert config.ml_spec_dict()["input_fields"] == ["passage", "question"]
    with pytest.raises(ValidationError, match="list no labels"):
        validate_task_config(yes_no.name, {**CONFIG, "labels": [{"name": "maybe"}, {"name": "no"}]})
    # Its answers agree on the label: the rationale is the writer's, not a model's.
    assert config.answers_agree({"label": "yes", "rationale": "because"}, {"label": "yes", "probabilities": {}})
    assert config.model_fooled({"label": "no", "rationale": "because"}, {"label": "yes"})


def test_outside_its_tests_the_kind_is_an_unknown_task_type():
    with pytest.raises(ValidationError, match="Unknown task type 'yes_no_rationale'"):
        validate_task_config("yes_no_rationale", CONFIG)


def test_examples_are_written_through_the_api_and_judged_by_the_kind(boolq, client_for, annotator):
    from annotation.models import Example

    client = client_for(annotator)
    context = client.get("/api/tasks/boolq/contexts/next/").json()
    refused = client.post("/api/tasks/boolq/examples/", {
        "context": context["id"], "inputs": {"question": "Is it so?"}, "target": {"label": "yes"}}, format="json")
    assert refused.status_code == 400 and "target.rationale" in refused.json()["errors"], refused.content
    refused = client.post("/api/tasks/boolq/examples/", {
        "context": context["id"], "inputs": {"question": "Is it so?"},
        "target": {"label": "maybe", "rationale": "unsure"}}, format="json")
    assert refused.status_code == 400 and "target.label" in refused.json()["errors"], refused.content

    response = client.post("/api/tasks/boolq/examples/", {
        "context": context["id"], "inputs": {"question": "Is the passage about rivers?"},
        "target": {"label": "yes", "rationale": "it names a river"}}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["prediction"] in ("no", "yes") and set(body["probabilities"]) == {"no", "yes"}
    assert body["span"] is None and body["fooled"] == (body["prediction"] != "yes")
    example = Example.objects.get(pk=body["id"])
    assert example.target == {"label": "yes", "rationale": "it names a river"}
    assert example.prediction["label"] == body["prediction"]


def import_test_set(task):
    from annotation.datasets import import_records
    from datafiles.readers import Record

    records = [Record(line=n + 1, external_uid=f"test-{n}", inputs={"question": QUESTIONS[n][0]},
                      target={"label": QUESTIONS[n][1], "rationale": "the passage says so"}, split="test",
                      context={"external_id": f"p{n // 2}", "fields": {"passage": passage_of(n)}})
               for n in range(len(QUESTIONS))]
    records.append(Record(line=9, external_uid="no-reason", inputs={"question": "Is it?"},
                          target={"label": "yes"}, split="test",
                          context={"external_id": "p0", "fields": {"passage": PASSAGES[0]}}))
    return import_records(task, records, round_number=0, split="test")


def test_a_model_is_evaluated_on_the_kinds_rounds(boolq):
    import ml
    from leaderboard.evaluation import evaluate_model, ref_for
    from leaderboard.rows import example_rows, primary_metric, usable_examples

    report = import_test_set(boolq)
    assert report.created == len(QUESTIONS)
    assert len(report.errors) == 1 and "target.rationale" in report.errors[0].message, report.errors
    model = boolq.rounds.get(number=1).target_models.get()
    [evaluation] = evaluate_model(model, boolq.rounds.filter(number=0), measure=False)
    assert primary_metric(boolq) == "accuracy" and evaluation.num_examples == len(QUESTIONS)

    rows = example_rows(boolq, usable_examples(boolq, split="test", rounds=[0]))
    assert {row["label"] for row in rows} == {"no", "yes"} and "rationale" not in rows[0]["inputs"]
    predicted = [p["label"] for p in ml.predict(ref_for(model), [row["inputs"] for row in rows])]
    right = [float(p == row["label"]) for p, row in zip(predicted, rows, strict=True)]
    assert evaluation.metrics["accuracy"] == pytest.approx(sum(right) / len(rows))
    assert evaluation.metrics["model_error_rate"] == pytest.approx(1 - sum(right) / len(rows))


def test_the_export_and_the_release_carry_the_rationale(boolq, tmp_path, yes_no):
    from annotation.datasets import import_records
    from annotation.exporting import Selection, write_examples
    from datafiles.readers import read_records
    from leaderboard.releases.card import hub_category
    from leaderboard.releases.rows import columns
    from tasks.models import Task

    import_test_set(boolq)
    out = io.StringIO(newline="")
    write_examples(boolq, out, Selection(task_id=boolq.pk), fmt="csv")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert "target.rationale" in table[0] and "prediction.label" in table[0]
    assert "prediction.rationale" not in table[0]
    assert {(r["inputs.question"], r["target.label"], r["target.rationale"]) for r in table} == {
        (q, label, "the passage says so") for q, label in QUESTIONS}

    path = tmp_path / "boolq.jsonl"
    with path.open("w", encoding="utf-8", newline="") as stream:
        write_examples(boolq, stream, Selection(task_id=boolq.pk), fmt="jsonl")
    copy = Task.objects.create(slug="boolq-copy", name="Copy", task_type=yes_no.name, config=CONFIG)
    report = import_records(copy, read_records("dynabench", path), strict=True)
    assert report.created == len(QUESTIONS)
    exported = [json.loads(line)["target"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(copy.examples.values_list("target", flat=True), key=json.dumps) == sorted(exported, key=json.dumps)

    names = [column.name for column in columns(boolq)]
    assert names[names.index("question") + 1:names.index("model_answer")] == ["label", "rationale"]
    assert hub_category(yes_no.name) == "question-answering" and hub_category("gone") == "text-classification"
