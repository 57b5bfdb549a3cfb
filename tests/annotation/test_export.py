"""export_dataset and the exact round trip through import_dataset --format dynabench."""

import csv
import io
import json
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation.datasets import export_examples, import_records
from annotation.exporting import RECORD_KEYS, anonymise, example_record
from annotation.importers import read_records
from annotation.models import Example
from tasks.models import Context, Round, Task
from tasks.services import create_task, load_definition

SEED_DIR = Path(settings.BASE_DIR) / "tasks" / "seed" / "examples"
SCRIPT = '<script>alert("x")</script> & <b>bold</b> \u2014 caf\u00e9 \U0001f525\U0001f44d\U0001f3fd'


def export(*args) -> str:
    out = io.StringIO()
    call_command("export_dataset", *map(str, args), stdout=out, stderr=io.StringIO())
    return out.getvalue()


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def platform_examples(task, annotator, second_annotator):
    """Examples as the annotation flow writes them (directly, not through its services)."""
    round1 = task.rounds.get(number=1)
    round2 = Round.objects.create(task=task, number=2, status=Round.Status.DRAFT)
    made = []
    if task.slug == "nli":
        shared = Context.objects.create(task=task, fields={"premise": "Premise without an id: " + SCRIPT},
                                        tag="no-id")
        seed = task.contexts.get(external_id="nli-001")
        made.append(Example.objects.create(
            task=task, round=round1, context=shared, annotator=annotator,
            inputs={"hypothesis": "Emoji \U0001f600 and " + SCRIPT}, target={"label": "neutral"},
            model_predictions={"7": {"label": "entailment", "probs": [0.7, 0.2, 0.1]},
                               "9": {"label": "neutral", "probs": [0.1, 0.8, 0.1]}},
            prediction={"label": "entailment", "probs": [0.4, 0.5, 0.1]}, fooled=True,
            validation_status="verified", validations_correct=3, latency_ms=12.5,
            metadata={"tag": "x", "nested": {"list": [1, 2.5, None, "\u00fc"]}},
        ))
        made.append(Example.objects.create(
            task=task, round=round1, context=shared, annotator=second_annotator,
            inputs={"hypothesis": "Line\nbreak\tand \"quotes\""}, target={"label": "contradiction"},
            prediction={"label": "contradiction"}, fooled=False, retracted=True,
            validation_status="rejected", validations_incorrect=2, validations_flagged=1,
        ))
        made.append(Example.objects.create(
            task=task, round=round2, context=seed, annotator=None, split="test",
            inputs={"hypothesis": "No annotator."}, target={"label": "entailment"}, flagged=True,
            flag_reason="spam", validation_status="flagged", external_uid="ext-1",
        ))
    else:
        context = task.contexts.get(external_id="qa-002")
        passage = context.fields["passage"]
        word = passage.split()[3]
        start = passage.index(word)
        made.append(Example.objects.create(
            task=task, round=round1, context=context, annotator=annotator,
            inputs={"question": "Which word? " + SCRIPT}, target={"text": word, "start": start},
            model_predictions={"3": {"text": passage[:5], "start": 0, "score": 0.25}},
            prediction={"text": passage[:5], "start": 0}, fooled=True, validation_status="pending",
        ))
        made.append(Example.objects.create(
            task=task, round=round2, context=context, annotator=None, split="dev",
            inputs={"question": "Another?"}, target={"text": word, "start": start},
        ))
    return made


def test_export_import_export_is_exact(demo_tasks, annotator, second_annotator, tmp_path):
    files = {}
    for slug in ("nli", "qa"):
        task = demo_tasks[slug]
        import_records(task, read_records("seed", SEED_DIR / f"{slug}.jsonl"), round_number=1, source="seed")
        platform_examples(task, annotator, second_annotator)
        files[slug] = tmp_path / f"{slug}.jsonl"
        export(files[slug], "--task", slug)
    first = {slug: lines_of(path) for slug, path in files.items()}
    seed_lines = {slug: len((SEED_DIR / f"{slug}.jsonl").read_text().splitlines()) for slug in files}
    assert len(first["nli"]) == seed_lines["nli"] + 3 and len(first["qa"]) == seed_lines["qa"] + 2
    annotated = [json.loads(line) for line in first["nli"] if json.loads(line)["source"] == "annotation"]
    assert annotated[0]["annotator"] == anonymise(annotator.pk)
    assert annotated[0]["context"] == {"id": None, "fields": {"premise": "Premise without an id: " + SCRIPT},
                                       "tag": "no-id"}
    assert json.dumps(SCRIPT, ensure_ascii=False)[1:-1] in first["nli"][-3]  # UTF-8, not \\u escapes

    # An empty database: no tasks, rounds, contexts, examples or users.
    Example.objects.all().delete()
    Context.objects.all().delete()
    Task.objects.all().delete()
    annotator.delete()
    second_annotator.delete()
    for slug, path in files.items():
        task, _ = create_task(load_definition(slug))
        out = io.StringIO()
        call_command("import_dataset", str(path), "--task", slug, "--format", "dynabench", stdout=out)
        assert f"{len(first[slug])} created, 0 skipped as duplicates, 0 malformed" in out.getvalue()
        again = tmp_path / f"{slug}-again.jsonl"
        export(again, "--task", slug)
        assert lines_of(again) == first[slug]

    nli = Task.objects.get(slug="nli")
    assert nli.contexts.filter(external_id="").count() == 1  # the id-less context, shared again
    assert not nli.examples.filter(annotator__isnull=False).exists()
    assert {r.number: r.status for r in nli.rounds.all()} == {1: "closed", 2: "closed"}
    # Importing the same export again creates nothing.
    report = import_records(nli, read_records("dynabench", files["nli"]))
    assert (report.created, report.skipped_duplicates, report.errors) == (0, len(first["nli"]), [])


def test_copying_into_another_task_on_the_same_database(demo_tasks, annotator, second_annotator, tmp_path):
    nli = demo_tasks["nli"]
    platform_examples(nli, annotator, second_annotator)
    path = tmp_path / "nli.jsonl"
    export(path, "--task", "nli")
    definition = load_definition("nli") | {"slug": "nli-copy", "name": "NLI copy"}
    copy, _ = create_task(definition)
    report = import_records(copy, read_records("dynabench", path))
    assert report.created == 3 and report.uids_reassigned == 3
    originals = {str(e.uid): e for e in nli.examples.all()}
    for example in copy.examples.all():
        original = originals[example.external_uid] if example.external_uid != "ext-1" else \
            nli.examples.get(external_uid="ext-1")
        a, b = example_record(original), example_record(example)
        for key in ("uid", "task", "external_uid"):
            a.pop(key), b.pop(key)
        assert a == b
    again = import_records(copy, read_records("dynabench", path))
    assert (again.created, again.skipped_duplicates) == (0, 3)


def test_export_reads_in_chunks_with_constant_queries(demo_tasks, annotator):
    nli = demo_tasks["nli"]
    rnd = nli.rounds.get(number=1)
    context = nli.contexts.first()

    def add(n):
        Example.objects.bulk_create([
            Example(task=nli, round=rnd, context=context, annotator=annotator, inputs={"hypothesis": f"h{i}"},
                    target={"label": "neutral"}) for i in range(n)
        ])

    def queries_for_export():
        out = io.StringIO()
        with CaptureQueriesContext(connection) as captured:
            n = export_examples(nli, out, chunk_size=50)
        assert len(out.getvalue().splitlines()) == n
        return n, len(captured.captured_queries)

    add(300)
    n, queries = queries_for_export()
    assert n == 300 and queries <= 2
    add(300)
    assert queries_for_export() == (600, queries)


def test_validated_only_round_and_stdout(demo_tasks, annotator, second_annotator):
    nli = demo_tasks["nli"]
    platform_examples(nli, annotator, second_annotator)  # verified, rejected (round 1), flagged (round 2)
    records = [json.loads(line) for line in export("-", "--task", "nli").splitlines()]
    assert len(records) == 3 and all(tuple(r) == RECORD_KEYS for r in records)
    verified = [json.loads(line) for line in export("-", "--task", "nli", "--validated-only").splitlines()]
    assert [r["validation"]["status"] for r in verified] == ["verified"]
    round2 = [json.loads(line) for line in export("-", "--task", "nli", "--round", 2).splitlines()]
    assert [r["round"] for r in round2] == [2] and round2[0]["external_uid"] == "ext-1"
    assert export("-", "--task", "nli", "--round", 2, "--validated-only") == ""
    with pytest.raises(CommandError, match="has no round 5"):
        export("-", "--task", "nli", "--round", 5)
    with pytest.raises(CommandError, match="Unknown task 'nope'. Known tasks: hate, nli, qa, sentiment"):
        export("-", "--task", "nope")


def test_csv_export(demo_tasks, annotator, second_annotator, tmp_path):
    qa = demo_tasks["qa"]
    platform_examples(qa, annotator, second_annotator)
    path = tmp_path / "qa.csv"
    out = export(path, "--task", "qa", "--format", "csv")
    assert "exported 2 examples" in out
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 and tuple(rows[0]) == RECORD_KEYS
    first = rows[0]
    assert json.loads(first["inputs"])["question"].endswith(SCRIPT)
    target = json.loads(first["target"])
    passage = json.loads(first["context"])["fields"]["passage"]
    assert passage[target["start"]:target["start"] + len(target["text"])] == target["text"]
    assert first["fooled"] == "true" and first["retracted"] == "false" and first["round"] == "1"
    assert rows[1]["annotator"] == "" and rows[1]["fooled"] == "" and rows[1]["prediction"] == ""
    assert json.loads(first["model_predictions"])["3"]["score"] == 0.25
    uuid.UUID(first["uid"])
    empty = tmp_path / "empty.csv"
    export(empty, "--task", "hate", "--format", "csv")
    assert lines_of(empty) == [",".join(RECORD_KEYS)]


def test_csv_export_keeps_formulas_as_text(demo_tasks, tmp_path):
    """An imported row's id is whatever its file said: in the CSV it must not run as a formula."""
    task = demo_tasks["sentiment"]
    formula = '=HYPERLINK("http://evil.example","click")'
    Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), source="import",
                           external_uid=formula, inputs={"statement": "fine"}, target={"label": "positive"})
    path = tmp_path / "sentiment.csv"
    export(path, "--task", "sentiment", "--format", "csv")
    with open(path, encoding="utf-8", newline="") as handle:
        [row] = list(csv.DictReader(handle))
    assert row["external_uid"] == "'" + formula
    jsonl = tmp_path / "sentiment.jsonl"
    export(jsonl, "--task", "sentiment")
    assert json.loads(jsonl.read_text())["external_uid"] == formula  # the exact form keeps it


def test_exported_annotator_pseudonym_survives_without_a_user(demo_tasks, annotator):
    nli = demo_tasks["nli"]
    example = Example.objects.create(task=nli, round=nli.rounds.get(number=1), annotator=annotator,
                                     inputs={"hypothesis": "h"}, target={"label": "neutral"},
                                     metadata={"k": 1})
    record = example_record(example)
    assert record["annotator"] == anonymise(annotator.pk) and record["metadata"] == {"k": 1}
    example.annotator = None
    example.metadata = {"k": 1, "_exported_annotator": "a-0123456789abcdef"}
    record = example_record(example)
    assert record["annotator"] == "a-0123456789abcdef" and record["metadata"] == {"k": 1}
