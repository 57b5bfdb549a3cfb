"""A real round-0 target: ``manage.py train_model`` (files into round 0, a round-0 model
trained and evaluated as jobs, ``--target``), the split rules it uses, the admin's
round-0 action, and ``bootstrap_demo --real-data`` (on the shared data: skips without it)."""

import csv
import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotation.datasets import import_records
from annotation.models import Example
from datafiles.readers import Record, context_id
from jobs.models import Job
from leaderboard import demo, training
from leaderboard.evaluation import has_finished_evaluation
from leaderboard.models import Evaluation
from leaderboard.sampling import stable_hash
from leaderboard.static_data import StaticDataError, hash_splits, parse_source, read_static_data
from registry.models import ModelVersion
from tasks.models import Round, Task
from tasks.services import create_task, load_definition

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}
TINY_ARGS = ["--max-steps", "2", "--batch-size", "4", "--epochs", "1"]
NLI_LABELS = ("entailment", "neutral", "contradiction")

# Twelve premises, each with one hypothesis per label: 36 rows in the MNLI/SNLI shape.
PREMISES = [
    ("A man is playing a guitar on a stage.", "A man is making music.", "The man is famous.",
     "The stage is empty."),
    ("Two children are building a sandcastle at the beach.", "Kids are outside.", "The kids are brothers.",
     "The children are asleep in bed."),
    ("A woman in a red coat waits for the bus.", "Someone is waiting.", "She is late for work.",
     "The woman is driving a car."),
    ("A dog catches a frisbee in the park.", "An animal is playing.", "The dog belongs to a child.",
     "The dog is sleeping indoors."),
    ("An old man reads a newspaper on a bench.", "A person is reading.", "He reads about sports.",
     "The man is swimming."),
    ("A chef chops onions in a busy kitchen.", "Food is being prepared.", "The chef is crying.",
     "The kitchen is closed."),
    ("Cyclists race down a mountain road.", "People are riding bikes.", "They are professionals.",
     "The cyclists are walking uphill."),
    ("A girl paints a picture of a sunset.", "Someone is painting.", "The picture will be sold.",
     "The girl is playing soccer."),
    ("Workers repair a road in the rain.", "People are working outdoors.", "The road had a hole.",
     "The weather is sunny and dry."),
    ("A crowd cheers at a football match.", "People are at a game.", "Their team is winning.",
     "The stadium is silent."),
    ("A baker pulls bread out of the oven.", "Bread is baked.", "The bread is for a wedding.",
     "The oven is broken and cold."),
    ("Students listen to a lecture in a hall.", "People are in a room.", "The lecture is on history.",
     "The hall is empty."),
]


def nli_rows():
    for premise, entailed, neutral, contradicted in PREMISES:
        for hypothesis, label in zip((entailed, neutral, contradicted), NLI_LABELS, strict=True):
            yield {"premise": premise, "hypothesis": hypothesis, "label": label}


def write_jsonl(path: Path, rows, extra_lines=()) -> Path:
    lines = [json.dumps(row) for row in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expected_split(premise: str, dev=0.1, test=0.1) -> str:
    """The documented rule, written out: the premise's context id, hashed with seed 0."""
    position = stable_hash(0, "static-split", "ctx:" + context_id({"premise": premise})) / 2**64
    return "test" if position < test else "dev" if position < test + dev else "train"


@pytest.fixture
def nli(db):
    """The NLI task as a researcher creates it: no rounds yet."""
    task, _ = create_task(load_definition("nli"))
    return task


# --- the command, end to end ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the command waits for jobs that start on commit
def test_train_model_imports_round_0_trains_evaluates_and_targets(nli, tmp_path):
    path = write_jsonl(tmp_path / "nli.jsonl", nli_rows(), extra_lines=[
        '{"premise": "broken',  # line 37: not JSON
        json.dumps({"premise": "P.", "hypothesis": "H.", "label": "maybe"}),  # line 38: not a label
    ])
    out = io.StringIO()
    call_command("train_model", "--task", "nli", "--format", "nli-jsonl", str(path), "--dev-fraction", "0.25",
                 "--test-fraction", "0.25", "--name", "m0", "--target", "--override", "three test examples",
                 *TINY_ARGS, stdout=out)
    output = out.getvalue()

    # Round 0 holds the 36 good rows, each in the split its premise hashes to.
    static = Round.objects.get(task=nli, number=0)
    examples = Example.objects.filter(task=nli).select_related("context", "round")
    assert examples.count() == 36 and {e.round_id for e in examples} == {static.pk}
    for example in examples:
        assert example.split == expected_split(example.context.fields["premise"], 0.25, 0.25)
        assert example.source == "import" and example.validation_status == "verified"
    by_split = {split: examples.filter(split=split).count() for split in ("train", "dev", "test")}
    assert all(by_split.values()), by_split  # the fixture data lands in all three
    assert static.status == Round.Status.CLOSED and static.opened_at is None  # never opened

    # The malformed rows are reported by file and line.
    assert f"{path} line 37: Not valid JSON" in output
    assert f"{path} line 38: unknown label 'maybe'" in output

    # The model learned round 0 only, and was evaluated on round 0's test split.
    model = ModelVersion.objects.get(task=nli, name="m0")
    assert list(model.trained_on_rounds.all()) == [static]
    assert model.training_data["train"]["count"] == by_split["train"]
    assert model.training_data["dev"]["count"] == by_split["dev"]
    evaluation = Evaluation.objects.get(model_version=model, round=static, split="test")
    assert evaluation.num_examples == by_split["test"]
    assert has_finished_evaluation(model)

    # The jobs' logs, the dev accuracy and the evaluation table are printed.
    assert "train: [" in output and "attempt 1 started" in output and "evaluate: [" in output
    assert f"Registered m0 (#{model.pk}): dev accuracy " in output
    assert f"{0:>5}  {by_split['test']:>8}" in output  # the table's round 0 row
    # Off a terminal, the training steps also come as plain progress lines (core.progress).
    assert "training m0: 2/2 steps (100%)" in output and "\r" not in output

    # --target: the task had no round but 0, so promotion opened round 1 with it.
    first = Round.objects.get(task=nli, number=1)
    assert first.status == Round.Status.OPEN and list(first.target_models.all()) == [model]
    assert "m0 is the target of nli round 1 (opened by promotion)" in output
    # Three test examples cannot clear the majority line: the override's reason is recorded.
    from leaderboard.models import Promotion
    assert Promotion.objects.get(model_version=model).reason == "three test examples"
    static.refresh_from_db()
    assert static.status == Round.Status.CLOSED and static.opened_at is None
    assert Job.objects.filter(task=nli, status=Job.Status.SUCCEEDED).count() == 2


def test_refusals_are_clear_and_write_nothing(nli, tmp_path):
    path = write_jsonl(tmp_path / "nli.jsonl", nli_rows())

    def refused(*args):
        with pytest.raises(CommandError) as caught:
            call_command("train_model", *args, stdout=io.StringIO())
        return str(caught.value)

    assert "Unknown task 'nope'. Known tasks: nli." in refused("--task", "nope", "--format", "nli-jsonl", str(path))
    message = refused("--task", "nli", "--format", "mnli", str(path))
    assert "Unknown format 'mnli'" in message and "nli-jsonl" in message
    assert "takes hypothesis" in refused("--task", "nli", "--format", "sst2", str(path))
    assert f"No such file: {tmp_path / 'absent.jsonl'}" in refused(
        "--task", "nli", "--format", "nli-jsonl", str(path), str(tmp_path / "absent.jsonl"))
    ModelVersion.objects.create(task=nli, name="taken", artifact_path="nli/taken", sha256="ab" * 32)
    assert "already has a model named 'taken'" in refused(
        "--task", "nli", "--format", "nli-jsonl", str(path), "--name", "taken")
    assert "--epochs: Must be a whole number from 1 to 50." in refused(
        "--task", "nli", "--format", "nli-jsonl", str(path), "--epochs", "0")
    assert "add up to 1.2" in refused(
        "--task", "nli", "--format", "nli-jsonl", str(path), "--dev-fraction", "0.6", "--test-fraction", "0.6")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"premise": "P.", "hypothesis": "H.", "label": "maybe"}])
    assert f"No usable rows in {bad}" in refused("--task", "nli", "--format", "nli-jsonl", str(bad))
    # Nothing was imported, no round 0 was made, nothing was queued.
    assert not Example.objects.exists() and not Round.objects.filter(task=nli).exists()
    assert not Job.objects.exists()


def test_the_command_will_not_wait_inside_a_transaction(nli, tmp_path):
    """Its jobs start when the import commits: inside a transaction it would wait forever."""
    path = write_jsonl(tmp_path / "nli.jsonl", nli_rows())
    with pytest.raises(CommandError, match="outside a transaction"):
        call_command("train_model", "--task", "nli", "--format", "nli-jsonl", str(path), stdout=io.StringIO())


# --- the split rules -----------------------------------------------------------------


def records_by_uid(data):
    return {r.external_uid: r for records in data.records.values() for r in records}


def test_splits_are_by_premise_hash_and_stable(tmp_path):
    path = write_jsonl(tmp_path / "nli.jsonl", nli_rows())
    first = read_static_data("nli-jsonl", [parse_source(path)], labels=NLI_LABELS)
    again = read_static_data("nli-jsonl", [parse_source(path)], labels=NLI_LABELS)
    assert {u: r.split for u, r in records_by_uid(first).items()} == \
        {u: r.split for u, r in records_by_uid(again).items()}
    for record in records_by_uid(first).values():
        assert record.split == expected_split(record.context["fields"]["premise"])
    # A row's split does not depend on the other rows of the file.
    one = write_jsonl(tmp_path / "one.jsonl", list(nli_rows())[5:6])
    [alone] = records_by_uid(read_static_data("nli-jsonl", [parse_source(one)])).values()
    assert alone.split == records_by_uid(first)[alone.external_uid].split


def test_forced_splits_file_splits_and_fractions(tmp_path):
    path = write_jsonl(tmp_path / "nli.jsonl", nli_rows())
    other = write_jsonl(tmp_path / "other.jsonl", [{"premise": "A cat sleeps.", "hypothesis": "A cat rests.",
                                                     "label": "entailment"}])
    data = read_static_data("nli-jsonl", [parse_source(f"{path}:test"), parse_source(other)])
    assert {r.split for r in data.records[path]} == {"test"}
    assert [r.split for r in data.records[other]] == [expected_split("A cat sleeps.")]
    forced = read_static_data("nli-jsonl", [parse_source(f"{path}:test"), parse_source(other)], split="dev")
    assert {r.split for records in forced.records.values() for r in records} == {"dev"}
    everything_train = read_static_data("nli-jsonl", [parse_source(path)], dev_fraction=0, test_fraction=0)
    assert {r.split for r in everything_train.records[path]} == {"train"}
    # Files with a split column keep theirs (our seed format).
    seed = tmp_path / "seed.jsonl"
    seed.write_text("\n".join(json.dumps({"uid": f"s{i}", "split": split, "inputs": {"statement": "ok"},
                                          "label": "positive"}) for i, split in enumerate(["dev", "test"])))
    kept = read_static_data("seed", [parse_source(seed)])
    assert [r.split for r in kept.records[seed]] == ["dev", "test"]
    # A file whose own name ends in ":train" is that file, not a split.
    odd = write_jsonl(tmp_path / "odd:train", list(nli_rows())[:1])
    assert parse_source(str(odd)).split is None and parse_source(f"{odd}:dev").split == "dev"
    with pytest.raises(StaticDataError, match="No such file"):
        read_static_data("nli-jsonl", [parse_source(tmp_path / "absent.jsonl")])


def test_squad_is_split_by_article(tmp_path):
    articles = []
    for a in range(6):
        paragraphs = []
        for p in range(2):
            passage = f"Article {a} paragraph {p} says the answer is blue{a}{p}."
            paragraphs.append({"context": passage, "qas": [
                {"id": f"q{a}-{p}-{q}", "question": f"What does it say ({q})?",
                 "answers": [{"text": f"blue{a}{p}", "answer_start": passage.index("blue")}]}
                for q in range(2)]})
        articles.append({"title": f"Title {a}", "paragraphs": paragraphs})
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": articles, "version": "1.1"}))
    data = read_static_data("squad", [parse_source(path)], dev_fraction=0.3, test_fraction=0.3)
    by_title = {}
    for record in data.records[path]:
        by_title.setdefault(record.context["fields"]["title"], set()).add(record.split)
    assert all(len(splits) == 1 for splits in by_title.values())  # an article never straddles splits
    assert len(by_title) == 6


def test_limit_and_balance(tmp_path):
    path = tmp_path / "davidson.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["", "count", "hate_speech", "offensive_language", "neither", "class", "tweet"])
        for i in range(60):
            writer.writerow([i, 3, 0, 0, 3, 0 if i % 10 == 0 else 2, f"tweet number {i}"])
    labels = ("hateful", "not-hateful")
    full = read_static_data("davidson", [parse_source(path)], labels=labels, split="train")
    assert full.counts()["train"] == {"hateful": 6, "not-hateful": 54}
    capped = read_static_data("davidson", [parse_source(path)], labels=labels, split="train", limit=20)
    assert sum(capped.counts()["train"].values()) == 20 and capped.left_out["train"] == 40
    assert set(records_by_uid(capped)) <= set(records_by_uid(full))  # a subset of the full import
    assert capped.counts()["train"]["hateful"] == 2  # stratified: 10% of 20
    fair = read_static_data("davidson", [parse_source(path)], labels=labels, split="train", balance=True)
    assert fair.counts()["train"] == {"hateful": 6, "not-hateful": 6}
    assert hash_splits([], dev_fraction=0.1, test_fraction=0.1) == []


# --- the admin action --------------------------------------------------------------------


def test_admin_action_trains_on_round_0_only(demo_tasks, researcher, client, django_capture_on_commit_callbacks):
    sentiment = demo_tasks["sentiment"]
    texts = [("I loved every minute of it.", "positive"), ("A dull, tired mess.", "negative"),
             ("Wonderful staff and great food!", "positive"), ("Never again, awful service.", "negative")]
    records = [Record(line=i + 1, external_uid=f"s{i}", inputs={"statement": f"{text} ({i})"},
                      target={"label": label}, split=split)
               for i, ((text, label), split) in enumerate(
                   (texts[i % 4], "train" if i < 12 else "dev" if i < 14 else "test") for i in range(16))]
    import_records(sentiment, records, round_number=0)
    # An example in the open round is not trained on.
    import_records(sentiment, [Record(line=1, external_uid="r1", inputs={"statement": "Fine."},
                                      target={"label": "positive"}, split="train")], round_number=1)
    client.force_login(researcher)
    url = reverse("admin:tasks_task_changelist")
    chosen = {"action": "train_static_model", "_selected_action": [sentiment.pk, demo_tasks["nli"].pk]}
    page = client.post(url, chosen)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Train a round-0 model on the static data" in text and "12 train, 2 dev, 2 test" in text
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {**chosen, "apply": "1", "mode": "full", "epochs": 1, "batch_size": 4,
                                     "max_steps": 2, "name": "static-1"}, follow=True)
    messages = [str(m) for m in response.context["messages"]]
    assert any(m.startswith(f"{demo_tasks['nli']}: Task nli has no static training data") for m in messages), messages
    job = Job.objects.get(task=sentiment, kind=Job.Kind.TRAIN_MODEL)
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.params["rounds"] == [] and job.params["include_static"] is True
    model = ModelVersion.objects.get(task=sentiment, name="static-1")
    assert [r.number for r in model.trained_on_rounds.all()] == [0]
    assert model.training_data["train"]["count"] == 12  # not the open round's example
    assert Evaluation.objects.filter(model_version=model, round__number=0, num_examples=2).exists()
    # The action sits beside "train the next target model", added by the leaderboard to the
    # tasks app's own registered admin (not a re-registered copy of it).
    from django.contrib import admin as django_admin
    from django.test import RequestFactory

    from tasks.admin import TaskAdmin

    registered = django_admin.site.get_model_admin(Task)
    assert type(registered) is TaskAdmin
    request = RequestFactory().get(url)
    request.user = researcher
    assert {"train_next_model", "train_static_model"} <= set(registered.get_actions(request))


# --- bootstrap_demo --real-data ------------------------------------------------------


def shared_data_dir() -> Path:
    base = getattr(settings, "DYNABENCH_DATA_DIR", "")
    if not base or not Path(base).is_dir():
        pytest.skip("the real data sets are absent: DYNABENCH_DATA_DIR is unset or not a directory "
                    "(default var/data, which manage.py fetch_data fills)")
    base = Path(base)
    wanted = ["nli/mnli/dev.jsonl", "sst2/train_full.tsv", "sst2/dev.tsv", "davidson/labeled_data.csv",
              "squad/dev-v1.1.json"]
    absent = [name for name in wanted if not (base / name).is_file()]
    if absent:
        pytest.skip(f"real data files absent under {base}: {', '.join(absent)}")
    return base


@pytest.mark.django_db(transaction=True)
def test_bootstrap_demo_real_data(monkeypatch):
    shared_data_dir()
    monkeypatch.setattr(demo, "REAL_DATA_TRAINING", dict(TINY))
    monkeypatch.setattr(demo, "QA_TRAINING", dict(TINY))
    monkeypatch.setattr(training, "DEMO_TRAINING", {**training.DEMO_TRAINING, **TINY})  # QA's seed model
    # An earlier plain demo left a seed model as NLI round 1's target: the real model is promoted.
    demo.bootstrap_demo(with_models=False)
    nli = Task.objects.get(slug="nli")
    seed_target = ModelVersion.objects.create(task=nli, name="round0-seed", artifact_path="nli/x", sha256="ab" * 32)
    nli.open_round().target_models.add(seed_target)

    out = io.StringIO()
    call_command("bootstrap_demo", "--real-data", "--limit", "40", stdout=out)
    output = out.getvalue()
    for slug in ("nli", "sentiment", "hate", "qa"):
        task = Task.objects.get(slug=slug)
        model = ModelVersion.objects.get(task=task, name=demo.REAL_MODEL_NAME)
        static = Round.objects.get(task=task, number=0)
        assert static.status == Round.Status.CLOSED and static.opened_at is None
        assert list(model.trained_on_rounds.all()) == [static]
        for split in ("train", "dev", "test"):  # the real rows, beside the seed set the plain demo imported
            real = Example.objects.filter(round=static, split=split).exclude(external_uid__startswith="seed-")
            assert 0 < real.count() <= 40, (slug, split)
        assert Evaluation.objects.filter(model_version=model, round=static).exists()
        assert f"trained and registered {model}" in output
        assert not ModelVersion.objects.filter(task=task, name="round0-seed").exclude(pk=seed_target.pk).exists()
    # A fresh round 1 gets the real model; NLI's round 1 had a target, so round 2 opens with it.
    for slug in ("sentiment", "hate", "qa"):
        first = Round.objects.get(task__slug=slug, number=1)
        assert first.status == Round.Status.OPEN
        assert [m.name for m in first.target_models.all()] == [demo.REAL_MODEL_NAME]
    # Promotion refuses a model not clear of the majority-class answer; a tiny model (two steps) may
    # land on either side of it, so both outcomes are checked for what they must show.
    second = Round.objects.filter(task=nli, number=2).first()
    if second is None:
        assert "nli: round0-real cannot be a target:" in output and "does not lie above it" in output, output
        assert Round.objects.get(task=nli, number=1).status == Round.Status.OPEN
        assert list(nli.open_round().target_models.all()) == [seed_target]
    else:
        assert Round.objects.get(task=nli, number=1).status == Round.Status.CLOSED
        assert second.status == Round.Status.OPEN and [m.name for m in second.target_models.all()] == [
            demo.REAL_MODEL_NAME]
    # Davidson's training rows are balanced.
    hate_train = Example.objects.filter(task__slug="hate", round__number=0, split="train",
                                        external_uid__startswith="davidson-")
    assert hate_train.filter(target__label="hateful").count() == hate_train.filter(target__label="not-hateful").count()
    # QA trains on SQuAD under its time budget; a fresh round 1 takes it as its first target (the
    # crowd then refuses to pay for writing against it while it is below the sliding-window line).
    assert "qa: round 0 <- SQuAD v1.1 dev, split 80/10/10 by article" in output
    assert f"max_minutes {settings.DYNABENCH_QA_TRAINING_MINUTES}" in output
    assert [m.name for m in Round.objects.get(task__slug="qa", number=1).target_models.all()] == [
        demo.REAL_MODEL_NAME]

    again = io.StringIO()
    call_command("bootstrap_demo", "--real-data", "--limit", "40", stdout=again)
    assert "demo already set up; nothing to do" in again.getvalue()
    assert ModelVersion.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_bootstrap_demo_real_data_falls_back_to_the_seed_model(tmp_path, monkeypatch):
    """Works anywhere: an empty data directory means the seed model, with a note."""
    monkeypatch.setattr(training, "DEMO_TRAINING", {**training.DEMO_TRAINING, **TINY})
    notes = []
    report = demo.bootstrap_demo(slugs=["sentiment"], real_data=True, data_dir=tmp_path, progress=notes.append)
    assert report.models_trained == ["sentiment/round0-seed"]
    assert any(n.startswith("sentiment: no real data (sst2/train_full.tsv, sst2/dev.tsv absent") for n in notes), notes
    # Its round 0 holds the shipped seed examples it learnt from (none of any real data set).
    static = Round.objects.get(task__slug="sentiment", number=0)
    assert Example.objects.filter(round=static).count() == 200
    assert not Example.objects.filter(round=static).exclude(external_uid__startswith="seed-").exists()
    with pytest.raises(CommandError, match="cannot go with --no-models"):
        call_command("bootstrap_demo", "--real-data", "--no-models", stdout=io.StringIO())
