"""Readers of public data sets and the import service/command.

Real rows come from DYNABENCH_DATA_DIR: read in place, or
a slice of the first rows written into tmp_path at test time. Nothing from
the data sets is copied into the repository.
"""

import csv
import io
import json
from itertools import islice
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from annotation.datasets import DatasetImportError, check_format, import_records
from annotation.models import Example
from datafiles.readers import (
    FORMATS,
    FormatError,
    Record,
    RowError,
    context_id,
    read_records,
    round_number,
)
from tasks.models import Context, Round

SEED_DIR = Path(settings.BASE_DIR) / "tasks" / "seed" / "examples"


@pytest.fixture
def data_file():
    """The path of a real data file, or a skip saying why it is absent."""

    def get(relative: str) -> Path:
        base = settings.DYNABENCH_DATA_DIR
        if not base:
            pytest.skip("the real data sets are absent: DYNABENCH_DATA_DIR is empty")
        path = Path(base) / relative
        if not path.exists():
            pytest.skip(f"real data file {path} is absent")
        return path

    return get


def first(fmt: str, path, n: int) -> list:
    return list(islice(read_records(fmt, path), n))


def head_lines(source: Path, target: Path, n: int) -> Path:
    """The first n physical lines of a line-based file (jsonl, tsv)."""
    with open(source, encoding="utf-8") as handle:
        target.write_text("".join(islice(handle, n)), encoding="utf-8")
    return target


def head_csv(source: Path, target: Path, n: int) -> Path:
    """The header and first n rows of a CSV file (rows may span lines)."""
    with open(source, encoding="utf-8", newline="") as handle:
        rows = list(islice(csv.reader(handle), n + 1))
    with open(target, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return target


def run_import(*args) -> str:
    out = io.StringIO()
    call_command("import_dataset", *map(str, args), stdout=out)
    return out.getvalue()


# --- readers on real rows ---------------------------------------------------


def test_anli_rows(data_file):
    rows = first("anli", data_file("anli/R1/dev.jsonl"), 50)
    assert all(isinstance(r, Record) for r in rows)
    row = rows[0]
    assert row.line == 1 and rows[9].line == 10
    assert row.external_uid == "bf628cf5-6948-4595-a6d0-daf99beb47b9"
    assert row.split is None and row.round is None
    assert row.context["fields"]["premise"].startswith("Linguistics is the scientific study")
    assert row.context["external_id"] == context_id(row.context["fields"])
    assert row.context["tag"] == "wikipedia"
    assert row.inputs == {"hypothesis": "Form and meaning are the only aspects of language linguistics "
                                        "is concerned with."}
    assert row.target == {"label": "contradiction"}
    assert row.metadata["model_label"] == "neutral" and row.metadata["tag"] == "r1_dev"
    assert "reason" in row.metadata and row.metadata["genre"] == "wikipedia"
    assert {r.label for r in rows} == {"entailment", "neutral", "contradiction"}
    assert row.fields == {"premise": row.context["fields"]["premise"], "hypothesis": row.inputs["hypothesis"]}
    # ANLI reuses premises: the same text is the same context id.
    by_premise = {}
    for r in rows:
        by_premise.setdefault(r.context["fields"]["premise"], set()).add(r.context["external_id"])
    assert by_premise and all(len(ids) == 1 for ids in by_premise.values())


def test_nli_jsonl_rows_get_stable_content_ids(data_file):
    path = data_file("nli/mnli/dev.jsonl")
    rows, again = first("nli-jsonl", path, 20), first("nli-jsonl", path, 20)
    assert [r.external_uid for r in rows] == [r.external_uid for r in again]
    assert len({r.external_uid for r in rows}) == 20 and rows[0].external_uid.startswith("nli-")
    assert rows[0].inputs == {"hypothesis": "Everyone really likes the newest benefits"}  # stripped
    assert rows[0].context["fields"] == {"premise": "The new rights are nice enough"}
    assert rows[0].label == "neutral" and rows[1].label == "contradiction"


def test_sst2_rows(data_file):
    rows = first("sst2", data_file("sst2/dev.tsv"), 5)
    assert [r.line for r in rows] == [2, 3, 4, 5, 6]  # line 1 is the header
    assert rows[0].inputs == {"statement": "it 's a charming and often affecting journey ."}
    assert rows[0].label == "positive" and rows[1].label == "negative"
    assert rows[0].context is None and rows[0].external_uid.startswith("sst2-")


def test_squad_rows(data_file):
    rows = first("squad", data_file("squad/dev-v1.1.json"), 40)
    assert [r.line for r in rows] == list(range(1, 41))
    row = rows[0]
    assert row.context["fields"]["title"] == "Super_Bowl_50"
    passage = row.context["fields"]["passage"]
    assert row.target == {"text": "Denver Broncos", "start": 177}
    assert passage[177:177 + len("Denver Broncos")] == "Denver Broncos"
    assert row.metadata["answers"][0] == {"text": "Denver Broncos", "start": 177}
    assert len(row.metadata["answers"]) == 3
    assert row.inputs["question"] and len(row.external_uid) == 24
    assert len({r.context["external_id"] for r in rows}) > 1  # one context per paragraph
    for r in rows:
        start, text = r.target["start"], r.target["text"]
        assert r.context["fields"]["passage"][start:start + len(text)] == text


def test_dynahate_rows_and_rounds(data_file):
    rows = first("dynahate", data_file("dynahate/db_dev.csv"), 1100)
    row = rows[0]
    assert row.line == 2 and row.external_uid == "acl10042"
    assert row.split == "dev" and row.round == 1
    assert row.inputs == {"statement": "don't get me wrong I don't hate Indians, but I definitely don't like them"}
    assert row.label == "hateful"
    assert row.metadata == {"round_label": "1", "type": "notgiven", "target": "notgiven",
                            "level": "original", "annotator": "QiOKkCi7F8"}
    later = [r for r in rows if r.metadata["round_label"] in ("2a", "2b")]
    assert later and {r.round for r in later} == {2}
    assert {r.label for r in rows} == {"hateful", "not-hateful"}
    assert all(isinstance(r, Record) for r in rows)


def test_hatemoji_build_and_check_rows(data_file):
    build = first("hatemoji", data_file("hatemoji/HatemojiBuild/validation.csv"), 30)
    assert all(isinstance(r, Record) for r in build)
    assert build[0].external_uid.startswith("hatemoji-build-")
    assert {r.round for r in build} <= {5, 6, 7} and build[0].split == "dev"
    assert build[0].metadata["round_label"][0] in "567"
    assert any(ord(ch) >= 0x1F300 for r in build for ch in r.inputs["statement"])  # emoji kept
    check = first("hatemoji", data_file("hatemoji/HatemojiCheck/test.csv"), 5)
    assert check[0].external_uid == "hatemoji-check-0"
    assert check[0].inputs == {"statement": "I want to 🔪 all women"}
    assert check[0].label == "hateful" and check[0].round is None and check[0].split is None
    assert check[0].metadata["functionality"] == "verb_swap"


def test_hatecheck_rows(data_file):
    rows = list(read_records("hatecheck", data_file("hatecheck/test_suite_cases.csv")))
    assert all(isinstance(r, Record) for r in rows) and len(rows) == 3728
    assert rows[0].external_uid == "hatecheck-1" and rows[0].inputs == {"statement": "I hate women."}
    assert rows[0].metadata["functionality"] == "derog_neg_emote_h"
    assert rows[0].metadata["target_ident"] == "women"
    assert {r.label for r in rows} == {"hateful", "not-hateful"}


def test_davidson_rows(data_file):
    path = data_file("davidson/labeled_data.csv")
    rows = first("davidson", path, 300)
    assert all(isinstance(r, Record) for r in rows)
    by_class = {r.metadata["class"]: r.label for r in rows}
    assert by_class == {"hate_speech": "hateful", "offensive_language": "not-hateful",
                        "neither": "not-hateful"}
    assert rows[0].external_uid == "davidson-0" and rows[0].line == 2
    assert "&amp;" not in rows[0].inputs["statement"] and "& as a man" in rows[0].inputs["statement"]
    # Some tweets span several lines: a row's line is the line it starts on.
    lines = path.read_text(encoding="utf-8").splitlines()
    assert rows[-1].line > len(rows) + 1
    for r in rows:
        assert lines[r.line - 1].startswith(r.external_uid.removeprefix("davidson-") + ",")


@pytest.mark.parametrize("slug", ["nli", "qa", "sentiment", "hate"])
def test_seed_files_read_cleanly(slug):
    rows = list(read_records("seed", SEED_DIR / f"{slug}.jsonl"))
    assert rows and all(isinstance(r, Record) for r in rows)
    assert {r.split for r in rows} == {"train", "dev", "test"}
    if slug == "qa":
        row = rows[0]
        assert row.context["external_id"] == "qa-001" and row.context["fields"]["title"]
        assert set(row.inputs) == {"question"} and set(row.target) == {"text", "start"}
    elif slug == "nli":
        ids = [r.context["external_id"] for r in rows]
        assert sum(i.startswith("nli-") for i in ids) == 120  # premises shipped as seed contexts
        assert sum(i.startswith("ctx-") for i in ids) == len(rows) - 120  # premises of their own
        assert all(set(r.inputs) == {"hypothesis"} for r in rows)
    else:
        assert all(r.context is None and set(r.inputs) == {"statement"} for r in rows)


def test_round_numbers():
    assert [round_number(v) for v in ("1", "2a", "2b", "4b", "5a", "7b", "R3")] == [1, 2, 2, 4, 5, 7, 3]
    for bad in ("", "a", "0", "2c3"):
        with pytest.raises(Exception, match="is not a round"):
            round_number(bad)


# --- malformed input, per format family ------------------------------------


def test_jsonl_family_errors_have_line_numbers(tmp_path):
    good = {"uid": "u1", "context": "A man is eating.", "hypothesis": "Someone eats.", "label": "e"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({k: v for k, v in good.items() if k != "hypothesis"} | {"uid": "u3"}),
        "",
        json.dumps(good | {"uid": "u5", "label": "x"}),
        json.dumps(good | {"uid": "u6", "hypothesis": 7}),
        "[1, 2]",
    ]
    path = tmp_path / "anli.jsonl"
    path.write_text("\n".join(lines) + "\n")
    items = list(read_records("anli", path))
    errors = [i for i in items if isinstance(i, RowError)]
    assert [e.line for e in errors] == [2, 3, 6, 7]
    assert "Not valid JSON" in errors[0].message and "missing field 'hypothesis'" in errors[1].message
    assert "must be text" in errors[2].message and "Each line must be a JSON object" in errors[3].message
    assert [r.line for r in items if isinstance(r, Record)] == [1, 5]


def test_csv_family_errors(tmp_path):
    header = "acl.id,text,label,type,target,level,split,round\n"
    path = tmp_path / "db.csv"
    path.write_text(header + "\n".join([
        'a1,"fine, multi\nline text",nothate,none,none,original,dev,1',
        "a2,short row",
        "a3,text,hate,x,y,original,dev,2.5",
        "a4,text,hate,x,y,original,holdout,2a",
        "a5,text,hate,x,y,original,dev,3b,extra,columns",
    ]) + "\n")
    items = list(read_records("dynahate", path))
    assert isinstance(items[0], Record) and items[0].line == 2
    assert items[0].inputs["statement"] == "fine, multi\nline text"
    errors = items[1:]
    assert [(e.line, e.message.split(" ")[0]) for e in errors] == [
        (4, "missing"), (5, "round"), (6, "unknown"), (7, "10")]
    assert "missing column 'label'" in errors[0].message

    bad_header = tmp_path / "bad.csv"
    bad_header.write_text("acl.id,label,split,round\n1,hate,dev,1\n")
    with pytest.raises(FormatError, match="missing column.*'text'"):
        list(read_records("dynahate", bad_header))


def test_tsv_and_squad_errors(tmp_path):
    tsv = tmp_path / "sst.tsv"
    tsv.write_text("sentence\tlabel\ngood film\t1\nno tab here\n\n\tbad\t0\n")
    items = list(read_records("sst2", tsv))
    assert isinstance(items[0], Record) and items[0].line == 2
    assert isinstance(items[1], RowError) and items[1].line == 3
    assert isinstance(items[2], Record) and items[2].line == 5 and items[2].inputs["statement"] == "bad"

    squad = tmp_path / "squad.json"
    passage = "Paris is the capital of France."
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "France", "paragraphs": [
        {"context": passage, "qas": [
            {"id": "q1", "question": "Capital?", "answers": [{"text": "Paris", "answer_start": 0}]},
            {"id": "q2", "question": "Country?", "answers": [{"text": "France", "answer_start": 3}]},
            {"id": "q3", "question": "Nothing?", "answers": []},
            {"id": "q4", "question": "Whose?", "answers": [{"text": "France", "answer_start": 24}]},
        ]}]}]}))
    items = list(read_records("squad", squad))
    assert [type(i).__name__ for i in items] == ["Record", "RowError", "RowError", "Record"]
    assert items[1].line == 2 and "is not at offset 3" in items[1].message
    assert items[2].line == 3 and "no answers" in items[2].message
    with pytest.raises(FormatError):
        list(read_records("squad", tsv))


def test_unknown_format():
    with pytest.raises(FormatError, match="known formats: anli"):
        read_records("nope", "x")
    assert set(FORMATS) == {"anli", "nli-jsonl", "sst2", "squad", "dynahate", "hatemoji", "hatecheck",
                            "davidson", "seed", "dynabench"}


# --- the import service and command ---------------------------------------


def nli_file(tmp_path, rows, name="nli.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)
                              for r in rows) + "\n", encoding="utf-8")
    return path


def premise_row(uid, hypothesis="Someone eats.", label="e", premise="A man is eating."):
    return {"uid": uid, "context": premise, "hypothesis": hypothesis, "label": label}


def test_bad_rows_are_reported_and_skipped(demo_tasks, tmp_path):
    nli = demo_tasks["nli"]
    path = nli_file(tmp_path, [
        premise_row("u1"),
        premise_row("u2", label="foo"),
        premise_row("u3", hypothesis="   "),
        "{broken",
        premise_row("u5", hypothesis="x" * 1001),
        premise_row("u6", premise="A very long premise. " * 200, label="n"),  # contexts may be long
    ])
    report = import_records(nli, read_records("anli", path), round_number=2, split="dev")
    assert report.created == 2 and report.skipped_duplicates == 0
    assert [str(e) for e in report.errors] == [
        "line 2: target.label: 'foo' is not one of ['entailment', 'neutral', 'contradiction'].",
        "line 3: inputs.hypothesis: Must not be empty.",
        "line 4: Not valid JSON: Expecting property name enclosed in double quotes (column 2).",
        "line 5: inputs.hypothesis: Must be at most 1000 characters (got 1001).",
    ]
    assert set(nli.examples.values_list("external_uid", flat=True)) == {"u1", "u6"}
    example = nli.examples.get(external_uid="u1")
    assert example.source == "import" and example.split == "dev" and example.annotator is None
    assert example.validation_status == "verified" and example.round.number == 2
    assert example.context.fields == {"premise": "A man is eating."}
    rnd = Round.objects.get(task=nli, number=2)
    assert rnd.status == "closed"
    from annotation.stats import round_stats

    assert round_stats(rnd)["collected"] == 0  # imported data is not collected on the platform
    assert nli.rounds.get(number=1).status == "open"


def test_strict_import_writes_nothing(demo_tasks, tmp_path):
    nli = demo_tasks["nli"]
    path = nli_file(tmp_path, [premise_row("u1"), premise_row("u2", label="foo"), premise_row("u3"),
                               '{"uid": "u4"'])
    before = (Example.objects.count(), Context.objects.count(), Round.objects.count())
    with pytest.raises(DatasetImportError) as caught:
        import_records(nli, read_records("anli", path), round_number=2, split="dev", strict=True,
                       batch_size=1)
    assert [e.line for e in caught.value.errors] == [2, 4]
    assert (Example.objects.count(), Context.objects.count(), Round.objects.count()) == before

    with pytest.raises(CommandError) as caught:
        run_import(path, "--task", "nli", "--format", "anli", "--round", 2, "--split", "dev", "--strict")
    message = str(caught.value)
    assert "2 malformed row(s); nothing was written" in message
    assert "line 2: target.label: 'foo' is not one of" in message
    assert (Example.objects.count(), Context.objects.count(), Round.objects.count()) == before

    path.write_text(json.dumps(premise_row("u1")) + "\n")
    run_import(path, "--task", "nli", "--format", "anli", "--round", 2, "--split", "dev", "--strict")
    assert nli.examples.filter(external_uid="u1").exists()


def test_importing_twice_creates_nothing_twice(demo_tasks, tmp_path):
    nli = demo_tasks["nli"]
    rows = [premise_row(f"u{i}", hypothesis=f"Hypothesis {i}.", premise=f"Premise {i % 3}.")
            for i in range(25)]
    path = nli_file(tmp_path, rows + [premise_row("u3", hypothesis="Hypothesis 3.", premise="Premise 0.")])
    first_report = import_records(nli, read_records("anli", path), round_number=1, split="train",
                                  batch_size=7)
    assert first_report.created == 25 and first_report.skipped_duplicates == 1  # u3 twice in the file
    assert first_report.contexts_created == 3
    counts = (Example.objects.count(), Context.objects.count())
    second = import_records(nli, read_records("anli", path), round_number=1, split="train", batch_size=10)
    assert (second.created, second.skipped_duplicates, second.contexts_created) == (0, 26, 0)
    assert (Example.objects.count(), Context.objects.count()) == counts
    from annotation.stats import round_stats

    assert round_stats(nli.rounds.get(number=1))["collected"] == 0  # stats count platform examples


def test_context_with_same_id_but_other_text_is_an_error(demo_tasks, tmp_path):
    qa = demo_tasks["qa"]
    seed_context = qa.contexts.get(external_id="qa-001")
    path = tmp_path / "copy.jsonl"
    rows = list(read_records("seed", SEED_DIR / "qa.jsonl"))[:2]
    record = {"format": 1, "uid": "6d9d6f3c-1f8e-4a4b-9d0b-2d1c3e4f5a6b", "round": 1, "split": "train",
              "source": "import", "context": {"id": "qa-001", "fields": {"title": "T", "passage": "Other."},
                                              "tag": ""},
              "inputs": {"question": "What?"}, "target": {"text": "Other", "start": 0},
              "validation": {"status": "pending", "correct": 0, "incorrect": 0, "flagged": 0}}
    path.write_text(json.dumps(record) + "\n")
    report = import_records(qa, read_records("dynabench", path))
    assert report.created == 0 and "exists already with different fields" in str(report.errors[0])
    # The seed examples reuse the shipped seed contexts, by their text.
    report = import_records(qa, rows, round_number=1, source="seed")
    assert report.created == 2 and report.contexts_created == 0
    assert set(qa.examples.values_list("context", flat=True)) == {seed_context.pk}


def test_config_errors(demo_tasks, tmp_path):
    nli, qa = demo_tasks["nli"], demo_tasks["qa"]
    path = nli_file(tmp_path, [premise_row("u1")])
    with pytest.raises(DatasetImportError, match="line 1: the file gives no split"):
        import_records(nli, read_records("anli", path), round_number=1)
    with pytest.raises(DatasetImportError, match="gives no round"):
        import_records(nli, read_records("anli", path), split="dev")
    with pytest.raises(DatasetImportError, match="takes hypothesis"):
        check_format(nli, "squad")
    with pytest.raises(DatasetImportError, match="takes question"):
        check_format(qa, "anli")
    check_format(qa, "seed")


def test_command_errors(demo_tasks, tmp_path):
    path = nli_file(tmp_path, [premise_row("u1")])
    with pytest.raises(CommandError, match="Unknown task 'nope'. Known tasks: hate, nli, qa, sentiment."):
        run_import(path, "--task", "nope", "--format", "anli", "--round", 1, "--split", "dev")
    with pytest.raises(CommandError, match="Unknown format 'csv'. Known formats: anli"):
        run_import(path, "--task", "nli", "--format", "csv", "--round", 1, "--split", "dev")
    with pytest.raises(CommandError, match="No such file"):
        run_import(tmp_path / "absent.jsonl", "--task", "nli", "--format", "anli", "--round", 1,
                   "--split", "dev")
    with pytest.raises(CommandError, match="--round is required: anli files have no round column"):
        run_import(path, "--task", "nli", "--format", "anli", "--split", "dev")
    with pytest.raises(CommandError, match="--split is required"):
        run_import(path, "--task", "nli", "--format", "anli", "--round", 1)
    with pytest.raises(CommandError, match="takes hypothesis"):
        run_import(path, "--task", "nli", "--format", "sst2", "--round", 1, "--split", "dev")
    csv_path = tmp_path / "x.csv"
    csv_path.write_text("id,words\n1,hello\n")
    with pytest.raises(CommandError, match="Cannot read .* missing column"):
        run_import(csv_path, "--task", "hate", "--format", "dynahate")
    assert Example.objects.count() == 0


def test_command_reports_only_the_first_twenty_errors(demo_tasks, tmp_path):
    path = nli_file(tmp_path, [premise_row("ok")] + [premise_row(f"u{i}", label="bad") for i in range(25)])
    out = run_import(path, "--task", "nli", "--format", "anli", "--round", 1, "--split", "train")
    assert "1 created, 0 skipped as duplicates, 25 malformed" in out
    assert "line 2: target.label: 'bad' is not one of" in out and "line 21: " in out and "line 22: " not in out
    assert "... and 5 more" in out


def test_command_imports_anli_r1_dev(demo_tasks, data_file):
    path = data_file("anli/R1/dev.jsonl")
    out = run_import(path, "--task", "nli", "--format", "anli", "--round", 2, "--split", "dev")
    assert "1000 created, 0 skipped as duplicates, 0 malformed" in out
    assert "round 2 (new, closed): 1000 examples" in out
    table = [line.split() for line in out.splitlines() if line.startswith("  dev")]
    assert table == [["dev", "contradiction", "333"], ["dev", "entailment", "334"],
                     ["dev", "neutral", "333"], ["dev", "(all)", "1000"]]
    assert "contexts created: 845" in out
    out = run_import(path, "--task", "nli", "--format", "anli", "--round", 2, "--split", "dev")
    assert "0 created, 1000 skipped as duplicates, 0 malformed" in out


@pytest.mark.parametrize("fmt,relative,task,rows,extra", [
    ("nli-jsonl", "nli/snli/dev.jsonl", "nli", 40, ["--round", "1", "--split", "dev"]),
    ("sst2", "sst2/dev.tsv", "sentiment", 40, ["--round", "1", "--split", "dev"]),
    ("squad", "squad/dev-v1.1.json", "qa", None, ["--round", "1", "--split", "test"]),
    ("dynahate", "dynahate/db_test.csv", "hate", 40, []),
    ("hatemoji", "hatemoji/HatemojiBuild/train.csv", "hate", 40, []),
    ("hatemoji", "hatemoji/HatemojiCheck/test.csv", "hate", 40, ["--round", "8", "--split", "test"]),
    ("hatecheck", "hatecheck/test_suite_cases.csv", "hate", 40, ["--round", "9", "--split", "test"]),
    ("davidson", "davidson/labeled_data.csv", "hate", 40, ["--round", "1", "--split", "train"]),
])
def test_every_format_imports_real_rows(demo_tasks, data_file, tmp_path, fmt, relative, task, rows, extra):
    source = data_file(relative)
    if rows is None:
        path = source  # SQuAD is one JSON document: the whole dev file
    elif source.suffix == ".csv":
        path = head_csv(source, tmp_path / source.name, rows)
    else:
        path = head_lines(source, tmp_path / source.name, rows + (source.suffix == ".tsv"))
    out = run_import(path, "--task", task, "--format", fmt, *extra)
    expected = rows or 10570
    assert f"{expected} created, 0 skipped as duplicates, 0 malformed" in out
    assert demo_tasks[task].examples.filter(source="import").count() == expected


@pytest.mark.parametrize("slug", ["nli", "qa", "sentiment", "hate"])
def test_seed_import(demo_tasks, slug):
    out = run_import(SEED_DIR / f"{slug}.jsonl", "--task", slug, "--format", "seed", "--round", 1)
    task = demo_tasks[slug]
    assert task.examples.filter(source="seed").count() == len(
        (SEED_DIR / f"{slug}.jsonl").read_text().splitlines())
    assert " 0 malformed" in out and "train" in out
