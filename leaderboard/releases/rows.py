"""What a release holds: which examples, and the columns of each row.

Released: the *usable* examples of the chosen rounds and split, the ones training and
evaluation read and the round counters count as ``usable_<split>``: verified, not
flagged, not retracted, and not in an MTurk assignment that MTurk has not confirmed;
less the gold items in use (``public``: their verdicts are the validators' answer key).
Only closed rounds are released (``check_rounds``); round 0, the static data a task
starts from, is closed from the start.

Each row has the task config's context and input fields (one column each), the
round, the writer's answer (``label``, or ``answer_text`` and ``answer_start`` for
extractive QA), the model's answer, whether it fooled the model and which models
answered, how the example was verified and how far its validators agreed, and the
writer as a pseudonym: a keyed hash (``RELEASE_PSEUDONYM_KEY``) of the account, never
the account's id, username or MTurk worker id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Q
from django.utils.crypto import salted_hmac

from annotation.exporting import ANNOTATOR_METADATA_KEY, DELETED_ANNOTATOR_KEY
from annotation.gold import not_in_use
from annotation.models import Example, Validation
from core.errors import Conflict, InvalidInput, Unavailable
from registry.models import ModelVersion
from tasks.config import TaskConfig
from tasks.models import Round, Task

SPLITS = tuple(Example.Split.values)
CHUNK = 1000
PSEUDONYM_SALT = "dynabench.release.annotator"
VERIFIED_BY = {
    "validators": "validators' votes decided it (the task's validation rule)",
    "researcher": "a researcher of the task decided it",
    "imported": "imported with its data set's gold label; not validated on the platform",
}


def usable(queryset):
    """The examples a release may hold: verified, not flagged, retracted or provisional."""
    return queryset.filter(validation_status=Example.ValidationStatus.VERIFIED, flagged=False, retracted=False,
                           provisional=False)


def check_rounds(task: Task, numbers, splits) -> tuple[list[Round], list[str]]:
    """The rounds and splits a release of ``task`` asks for, checked: each round exists
    and is closed (an open round is still being written and validated; a draft one was
    never run), each split is one of ``SPLITS``. Raises ``InvalidInput`` or ``Conflict``
    with the reason."""
    if not isinstance(numbers, list | tuple) or not numbers:
        raise InvalidInput.field("rounds", "Name at least one round (a list of round numbers).")
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in numbers):
        raise InvalidInput.field("rounds", "Round numbers are whole numbers from 0.")
    numbers = sorted(set(numbers))
    splits = list(SPLITS) if splits is None else splits
    if not isinstance(splits, list | tuple) or not splits:
        raise InvalidInput.field("splits", f"Name at least one split of {list(SPLITS)}.")
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise InvalidInput.field("splits", f"Unknown split(s) {unknown}; a split is one of {list(SPLITS)}.")
    splits = [s for s in SPLITS if s in splits]
    rounds = {r.number: r for r in Round.objects.filter(task=task, number__in=numbers)}
    missing = [n for n in numbers if n not in rounds]
    if missing:
        raise InvalidInput.field("rounds", f"Task {task.slug} has no round {', '.join(map(str, missing))}.")
    for number in numbers:
        status = rounds[number].status
        if status == Round.Status.OPEN:
            raise Conflict(f"Round {number} of {task.slug} is open: its examples are still being written and "
                           "validated, and nothing from an open round is released. Close the round first "
                           "(or leave it out).")
        if status != Round.Status.CLOSED:
            raise Conflict(f"Round {number} of {task.slug} is a draft: it was never run. Release closed rounds only.")
    return [rounds[n] for n in numbers], splits


def pseudonym_key() -> str:
    """The key of the annotator pseudonyms; ``Unavailable`` (503) when none is configured."""
    key = settings.RELEASE_PSEUDONYM_KEY
    if not key:
        raise Unavailable("Releases need RELEASE_PSEUDONYM_KEY: the key of the annotator pseudonyms they carry "
                          "(a keyed hash, never the account). Set it to a long random value and keep it: "
                          "changing it changes every published annotator id.", retry_after=3600)
    return key


def pseudonym(user_id: int | None, exported: str | None = None) -> str | None:
    """The annotator id a release carries: a keyed hash of the account id (or, for an
    example imported from another deployment's export, of the pseudonym it carried),
    the same in every release of this deployment. None for data with no writer."""
    if user_id is not None:
        value = f"user:{user_id}"
    elif exported:
        value = f"exported:{exported}"
    else:
        return None
    digest = salted_hmac(PSEUDONYM_SALT, value, secret=pseudonym_key(), algorithm="sha256").hexdigest()
    return "ann-" + digest[:20]


def deleted_pseudonym(example) -> str | None:
    """The pseudonym kept for an example whose writer deleted their account (computed
    by ``pseudonym`` before the account was cut off), else None."""
    if example.annotator_id is None and isinstance(example.metadata, dict):
        value = example.metadata.get(DELETED_ANNOTATOR_KEY)
        return value if isinstance(value, str) and value else None
    return None


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "text", "int", "float", "bool", "text_list"
    description: str
    nullable: bool = True


def columns(task: Task) -> list[Column]:
    """The columns of a release of ``task``, in order: the same in every split's file."""
    config: TaskConfig = task.parsed_config
    cols = [Column("uid", "text", "The example's id on the platform (a UUID).", nullable=False),
            Column("round", "int", "The round it was written in (0: the task's static data).", nullable=False),
            Column("source", "text", "annotation (written on the platform), import or seed (imported data).",
                   nullable=False)]
    for field in config.context_fields:
        what = field.get("label") or field["name"]
        cols.append(Column(field["name"], "text", f"Context field: {what}."))
    for field in config.input_fields:
        what = field.get("label") or field["name"]
        cols.append(Column(field["name"], "text", f"What the writer wrote: {what}.", nullable=False))
    cols += [Column(name, kind, description, nullable=False)
             for name, kind, description in config.kind.release_answer_columns()]
    cols += [
        Column("model_answer", "text", "The target model's answer when the example was written (the round's "
                                       "ensemble answer where it had several models); empty when no model answered."),
        Column("fooled", "bool", "Whether the model's answer disagreed with the writer's, by the task's metric; "
                                 "empty when no model answered."),
        Column("target_models", "text_list", "The models that answered, by their names on the platform.",
               nullable=False),
        Column("verified_by", "text", "How it was verified: " + "; ".join(f"{k}: {v}" for k, v in VERIFIED_BY.items())
               + ".", nullable=False),
        Column("votes_correct", "int", "Validators' decisions that the writer's answer is right.", nullable=False),
        Column("votes_incorrect", "int", "Validators' decisions that it is wrong.", nullable=False),
        Column("validator_agreement", "float", "votes_correct / (votes_correct + votes_incorrect): how far the "
                                               "validators agreed with the outcome; empty without votes."),
        Column("annotator", "text", "The writer, pseudonymised: a keyed hash of the account, the same across this "
                                    "platform's releases; never the account, username or MTurk id. Empty for "
                                    "imported data with no writer."),
    ]
    return cols


def _answer_text(answer) -> str | None:
    if not isinstance(answer, dict):
        return None
    for key in ("label", "text", "answer"):
        value = answer.get(key)
        if isinstance(value, str):
            return value
    return None


class ModelNames:
    """Model names by id, read once per id for a whole release."""

    def __init__(self, task: Task):
        self.task = task
        self.names: dict[int, str] = {}

    def of(self, ids: set[int]) -> None:
        wanted = ids - set(self.names)
        if wanted:
            self.names.update(ModelVersion.objects.filter(task=self.task, pk__in=wanted).values_list("pk", "name"))

    def names_for(self, predictions) -> list[str]:
        ids = sorted(int(k) for k in (predictions or {}) if str(k).isdigit())
        return [self.names.get(i, f"model #{i} (deleted)") for i in ids]


@dataclass
class Chunk:
    rows: list[dict]
    blind_answers: int  # validators' blind answers on the chunk's examples
    blind_agreeing: int  # those that agreed with the writer's answer


def released_rows(task: Task, rounds: list[Round], split: str, *, chunk: int = CHUNK) -> Iterator[Chunk]:
    """The rows of ``split`` for ``rounds``, a chunk at a time: round by round, oldest
    example first, each chunk one keyset query on the round's (round, split, status,
    id) index, plus a query each for its researchers' decisions, its blind answers and
    the names of new models. Memory holds one chunk."""
    config = task.parsed_config
    kind = config.kind
    names = ModelNames(task)
    for rnd in rounds:
        # What the public may see (no gold item in use); whether a test split may be
        # released at all is the service's check (``service.start_release``).
        base = not_in_use(usable(Example.objects.filter(round_id=rnd.pk, split=split)))
        last = 0
        while True:
            examples = list(base.filter(pk__gt=last).select_related("context").order_by("pk")[:chunk])
            if not examples:
                break
            last = examples[-1].pk
            ids = [e.pk for e in examples]
            by_researcher = set(Validation.objects.filter(example_id__in=ids, mode=Validation.Mode.OWNER,
                                                          label=Validation.Label.CORRECT)
                                .values_list("example_id", flat=True))
            names.of({int(k) for e in examples for k in (e.model_predictions or {}) if str(k).isdigit()})
            rows = []
            for e in examples:
                context = e.context.fields if e.context_id else {}
                row = {"uid": str(e.uid), "round": rnd.number, "source": e.source}
                for name in config.context_field_names:
                    value = context.get(name)
                    row[name] = value if isinstance(value, str) else None
                for name in config.input_field_names:
                    row[name] = e.inputs.get(name)
                row.update(kind.release_answer_values(e.target))
                correct, incorrect = e.validations_correct, e.validations_incorrect
                if e.source != Example.Source.ANNOTATION:
                    verified_by = "imported"
                elif e.pk in by_researcher:
                    verified_by = "researcher"
                else:
                    verified_by = "validators"
                exported = e.metadata.get(ANNOTATOR_METADATA_KEY) if isinstance(e.metadata, dict) else None
                row.update({
                    "model_answer": _answer_text(e.prediction),
                    "fooled": e.fooled,
                    "target_models": names.names_for(e.model_predictions),
                    "verified_by": verified_by,
                    "votes_correct": correct,
                    "votes_incorrect": incorrect,
                    "validator_agreement": correct / (correct + incorrect) if correct + incorrect else None,
                    "annotator": deleted_pseudonym(e) or pseudonym(
                        e.annotator_id, exported if isinstance(exported, str) else None),
                })
                rows.append(row)
            blind = Validation.objects.filter(example_id__in=ids, blind_answer__isnull=False).aggregate(
                n=Count("pk"), agreeing=Count("pk", filter=Q(blind_agrees=True)))
            yield Chunk(rows, blind["n"], blind["agreeing"])
