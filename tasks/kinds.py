"""Task kinds: what kind of answer a task asks for, and everything that follows from it.

A task's ``task_type`` names its kind; ``TaskConfig.kind`` is the kind bound to that
config. The kind is the one place that knows the answer's shape: which config rules
apply to it, what a valid answer is and when two answers agree, how an example
becomes a model's input and training row, what a model's prediction answers, how a
model is scored on rows, which columns an export and a release have for the
answer, and which reference line a model is set beside. The apps above ask the kind;
none of them compares ``task_type`` with a name.

A new kind is one subclass of ``TaskKind`` (or of a kind it resembles) and its tests:
set ``name``, ``title``, ``ml_kind`` and the methods whose answer differs, then
``register`` it. The Django model's choices list the kinds registered when this
module is imported (``TASK_TYPES``); a new built-in kind also needs its migration.
"""

from __future__ import annotations

from typing import ClassVar

from core.errors import InvalidInput
from ml import metrics

NOT_A_SPAN = "The answer must be a span of the passage: select it there, or type it exactly as it appears."
SHOWN_TEXT = 60  # characters of a refused answer quoted back


def not_a_span(text: str) -> str:
    """What an answer that does not occur in the passage is told (the field's own rule)."""
    shown = text if len(text) <= SHOWN_TEXT else text[:SHOWN_TEXT] + "…"
    return f"{NOT_A_SPAN} {shown!r} does not appear in it."


class TaskKind:
    """The rules of one kind of task, bound to one task's config (``self.config``)."""

    name: ClassVar[str]
    title: ClassVar[str]  # what the admin's choice list says
    ml_kind: ClassVar[str]  # the ``ml.TaskSpec`` kind its models are
    primary_metric: ClassVar[str]  # the number a round's leaderboard column shows
    reference_line: ClassVar[str]  # the line models are set beside: "majority" or "qa"
    hub_category: ClassVar[str]  # the Hugging Face Hub task category of its releases
    # What a writer's answer is on the create and validate pages: "label" (a choice of the
    # task's labels) or "span" (text selected in the passage). The pages' script reads it
    # from ``data-answer-shape``, so it names no kind.
    answer_shape: ClassVar[str] = "label"
    # What is wrong with an example that has no context, or None: it needs none.
    without_context: ClassVar[str | None] = None
    # The parts of a writer's answer and of a model's an export has a column for
    # (``target.<part>``, ``prediction.<part>``).
    export_target_parts: ClassVar[tuple[str, ...]]
    export_prediction_parts: ClassVar[tuple[str, ...]]

    def __init__(self, config):
        self.config = config  # a ``tasks.config.TaskConfig`` (which imports this module)

    # --- the config --------------------------------------------------------------------

    @classmethod
    def config_problems(cls, merged: dict, context_names: list[str], label_names: list[str]) -> list[str]:
        """What is wrong with a config (defaults merged) for a task of this kind."""
        raise NotImplementedError

    @property
    def label_names(self) -> list[str]:
        """The labels an answer may take; none for a kind whose answer is not a label."""
        return [label["name"] for label in self.config.labels]

    @property
    def has_labels(self) -> bool:
        return bool(self.label_names)

    @property
    def import_labels(self) -> list[str] | None:
        """The labels a static data set's rows are checked against, or None: no labels."""
        return self.label_names if self.has_labels else None

    # --- answers -----------------------------------------------------------------------

    def clean_target(self, target: dict, context_fields: dict | None, *, field: str, need_start: bool) -> dict:
        """A valid answer to an example, or ``InvalidInput`` naming what is wrong."""
        raise NotImplementedError

    def answers_agree(self, answer: dict, other: dict) -> bool:
        """Whether two answers (targets or predictions) say the same thing."""
        raise NotImplementedError

    def answer_of(self, prediction: dict):
        """What a model's prediction answers (the value robustness compares)."""
        raise NotImplementedError

    def shown_answer(self, target: dict):
        """A writer's answer as one value, for pages."""
        raise NotImplementedError

    def shown_prediction(self, prediction: dict) -> dict:
        """A new example's prediction as the API answers it: ``prediction`` (the answer),
        ``probabilities`` (per label, or None) and ``span`` (offsets, or None)."""
        raise NotImplementedError

    # --- rows for models ---------------------------------------------------------------

    def ml_field_names(self) -> dict[str, str]:
        """The ``ml`` input field each of the config's model inputs becomes, in order."""
        return {name: name for name in self.config.model_inputs}

    def ml_inputs(self, values: dict) -> dict:
        """The model's input row from the model inputs' values, keyed by field name."""
        return {ml_name: values[name] for name, ml_name in self.ml_field_names().items()}

    def training_row(self, values: dict, target: dict) -> dict:
        """An example (its model inputs' values and its answer) as an ``ml`` training row."""
        raise NotImplementedError

    def explanation_target(self, prediction: dict):
        """What ``ml.explain`` attributes for a model's prediction (None: the model's own answer)."""
        return None

    def perturbs(self, ml_field: str) -> bool:
        """Whether robustness and fairness perturb this ``ml`` input field."""
        return True

    def score(self, rows: list[dict], predictions: list[dict]) -> tuple[dict, dict, list[bool]]:
        """A model's predictions on ``ml`` rows scored: ``(metrics, details, wrong)``,
        ``details`` holding the task metric per example (and what intervals and
        calibration need), ``wrong`` whether each answer disagreed with the row's."""
        raise NotImplementedError

    # --- releases ----------------------------------------------------------------------

    def release_answer_columns(self) -> list[tuple[str, str, str]]:
        """The answer's columns in a release: (name, type, description), none nullable."""
        raise NotImplementedError

    def release_answer_values(self, target: dict) -> dict:
        """A writer's answer as the values of ``release_answer_columns``."""
        raise NotImplementedError


class ClassificationKind(TaskKind):
    name = "classification"
    title = "Classification (a label per example)"
    ml_kind = "classification"
    primary_metric = "accuracy"
    reference_line = "majority"
    hub_category = "text-classification"
    export_target_parts = export_prediction_parts = ("label",)

    @classmethod
    def config_problems(cls, merged, context_names, label_names):
        problems = []
        if len(label_names) < 2:
            problems.append("config.labels: a classification task needs at least two labels.")
        if merged["model_wrong_metric"]["type"] != "exact_match":
            problems.append("config.model_wrong_metric: classification tasks use exact_match.")
        if merged.get("answer_context_field"):
            problems.append("config.answer_context_field: only extractive QA tasks have one.")
        return problems

    def clean_target(self, target, context_fields, *, field, need_start):
        label = target.get("label")
        if label not in self.label_names:
            raise InvalidInput.field(f"{field}.label", f"{label!r} is not one of {self.label_names}.")
        return {"label": label}

    def answers_agree(self, answer, other):
        return answer.get("label") == other.get("label")

    def answer_of(self, prediction):
        return prediction.get("label")

    def shown_answer(self, target):
        return target.get("label")

    def shown_prediction(self, prediction):
        return {"prediction": prediction["label"], "probabilities": prediction["probabilities"], "span": None}

    def training_row(self, values, target):
        return {"inputs": self.ml_inputs(values), "label": target["label"]}

    def explanation_target(self, prediction):
        return prediction["label"]

    def score(self, rows, predictions):
        config = self.config
        golds = [r["label"] for r in rows]
        labels = [p["label"] for p in predictions]
        scores = metrics.classification_report(golds, labels, labels=self.label_names)
        wrong = [config.model_fooled({"label": g}, p) for g, p in zip(golds, predictions, strict=True)]
        details = {"per_example": [float(g == p) for g, p in zip(golds, labels, strict=True)], "gold": golds,
                   "pred": labels,
                   "confidence": [round(float(p["probabilities"][p["label"]]), 6) for p in predictions]}
        return scores, details, wrong

    def release_answer_columns(self):
        return [("label", "text", f"The writer's label, one of {', '.join(self.label_names)}.")]

    def release_answer_values(self, target):
        return {"label": target.get("label")}


class ExtractiveQAKind(TaskKind):
    name = "extractive_qa"
    title = "Extractive question answering (a span of the passage)"
    ml_kind = "extractive_qa"
    primary_metric = "f1"
    reference_line = "qa"
    hub_category = "question-answering"
    without_context = "a QA example needs a context with the passage"
    answer_shape = "span"
    export_target_parts = export_prediction_parts = ("text", "start")

    @classmethod
    def config_problems(cls, merged, context_names, label_names):
        problems = []
        if label_names:
            problems.append("config.labels: an extractive QA task has no labels.")
        answer_field = merged.get("answer_context_field")
        if not answer_field:
            problems.append("config.answer_context_field: QA needs the context field the answer is a span of.")
        elif answer_field not in context_names:
            problems.append(f"config.answer_context_field: {answer_field!r} is not a context field.")
        if len(merged["model_inputs"]) != 2 or merged["model_inputs"][0] != answer_field:
            problems.append("config.model_inputs: QA takes exactly [passage field, question field], passage first.")
        return problems

    @property
    def import_labels(self):
        return None

    def clean_target(self, target, context_fields, *, field, need_start):
        """``{"text", "start"}``, the passage's text at that character offset. Without
        ``need_start`` the answer may be the text alone (a validator's blind answer),
        and must then occur in the passage."""
        passage = (context_fields or {}).get(self.config.answer_context_field)
        if not isinstance(passage, str):
            raise InvalidInput.field(field, "A QA answer needs the context's passage.")
        text, start = target.get("text"), target.get("start")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput.field(f"{field}.text", "The answer needs 'text': the span of the passage.")
        found = passage.find(text)
        if found < 0:  # whatever the offset says: no offset makes it a span
            raise InvalidInput.field(f"{field}.text", not_a_span(text))
        if start is None:
            if not need_start:
                return {"text": text, "start": found}
            raise InvalidInput.field(f"{field}.start", "The answer needs 'start': its character offset in the "
                                                       f"passage (this text first occurs at {found}).")
        if not isinstance(start, int) or isinstance(start, bool):
            raise InvalidInput.field(f"{field}.start", "The answer needs 'start': its character offset.")
        end = start + len(text)
        if start < 0 or end > len(passage):
            raise InvalidInput.field(f"{field}.start",
                                     f"The span {start}-{end} is outside the passage (0-{len(passage)}).")
        if passage[start:end] != text:
            raise InvalidInput.field(f"{field}.start", f"The passage's text at {start} is not the answer; "
                                                       f"the answer first occurs at {found}.")
        return {"text": text, "start": start}

    def answers_agree(self, answer, other):
        """A SQuAD exact match, or token F1 at least the threshold (``string_f1``)."""
        a = answer.get("text", answer.get("answer"))
        b = other.get("text", other.get("answer"))
        if not isinstance(a, str) or not isinstance(b, str):
            return False
        if self.config.model_wrong_metric["type"] == "string_f1":
            return metrics.f1(a, b) >= self.config.metric_threshold
        return metrics.exact_match(a, b) == 1.0

    def answer_of(self, prediction):
        return prediction.get("answer")

    def shown_answer(self, target):
        return target.get("text")

    def shown_prediction(self, prediction):
        return {"prediction": prediction["answer"], "probabilities": None,
                "span": {"start": prediction["start"], "end": prediction["end"]}}

    def ml_field_names(self):
        return dict(zip(self.config.model_inputs, ["passage", "question"], strict=True))

    def training_row(self, values, target):
        return {"inputs": self.ml_inputs(values), "answer": {"text": target["text"], "start": target["start"]}}

    def perturbs(self, ml_field):
        return ml_field == "question"  # the passage is the researchers', the question the writer's

    def score(self, rows, predictions):
        config = self.config
        golds = [r["answer"]["text"] for r in rows]
        answers = [p["answer"] for p in predictions]
        scores = metrics.squad_scores(answers, golds)
        details = {"per_example": [round(metrics.f1(a, g), 6) for a, g in zip(answers, golds, strict=True)]}
        wrong = [config.model_fooled(r["answer"], p) for r, p in zip(rows, predictions, strict=True)]
        return scores, details, wrong

    def release_answer_columns(self):
        where = self.config.answer_context_field
        return [("answer_text", "text", f"The writer's answer: a span of {where}."),
                ("answer_start", "int", f"The answer's character offset in {where}.")]

    def release_answer_values(self, target):
        return {"answer_text": target.get("text"), "answer_start": target.get("start")}


KINDS: dict[str, type[TaskKind]] = {}


def register(kind: type[TaskKind]) -> type[TaskKind]:
    """Make ``kind`` a task type (a test's kind is registered for the test only)."""
    KINDS[kind.name] = kind
    return kind


def unregister(kind: type[TaskKind]) -> None:
    KINDS.pop(kind.name, None)


def kind_named(name: str) -> type[TaskKind] | None:
    return KINDS.get(name)


register(ClassificationKind)
register(ExtractiveQAKind)
