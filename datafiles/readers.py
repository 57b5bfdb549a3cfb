# Long on purpose: one reader per public data set format; each is short, and they share the Record they yield.
"""Readers for public data sets and our own export format. No Django here.

Every reader takes a path and yields, in file order, either a ``Record`` (one
example, normalised to the shape our tasks use) or a ``RowError`` (a malformed
row, with its 1-based line number). Readers never stop at a bad row: the
caller collects the errors and decides. A problem with the whole file (a CSV
header without a required column, a SQuAD file that is not SQuAD) raises
``FormatError`` instead.

This module imports nothing from Django, so scripts such as
``bench/baselines.py`` and the demo-model training can read the same files
without a database::

    from datafiles.readers import read_records
    for item in read_records("anli", "anli/R1/dev.jsonl"):
        ...

Label mappings (source value -> our label; values not listed are passed
through unchanged so that the importing service reports them as unknown
labels with their line numbers):

- ``anli``: e/n/c -> entailment/neutral/contradiction (``model_label`` too).
- ``nli-jsonl``: label words as they are (entailment/neutral/contradiction).
- ``sst2``: 1 -> positive, 0 -> negative.
- ``dynahate``: hate -> hateful, nothate -> not-hateful.
- ``hatemoji``: label_gold 1 -> hateful, 0 -> not-hateful.
- ``hatecheck``: hateful -> hateful, non-hateful -> not-hateful.
- ``davidson``: class 0 (hate speech) -> hateful; class 1 (offensive language)
  and class 2 (neither) -> not-hateful. This follows our hate task's
  definition: abuse that targets a protected group is hateful; offensive or
  profane text that targets no group is not. Davidson's "offensive" class is
  mostly the latter, so it is not-hateful here (the original class name is
  kept in the metadata, as ``class``). Tweets are HTML-unescaped
  (``&amp;`` -> ``&``, ``&#128514;`` -> the emoji), as the source file stores
  them escaped.
- ``seed`` and ``dynabench``: our own label names.

Rounds: only DynaHate (``round`` 1, 2a, 2b, ... 4b) and HatemojiBuild
(``round.set`` 5a ... 7b) carry one; the number is kept ("2a" and "2b" are
both round 2) and the original value goes to the metadata as ``round_label``.
Splits: DynaHate, HatemojiBuild, the seed files and our export carry one
("validation" is read as "dev"); for the other files the caller sets it.

Contexts get a stable ``external_id``: ``ctx-`` plus the sha1 of their exact
fields (the exact text, since QA answer offsets point into it), so the same
premise or passage met in several files, or twice, is one context. Annotator
input text is stripped of surrounding whitespace; context text is kept as is.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from core.rows import RowError, json_object_lines, numbered_records

SPLITS = ("train", "dev", "test")
SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "val": "dev",
                 "test": "test"}
NLI_LETTERS = {"e": "entailment", "n": "neutral", "c": "contradiction"}


@dataclass(slots=True)
class Record:
    """One example read from a file, in the shape our tasks use.

    ``context`` is None or ``{"external_id", "fields", "tag"}``; ``target`` is
    ``{"label": ...}`` (classification) or ``{"text", "start"}`` (QA, the
    offset into the context's passage). ``platform`` is set only by the
    ``dynabench`` reader: the fields our own export carries beyond the data
    (uid, source, predictions, validation summary, annotator pseudonym,
    created_at).
    """

    line: int
    external_uid: str
    inputs: dict
    target: dict
    split: str | None = None
    round: int | None = None
    context: dict | None = None
    metadata: dict = field(default_factory=dict)
    platform: dict | None = None

    @property
    def label(self) -> str | None:
        return self.target.get("label") if isinstance(self.target, dict) else None

    @property
    def fields(self) -> dict:
        """Context fields and inputs together (what ``model_inputs`` names)."""
        context_fields = self.context["fields"] if self.context else {}
        return {**context_fields, **self.inputs}


class FormatError(Exception):
    """The file as a whole cannot be read in this format."""


class _Bad(Exception):
    """A row problem found while building a record (becomes a RowError)."""


def context_id(fields: dict) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "ctx-" + hashlib.sha1(canonical.encode("utf-8")).hexdigest()


def make_context(fields: dict, tag: str = "", external_id: str | None = None) -> dict:
    return {"external_id": external_id or context_id(fields), "fields": fields, "tag": tag or ""}


def content_uid(prefix: str, content) -> str:
    """A stable id for rows that have none: a hash of their content."""
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{prefix}-{hashlib.sha1(canonical.encode('utf-8')).hexdigest()}"


def round_number(value) -> int:
    """'1' -> 1, '2a'/'2b' -> 2, '5a' -> 5."""
    match = re.fullmatch(r"\s*R?(\d+)[a-z]?\s*", str(value), flags=re.IGNORECASE)
    if not match or int(match.group(1)) < 1:
        raise _Bad(f"round {value!r} is not a round like 1, 2a or 2b")
    return int(match.group(1))


def _split(value) -> str:
    split = SPLIT_ALIASES.get(str(value).strip().lower())
    if split is None:
        raise _Bad(f"unknown split {value!r} (expected one of {', '.join(SPLITS)})")
    return split


def _get(row: dict, key: str):
    value = row.get(key)
    if value is None:
        raise _Bad(f"missing field {key!r}" if not isinstance(row, _CsvRow) else f"missing column {key!r}")
    return value


def _text(row: dict, key: str, *, strip: bool = True) -> str:
    value = _get(row, key)
    if not isinstance(value, str):
        raise _Bad(f"{key!r} must be text, not {type(value).__name__}")
    return value.strip() if strip else value


def _extras(row: dict, used) -> dict:
    return {k: v for k, v in row.items() if k not in used}


# --- file readers -----------------------------------------------------------


def _jsonl(path) -> Iterator[tuple[int, dict] | RowError]:
    with open(path, encoding="utf-8-sig") as handle:
        yield from json_object_lines(handle)


class _CsvRow(dict):
    """A CSV row by column name; a short row lacks its last columns."""


def _csv(path, required: list[str], delimiter: str = ",") -> Iterator[tuple[int, _CsvRow] | RowError]:
    """Rows with the (physical) line each starts on; the header is line 1."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            raise FormatError(f"{path}: the file is empty (expected a header row)") from None
        except csv.Error as exc:
            raise FormatError(f"{path}: cannot read the header: {exc}") from None
        missing = [c for c in required if c not in header]
        if missing:
            raise FormatError(
                f"{path}: missing column(s) {', '.join(repr(c) for c in missing)} in the header "
                f"(found: {', '.join(repr(c) for c in header)})"
            )
        for start, values in numbered_records(reader):
            if isinstance(values, csv.Error):
                yield RowError(start, f"unreadable CSV row: {values}")
                continue
            if not values or not any(v.strip() for v in values):
                continue
            if len(values) > len(header):
                yield RowError(start, f"{len(values)} columns, the header has {len(header)}")
                continue
            yield start, _CsvRow(zip(header, values, strict=False))


def _records(rows, build: Callable) -> Iterator[Record | RowError]:
    for item in rows:
        if isinstance(item, RowError):
            yield item
            continue
        line, row = item
        try:
            yield build(line, row)
        except _Bad as exc:
            yield RowError(line, str(exc))


# --- formats ----------------------------------------------------------------


def read_anli(path) -> Iterator[Record | RowError]:
    """ANLI jsonl: uid, context (premise), hypothesis, label e/n/c, model_label, genre, reason, tag."""

    def build(line, row):
        label = _text(row, "label")
        metadata = _extras(row, {"uid", "context", "hypothesis", "label"})
        if isinstance(metadata.get("model_label"), str):
            metadata["model_label"] = NLI_LETTERS.get(metadata["model_label"], metadata["model_label"])
        genre = row.get("genre") if isinstance(row.get("genre"), str) else ""
        return Record(
            line=line, external_uid=str(_get(row, "uid")),
            context=make_context({"premise": _text(row, "context", strip=False)}, tag=genre[:100]),
            inputs={"hypothesis": _text(row, "hypothesis")},
            target={"label": NLI_LETTERS.get(label, label)}, metadata=metadata,
        )

    return _records(_jsonl(path), build)


def read_nli_jsonl(path) -> Iterator[Record | RowError]:
    """MNLI/SNLI jsonl: premise, hypothesis, label words; ids are content hashes."""

    def build(line, row):
        return Record(
            line=line, external_uid=content_uid("nli", row),
            context=make_context({"premise": _text(row, "premise", strip=False)}),
            inputs={"hypothesis": _text(row, "hypothesis")},
            target={"label": _text(row, "label")},
            metadata=_extras(row, {"premise", "hypothesis", "label"}),
        )

    return _records(_jsonl(path), build)


def read_sst2(path) -> Iterator[Record | RowError]:
    """GLUE SST-2 tsv: header ``sentence<TAB>label``, 1 positive, 0 negative."""

    def rows():
        with open(path, encoding="utf-8-sig") as handle:
            header = handle.readline().rstrip("\r\n").split("\t")
            if header[:2] != ["sentence", "label"]:
                raise FormatError(f"{path}: expected the header 'sentence<TAB>label', found {header!r}")
            for number, text in enumerate(handle, start=2):
                text = text.rstrip("\r\n")
                if not text.strip():
                    continue
                parts = text.rsplit("\t", 1)
                if len(parts) != 2:
                    yield RowError(number, "missing column 'label' (expected sentence<TAB>label)")
                    continue
                yield number, {"sentence": parts[0], "label": parts[1].strip()}

    def build(line, row):
        label = row["label"]
        return Record(
            line=line, external_uid=content_uid("sst2", [row["sentence"], label]),
            inputs={"statement": row["sentence"].strip()},
            target={"label": {"1": "positive", "0": "negative"}.get(label, label)},
        )

    return _records(rows(), build)


def read_squad(path) -> Iterator[Record | RowError]:
    """SQuAD v1.1 json: one context per paragraph, one record per question.

    ``line`` is the question's 1-based position in the file. The target is the
    first answer, checked against the passage; all answers go to metadata.
    """

    def rows():
        with open(path, encoding="utf-8-sig") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as exc:
                raise FormatError(f"{path}: invalid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise FormatError(f"{path}: not a SQuAD file (expected {{'data': [...]}})")
        number = 0
        for article_index, article in enumerate(data["data"]):
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            title = article.get("title", "") if isinstance(article, dict) else ""
            for paragraph_index, paragraph in enumerate(paragraphs or []):
                questions = paragraph.get("qas") if isinstance(paragraph, dict) else None
                for question in questions or []:
                    number += 1
                    yield number, {"title": title, "paragraph": paragraph, "question": question,
                                   "article_index": article_index, "paragraph_index": paragraph_index}

    def build(line, row):
        paragraph, question = row["paragraph"], row["question"]
        if not isinstance(question, dict):
            raise _Bad("a question must be a JSON object")
        passage = _text(paragraph, "context", strip=False)
        title = row["title"] if isinstance(row["title"], str) else str(row["title"])
        answers = question.get("answers")
        if not isinstance(answers, list) or not answers:
            raise _Bad("the question has no answers")
        all_answers = []
        for answer in answers:
            if not isinstance(answer, dict) or not isinstance(answer.get("text"), str) \
                    or not isinstance(answer.get("answer_start"), int):
                raise _Bad("an answer must have 'text' and an integer 'answer_start'")
            all_answers.append({"text": answer["text"], "start": answer["answer_start"]})
        first = all_answers[0]
        if passage[first["start"]:first["start"] + len(first["text"])] != first["text"] or not first["text"]:
            raise _Bad(f"answer {first['text']!r} is not at offset {first['start']} of the passage")
        return Record(
            line=line, external_uid=str(_get(question, "id")),
            context=make_context({"title": title, "passage": passage}),
            inputs={"question": _text(question, "question")},
            target=dict(first),
            metadata={"answers": all_answers, "article": row["article_index"],
                      "paragraph": row["paragraph_index"]},
        )

    return _records(rows(), build)


def read_dynahate(path) -> Iterator[Record | RowError]:
    """DynaHate csv: acl.id, text, label hate/nothate, type, target, level, split, round."""
    required = ["acl.id", "text", "label", "split", "round"]

    def build(line, row):
        label = _text(row, "label")
        raw_round = _text(row, "round")
        metadata = {"round_label": raw_round}
        for key in ("type", "target", "level", "annotator"):
            if row.get(key):
                metadata[key] = row[key]
        if row.get("acl.id.matched"):
            metadata["matched_uid"] = row["acl.id.matched"]
        return Record(
            line=line, external_uid=_text(row, "acl.id"), split=_split(_text(row, "split")),
            round=round_number(raw_round), inputs={"statement": _text(row, "text")},
            target={"label": {"hate": "hateful", "nothate": "not-hateful"}.get(label, label)},
            metadata=metadata,
        )

    return _records(_csv(path, required), build)


def read_hatemoji(path) -> Iterator[Record | RowError]:
    """HatemojiBuild (entry_id, round.set, split) or HatemojiCheck (case_id, functionality) csv."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle), [])
    build_file = "entry_id" in header
    id_column = "entry_id" if build_file else "case_id"
    prefix = "hatemoji-build" if build_file else "hatemoji-check"
    required = [id_column, "text", "label_gold"]
    extra_columns = (["type", "target", "set"] if build_file
                     else ["functionality", "target", "set", "templ_id", "test_group_id",
                           "unrealistic_flags"])

    def build(line, row):
        label = _text(row, "label_gold")
        metadata = {key: row[key] for key in extra_columns if row.get(key)}
        record = Record(
            line=line, external_uid=f"{prefix}-{_text(row, id_column)}",
            inputs={"statement": _text(row, "text")},
            target={"label": {"1": "hateful", "0": "not-hateful"}.get(label, label)},
            metadata=metadata,
        )
        if row.get("round.set"):
            metadata["round_label"] = row["round.set"]
            record.round = round_number(row["round.set"])
        if row.get("split"):
            record.split = _split(row["split"])
        if row.get("matched_id"):
            metadata["matched_uid"] = f"{prefix}-{row['matched_id']}"
        return record

    yield from _records(_csv(path, required), build)


def read_hatecheck(path) -> Iterator[Record | RowError]:
    """HateCheck csv: case_id, test_case, label_gold hateful/non-hateful, functionality, target_ident."""
    required = ["case_id", "test_case", "label_gold", "functionality"]
    extra_columns = ["functionality", "target_ident", "direction", "focus_words", "focus_lemma",
                     "ref_case_id", "templ_id", "case_templ"]

    def build(line, row):
        label = _text(row, "label_gold")
        return Record(
            line=line, external_uid=f"hatecheck-{_text(row, 'case_id')}",
            inputs={"statement": _text(row, "test_case")},
            target={"label": {"hateful": "hateful", "non-hateful": "not-hateful"}.get(label, label)},
            metadata={key: row[key] for key in extra_columns if row.get(key)},
        )

    return _records(_csv(path, required), build)


DAVIDSON_CLASSES = {"0": ("hate_speech", "hateful"), "1": ("offensive_language", "not-hateful"),
                    "2": ("neither", "not-hateful")}


def read_davidson(path) -> Iterator[Record | RowError]:
    """Davidson et al. 2017 csv: (index), count, hate_speech, offensive_language, neither, class, tweet."""
    required = ["class", "tweet"]

    def build(line, row):
        index = next(iter(row.values()))
        if not index.strip():
            raise _Bad("missing the row index (first column)")
        raw = _text(row, "class")
        class_name, label = DAVIDSON_CLASSES.get(raw, (raw, raw))
        metadata = {"class": class_name}
        for key in ("count", "hate_speech", "offensive_language", "neither"):
            if row.get(key, "").strip().isdigit():
                metadata[key] = int(row[key])
        return Record(
            line=line, external_uid=f"davidson-{index.strip()}",
            inputs={"statement": html.unescape(_text(row, "tweet"))},
            target={"label": label}, metadata=metadata,
        )

    return _records(_csv(path, required), build)


SEED_CONTEXT_KEYS = ("title", "premise", "passage")


def _seed_contexts(path: Path) -> dict:
    """The shipped seed contexts next to an examples file, by their fields' text."""
    contexts_file = path.parent.parent / "contexts" / path.name
    found = {}
    if contexts_file.exists():
        for item in _jsonl(contexts_file):
            if isinstance(item, RowError):
                continue
            _, row = item
            fields = row.get("fields")
            if isinstance(fields, dict):
                key = fields.get("passage", fields.get("premise"))
                found[key] = make_context(fields, row.get("tag", ""), row.get("passage_id"))
    return found


def read_seed(path) -> Iterator[Record | RowError]:
    """Our shipped seed examples (tasks/seed/examples/*.jsonl).

    ``{"uid", "split", "inputs", "label"}`` or, for QA, ``"answer": {"text",
    "start"}``. A premise or passage in ``inputs`` becomes the context: the
    shipped seed context with that text where there is one (so its id, title
    and tag are reused), else a new one.
    """
    path = Path(path)
    seed_contexts = _seed_contexts(path)

    def build(line, row):
        inputs = _get(row, "inputs")
        if not isinstance(inputs, dict):
            raise _Bad("'inputs' must be a JSON object")
        context_fields = {k: inputs[k] for k in SEED_CONTEXT_KEYS if k in inputs}
        context = None
        if context_fields:
            for key, value in context_fields.items():
                if not isinstance(value, str):
                    raise _Bad(f"{key!r} must be text")
            text = context_fields.get("passage", context_fields.get("premise"))
            context = seed_contexts.get(text)
            if context is None:
                if "passage" in context_fields:
                    context_fields.setdefault("title", "")
                context = make_context(context_fields)
        if "answer" in row:
            answer = _get(row, "answer")
            if not isinstance(answer, dict):
                raise _Bad("'answer' must be a JSON object")
            target = {"text": answer.get("text"), "start": answer.get("start")}
        else:
            target = {"label": _text(row, "label")}
        return Record(
            line=line, external_uid=_text(row, "uid"), split=_split(_text(row, "split")),
            context=context, inputs={k: v.strip() if isinstance(v, str) else v
                                     for k, v in inputs.items() if k not in SEED_CONTEXT_KEYS},
            target=target, metadata=_extras(row, {"uid", "split", "inputs", "label", "answer"}),
        )

    return _records(_jsonl(path), build)


DYNABENCH_FORMAT_VERSION = 1
_DYNABENCH_KEYS = ("uid", "round", "split", "source", "inputs", "target", "validation")


def read_dynabench(path) -> Iterator[Record | RowError]:
    """Our own export (annotation/exporting.py), read back exactly."""

    def build(line, row):
        version = row.get("format")
        if version != DYNABENCH_FORMAT_VERSION:
            raise _Bad(f"unsupported export format {version!r} (expected {DYNABENCH_FORMAT_VERSION})")
        for key in _DYNABENCH_KEYS:
            _get(row, key)
        if not isinstance(row["round"], int) or isinstance(row["round"], bool) or row["round"] < 0:
            raise _Bad(f"round {row['round']!r} is not a whole number from 0")
        if row["split"] not in SPLITS:
            raise _Bad(f"unknown split {row['split']!r} (expected one of {', '.join(SPLITS)})")
        if not isinstance(row["inputs"], dict):
            raise _Bad("'inputs' must be a JSON object")
        validation = row["validation"]
        if not isinstance(validation, dict):
            raise _Bad("'validation' must be a JSON object")
        context = row.get("context")
        if context is not None:
            if not isinstance(context, dict) or not isinstance(context.get("fields"), dict):
                raise _Bad("'context' must be null or an object with 'fields'")
            context = {"external_id": context.get("id") or "", "fields": context["fields"],
                       "tag": context.get("tag") or ""}
        metadata = row.get("metadata") if row.get("metadata") is not None else {}
        if not isinstance(metadata, dict):
            raise _Bad("'metadata' must be a JSON object")
        return Record(
            line=line, external_uid=str(row.get("external_uid") or ""), split=row["split"],
            round=row["round"], context=context, inputs=row["inputs"], target=row["target"],
            metadata=metadata,
            platform={
                "uid": str(row["uid"]),
                "task": row.get("task"),
                "source": row["source"],
                "model_predictions": row.get("model_predictions") or {},
                "prediction": row.get("prediction"),
                "fooled": row.get("fooled"),
                "retracted": bool(row.get("retracted", False)),
                "flagged": bool(row.get("flagged", False)),
                "validation": validation,
                "annotator": row.get("annotator"),
                "created_at": row.get("created_at"),
            },
        )

    return _records(_jsonl(path), build)


# --- registry ---------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    name: str
    read: Callable[..., Iterator[Record | RowError]]
    description: str
    input_fields: tuple[str, ...] | None  # None: whatever the file says
    has_split: bool  # rows carry a split (in some files at least)
    has_round: bool  # rows carry a round (in some files at least)


FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("anli", read_anli, "ANLI jsonl (anli/R*/{dev,test}.jsonl)", ("hypothesis",), False, False),
    Format("nli-jsonl", read_nli_jsonl, "MNLI/SNLI jsonl: premise, hypothesis, label", ("hypothesis",),
           False, False),
    Format("sst2", read_sst2, "SST-2 tsv: sentence<TAB>label", ("statement",), False, False),
    Format("squad", read_squad, "SQuAD v1.1 json", ("question",), False, False),
    Format("dynahate", read_dynahate, "DynaHate csv (rounds 1-4)", ("statement",), True, True),
    Format("hatemoji", read_hatemoji, "HatemojiBuild (rounds 5-7) or HatemojiCheck csv", ("statement",),
           True, True),
    Format("hatecheck", read_hatecheck, "HateCheck test suite csv", ("statement",), False, False),
    Format("davidson", read_davidson, "Davidson et al. 2017 tweets csv", ("statement",), False, False),
    Format("seed", read_seed, "our shipped seed examples (tasks/seed/examples/*.jsonl)", None, True, False),
    Format("dynabench", read_dynabench, "our own export (export_dataset --format jsonl)", None, True, True),
]}


def read_records(format_name: str, path) -> Iterator[Record | RowError]:
    """Records and row errors from ``path`` read as ``format_name``."""
    try:
        fmt = FORMATS[format_name]
    except KeyError:
        raise FormatError(
            f"unknown format {format_name!r}; known formats: {', '.join(sorted(FORMATS))}"
        ) from None
    return fmt.read(path)
