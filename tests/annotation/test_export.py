"""export_dataset: the exact round trip of JSON Lines through import_dataset --format dynabench, the
flat CSV, the selections, and reading the rows a page at a time."""

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

from annotation.datasets import import_records
from annotation.exporting import RECORD_KEYS, Selection, anonymise, example_record, write_examples
from annotation.models import Example
from datafiles.readers import read_records
from tasks.models import Context, Round, Task
from tasks.services import create_task, load_definition

SEED_DIR = Path(settings.BASE_DIR) / "tasks" / "seed" / "examples"
SCRIPT = '<script>alert("x")</script> & <b>bold</b> \u2014 caf\u00e9 \U0001f525\U0001f44d\U0001f3fd'


EVERYTHING = ("--include-retracted", "--include-flagged")


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
        export(files[slug], "--task", slug, *EVERYTHING)
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
        export(again, "--task", slug, *EVERYTHING)
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
    export(path, "--task", "nli", *EVERYTHING)
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


def example_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if 'FROM "annotation_example"' in q["sql"]]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_export_reads_pages_by_primary_key_never_every_row_at_once(demo_tasks, annotator, fmt):
    """Each pass reads pages of at most ``page_size`` rows, each starting after the last
    id of the one before: the number of queries grows with the pages, and no query reads
    more than a page of rows (a COUNT for the progress aside)."""
    nli = demo_tasks["nli"]
    rnd = nli.rounds.get(number=1)
    context = nli.contexts.first()

    def add(n):
        Example.objects.bulk_create([
            Example(task=nli, round=rnd, context=context, annotator=annotator, inputs={"hypothesis": f"h{i}"},
                    target={"label": "neutral"}, metadata={"i": i}) for i in range(n)
        ])

    def run():
        out, seen = io.StringIO(), []
        with CaptureQueriesContext(connection) as captured:
            report = write_examples(nli, out, fmt=fmt, page_size=50,
                                    advance=lambda label, done, total: seen.append((label, done, total)))
        lines = out.getvalue().splitlines()
        assert len(lines) == report.rows + (fmt == "csv")
        sql = example_queries(captured)
        counts = [q for q in sql if "COUNT(" in q]
        reads = [q for q in sql if q not in counts]
        assert len(counts) == 1 and all("LIMIT" in q for q in reads), reads
        # Each pass's first page starts at the beginning; every later one after an id.
        assert len([q for q in reads if "LIMIT 50" in q and '"id" > ' not in q]) == (2 if fmt == "csv" else 1)
        return report.rows, len(reads), seen

    add(300)
    n, reads, seen = run()
    passes = 2 if fmt == "csv" else 1
    # The last id, then per pass 300/50 full pages and the empty page that ends it.
    assert (n, reads) == (300, 1 + passes * 7)
    assert seen[-1] == ("exporting", 300, 300)
    add(300)
    n, more_reads, _ = run()
    assert (n, more_reads) == (600, 1 + passes * 13)


def test_a_page_starts_after_the_last_id_of_the_one_before(demo_tasks, annotator):
    nli = demo_tasks["nli"]
    rnd = nli.rounds.get(number=1)
    Example.objects.bulk_create([Example(task=nli, round=rnd, inputs={"hypothesis": f"h{i}"},
                                         target={"label": "neutral"}) for i in range(7)])
    from annotation.exporting import pages

    got = [[e.pk for e in page] for page in pages(Example.objects.filter(task=nli), 3)]
    ids = list(Example.objects.filter(task=nli).order_by("pk").values_list("pk", flat=True))
    assert got == [ids[0:3], ids[3:6], ids[6:7]]
    with CaptureQueriesContext(connection) as captured:
        list(pages(Example.objects.filter(task=nli), 3))
    assert [q["sql"].count(f'"id" > {ids[2]}') for q in captured.captured_queries] == [0, 1, 0]


def test_validated_only_round_split_and_stdout(demo_tasks, annotator, second_annotator):
    nli = demo_tasks["nli"]
    platform_examples(nli, annotator, second_annotator)  # verified, retracted (round 1), flagged (round 2)
    records = [json.loads(line) for line in export("-", "--task", "nli").splitlines()]
    assert [(r["retracted"], r["flagged"]) for r in records] == [(False, False)]  # left out by default
    every = [json.loads(line) for line in export("-", "--task", "nli", *EVERYTHING).splitlines()]
    assert len(every) == 3 and all(tuple(r) == RECORD_KEYS for r in every)
    retracted = [json.loads(line) for line in export("-", "--task", "nli", "--include-retracted").splitlines()]
    assert [r["retracted"] for r in retracted] == [False, True]
    flagged = [json.loads(line) for line in export("-", "--task", "nli", "--include-flagged").splitlines()]
    assert [r["flagged"] for r in flagged] == [False, True]
    verified = [json.loads(line) for line in export("-", "--task", "nli", "--validated-only", *EVERYTHING).splitlines()]
    assert [r["validation"]["status"] for r in verified] == ["verified"]
    round2 = [json.loads(line) for line in export("-", "--task", "nli", "--round", 2, *EVERYTHING).splitlines()]
    assert [r["round"] for r in round2] == [2] and round2[0]["external_uid"] == "ext-1"
    assert export("-", "--task", "nli", "--round", 2, "--validated-only", *EVERYTHING) == ""
    test_split = [json.loads(line)
                  for line in export("-", "--task", "nli", "--split", "test", *EVERYTHING).splitlines()]
    assert [r["split"] for r in test_split] == ["test"]
    with pytest.raises(CommandError, match="has no round 5"):
        export("-", "--task", "nli", "--round", 5)
    with pytest.raises(CommandError, match="Unknown task 'nope'. Known tasks: hate, nli, qa, sentiment"):
        export("-", "--task", "nope")


def test_progress_lines_go_to_standard_error_when_the_records_go_to_standard_output(demo_tasks, annotator,
                                                                                   second_annotator):
    platform_examples(demo_tasks["nli"], annotator, second_annotator)
    out, err = io.StringIO(), io.StringIO()
    call_command("export_dataset", "-", "--task", "nli", *EVERYTHING, stdout=out, stderr=err)
    assert [json.loads(line)["task"] for line in out.getvalue().splitlines()] == ["nli"] * 3
    assert "exporting: 3/3 rows (100%)" in err.getvalue()
    assert "exported 3 examples of nli (every round; retracted and flagged included)" in err.getvalue()


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


TRICKY = 'Commas, "quotes", a\nnew line,\r\nanother; <b onclick="x()">HTML</b> & &amp; \u2014 caf\u00e9 \U0001f525'


def test_csv_is_flat_a_column_per_field_and_no_json_in_a_cell(demo_tasks, annotator, second_annotator, tmp_path):
    nli = demo_tasks["nli"]
    made = platform_examples(nli, annotator, second_annotator)
    Example.objects.filter(pk=made[0].pk).update(inputs={"hypothesis": TRICKY})
    path = tmp_path / "nli.csv"
    assert "exported 3 examples" in export(path, "--task", "nli", "--format", "csv", *EVERYTHING)
    rows = read_csv(path)
    header = list(rows[0])
    assert header == [
        "uid", "external_uid", "task", "round", "split", "source", "context_id", "context_tag", "context.premise",
        "inputs.hypothesis", "target.label", "prediction.label", "prediction.probs.0", "prediction.probs.1",
        "prediction.probs.2", "fooled", "retracted", "flagged", "validation.status", "validation.correct",
        "validation.incorrect", "validation.flagged", "annotator", "created_at",
        "model_predictions.7.label", "model_predictions.7.probs.0", "model_predictions.7.probs.1",
        "model_predictions.7.probs.2", "model_predictions.9.label", "model_predictions.9.probs.0",
        "model_predictions.9.probs.1", "model_predictions.9.probs.2",
        "metadata.nested.list.0", "metadata.nested.list.1", "metadata.nested.list.2", "metadata.nested.list.3",
        "metadata.tag"]
    first, retracted, flagged = rows
    assert first["inputs.hypothesis"] == TRICKY  # commas, quotes, new lines and HTML come back as they were
    assert first["context.premise"] == "Premise without an id: " + SCRIPT
    assert (first["target.label"], first["prediction.label"], first["prediction.probs.1"]) \
        == ("neutral", "entailment", "0.5")
    assert (first["fooled"], first["retracted"], first["validation.status"], first["validation.correct"]) == (
        "true", "false", "verified", "3")
    assert (first["model_predictions.9.label"], first["model_predictions.7.probs.0"]) == ("neutral", "0.7")
    assert [first[f"metadata.nested.list.{i}"] for i in range(4)] == ["1", "2.5", "", "\u00fc"]
    assert (first["metadata.tag"], first["context_id"], first["context_tag"]) == ("x", "", "no-id")
    assert first["annotator"] == anonymise(annotator.pk) and first["round"] == "1"
    assert retracted["inputs.hypothesis"] == 'Line\nbreak\tand "quotes"' and retracted["retracted"] == "true"
    assert (retracted["fooled"], retracted["model_predictions.7.label"], retracted["metadata.tag"]) == ("false", "", "")
    assert (flagged["flagged"], flagged["annotator"], flagged["fooled"], flagged["context_id"]) \
        == ("true", "", "", "nli-001")
    assert flagged["prediction.label"] == "" and flagged["external_uid"] == "ext-1" and flagged["split"] == "test"
    assert Context.objects.get(external_id="nli-001").fields["premise"] == flagged["context.premise"]
    for row in rows:  # no cell holds JSON: no object or list in any of them
        for column, cell in row.items():
            assert not cell.startswith(("{", "[")), (column, cell)
    # The same rows by default: retracted and flagged left out.
    export(path, "--task", "nli", "--format", "csv")
    assert [r["uid"] for r in read_csv(path)] == [first["uid"]]


def test_csv_of_extractive_qa_has_the_answer_span_columns(demo_tasks, annotator, second_annotator, tmp_path):
    qa = demo_tasks["qa"]
    platform_examples(qa, annotator, second_annotator)
    path = tmp_path / "qa.csv"
    assert "exported 2 examples" in export(path, "--task", "qa", "--format", "csv")
    rows = read_csv(path)
    assert list(rows[0])[:14] == [
        "uid", "external_uid", "task", "round", "split", "source", "context_id", "context_tag", "context.title",
        "context.passage", "inputs.question", "target.text", "target.start", "prediction.text"]
    first = rows[0]
    assert first["inputs.question"].endswith(SCRIPT)
    start = int(first["target.start"])
    assert first["context.passage"][start:start + len(first["target.text"])] == first["target.text"]
    assert first["fooled"] == "true" and first["retracted"] == "false" and first["round"] == "1"
    assert first["model_predictions.3.score"] == "0.25" and first["prediction.start"] == "0"
    assert rows[1]["annotator"] == "" and rows[1]["fooled"] == "" and rows[1]["prediction.text"] == ""
    uuid.UUID(first["uid"])
    empty = tmp_path / "empty.csv"
    export(empty, "--task", "hate", "--format", "csv")
    assert lines_of(empty) == [
        "uid,external_uid,task,round,split,source,context_id,context_tag,context.prompt,inputs.statement,"
        "target.label,prediction.label,fooled,retracted,flagged,validation.status,validation.correct,"
        "validation.incorrect,validation.flagged,annotator,created_at"]


def test_csv_export_keeps_formulas_as_text(demo_tasks, tmp_path):
    """An imported row's id is whatever its file said: in the CSV it must not run as a formula."""
    task = demo_tasks["sentiment"]
    formula = '=HYPERLINK("http://evil.example","click")'
    Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), source="import",
                           external_uid=formula, inputs={"statement": "@SUM(A1)"}, target={"label": "positive"},
                           metadata={"note": "-cmd|' /C calc'!A0", "score": -0.5})
    path = tmp_path / "sentiment.csv"
    export(path, "--task", "sentiment", "--format", "csv")
    [row] = read_csv(path)
    assert row["external_uid"] == "'" + formula and row["inputs.statement"] == "'@SUM(A1)"
    assert row["metadata.note"] == "'-cmd|' /C calc'!A0" and row["metadata.score"] == "-0.5"  # numbers stay numbers
    jsonl = tmp_path / "sentiment.jsonl"
    export(jsonl, "--task", "sentiment")
    assert json.loads(jsonl.read_text())["external_uid"] == formula  # the exact form keeps it


def test_a_selection_reads_back_from_its_parameters_and_refuses_bad_ones(demo_tasks):
    nli = demo_tasks["nli"]
    selection = Selection(task_id=nli.pk, round_number=1, split="test", fooled="unknown", retracted="include",
                          flagged="only")
    assert Selection.from_params(nli.pk, json.loads(json.dumps(selection.to_params()))) == selection
    assert selection.describe() == "round 1, test, no model answered; retracted included, flagged only"
    from core.errors import InvalidInput, NotFound

    with pytest.raises(InvalidInput) as bad:
        Selection.from_params(nli.pk, {"round_number": "-1", "split": "nope", "retracted": "all",
                                       "created_from": "yesterday"})
    assert set(bad.value.errors) == {"round_number", "split", "retracted", "created_from"}
    with pytest.raises(NotFound, match="Task nli has no round 9"):
        Selection(task_id=nli.pk, round_number=9).examples(nli)


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
