"""A task config's ``endpoint_models``: how models behind endpoints are asked
(``registry.endpoints``): its schema, defaults and checks (``tasks.config`` calls
``endpoint_problems`` with the merged config)."""

from __future__ import annotations

from ml.endpoints.prompts import check_template

ENDPOINT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "prompt_template": {"type": "string", "minLength": 1, "maxLength": 4000},
        "unparseable_is_error": {"type": "boolean"},
        "occlusion_max_calls": {"type": "integer", "minimum": 0, "maximum": 200},
        "probe_examples": {"type": "array", "maxItems": 10,
                           "items": {"type": "object", "maxProperties": 5,
                                     "additionalProperties": {"type": "string", "maxLength": 20000}}},
    },
}

# How models behind endpoints are asked (``registry.endpoints``): the chat prompt
# (``ml.endpoints.prompts``: ``{field}``, ``{fields}``, ``{labels}``,
# ``{label_descriptions}``; empty: the kind's default), whether an answer that cannot be
# read counts as the model's error (default: no; it is recorded and shown as
# unreadable), how many calls a black-box "Why?" may make (0: not offered), and the
# probe examples (model input values by field name) a health check asks.
ENDPOINT_DEFAULTS = {"prompt_template": None, "unparseable_is_error": False, "occlusion_max_calls": 40,
                     "probe_examples": []}


def endpoint_problems(merged: dict, kind) -> list[str]:
    """What is wrong with the config's ``endpoint_models`` (its template's fields, its
    probe examples' inputs), one message per problem."""
    problems = []
    template = merged["endpoint_models"]["prompt_template"]
    if template:
        # The ``ml`` field names the model inputs become (QA: passage and question).
        ml_names = {"passage", "question"} if kind.answer_shape == "span" else set(merged["model_inputs"])
        problem = check_template(template, ml_names)
        if problem:
            problems.append(f"config.endpoint_models.prompt_template: {problem}.")
    for i, probe in enumerate(merged["endpoint_models"]["probe_examples"]):
        unknown = sorted(set(probe) - set(merged["model_inputs"]))
        if unknown or set(probe) != set(merged["model_inputs"]):
            problems.append(f"config.endpoint_models.probe_examples[{i}]: needs exactly the model inputs "
                            f"{merged['model_inputs']}.")
    return problems
