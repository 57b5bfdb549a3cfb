"""The prompt an OpenAI-compatible chat model is asked, and the strict reading of
its answer.

A template is plain text with ``{name}`` placeholders: the example's ``ml`` input
fields (``{statement}``, ``{premise}``, ``{hypothesis}``, ``{passage}``,
``{question}``...), ``{labels}`` (the label names, comma-separated) and
``{label_descriptions}`` (one "name: description" line per label). Nothing else
is substituted and the values are inserted as they are (never formatted again),
so a writer's text cannot reach into the template.
"""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

CLASSIFICATION_TEMPLATE = (
    "Classify the example below.\n\n{fields}\n\n"
    "Possible labels:\n{label_descriptions}\n\n"
    "Answer with exactly one label name from this list and nothing else: {labels}."
)
QA_TEMPLATE = (
    "Passage:\n{passage}\n\nQuestion: {question}\n\n"
    "Answer with the shortest span copied exactly from the passage that answers the question, and nothing else."
)
SYSTEM_MESSAGE = "You are a careful annotator. Follow the answer format exactly."

# Stripped around an answer before it is read: whitespace, quotes, a final full stop.
_TRIM = " \t\r\n\"'`."


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: dict[str, str]) -> str:
    """``template`` with each known ``{name}`` replaced by its value; unknown ones are
    an error (the task config is checked with ``check_template`` beforehand)."""
    missing = placeholders(template) - set(values)
    if missing:
        raise ValueError(f"the prompt template names unknown fields: {', '.join(sorted(missing))}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def check_template(template: str, allowed: set[str]) -> str | None:
    """What is wrong with a template for these names, or None."""
    known = allowed | {"fields", "labels", "label_descriptions"}
    unknown = placeholders(template) - known
    if unknown:
        return f"unknown placeholders {sorted(unknown)}; allowed: {sorted(known)}"
    return None


def values_for(inputs: dict[str, str], labels: list[str], descriptions: dict[str, str]) -> dict[str, str]:
    fields = "\n".join(f"{name}: {text}" for name, text in inputs.items())
    described = "\n".join(f"- {name}: {descriptions[name]}" if descriptions.get(name) else f"- {name}"
                          for name in labels)
    return {**inputs, "fields": fields, "labels": ", ".join(labels), "label_descriptions": described}


def parse_label(content: str, labels: list[str]) -> str | None:
    """The one label the answer is, or None: after trimming whitespace, quotes and a
    final full stop, the whole answer must be one label name (case aside). An answer
    that names two labels, explains itself or is empty is not read."""
    if not isinstance(content, str):
        return None
    answer = content.strip(_TRIM).casefold()
    matches = [label for label in labels if label.casefold() == answer]
    return matches[0] if len(matches) == 1 else None


def parse_span(content: str, passage: str) -> tuple[int, int] | None:
    """``(start, end)`` of the answer in the passage (its first occurrence), or None
    when the trimmed answer is empty or not copied exactly from the passage."""
    if not isinstance(content, str):
        return None
    answer = content.strip(" \t\r\n\"'`")
    if not answer:
        return None
    start = passage.find(answer)
    if start < 0 and answer.endswith("."):
        answer = answer[:-1]
        start = passage.find(answer) if answer else -1
    if start < 0:
        return None
    return start, start + len(answer)
