"""Data releases: the job, the Parquet files as ``datasets`` loads them, the data card,
the command, and the rules (closed rounds only, verified data only, immutable)."""

import re
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotation.examples import delete_examples
from annotation.models import Example
from core.errors import Conflict, InvalidInput, Unavailable
from jobs import engine
from jobs.models import Job
from leaderboard.models import ImmutableRelease, Release
from leaderboard.releases import service
from leaderboard.releases.rows import pseudonym
from tasks.models import Round
from tests.leaderboard.release_data import MARKUP, populate


@pytest.fixture(autouse=True)
def _jobs_run_on_commit(django_capture_on_commit_callbacks):
    global CAPTURE
    CAPTURE = django_capture_on_commit_callbacks


def make_release(task, rounds, splits=None, user=None, release_test_split=True) -> Release:
    """A release made by the service and its job (run when the request's transaction commits);
    with its test split released on purpose unless told otherwise."""
    with CAPTURE(execute=True):
        job = service.start_release(task, rounds=rounds, splits=splits, user=user,
                                    release_test_split=release_test_split)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, (job.status, job.error)
    return Release.objects.get(pk=job.result["release"])


def load(folder: Path, splits, cache: Path):
    from datasets import load_dataset

    return load_dataset("parquet", data_files={s: str(folder / "data" / f"{s}.parquet") for s in splits},
                        cache_dir=str(cache))


def expected_uids(task, rounds, split) -> set[str]:
    rows = Example.objects.filter(task=task, round__number__in=rounds, split=split,
                                  validation_status=Example.ValidationStatus.VERIFIED, flagged=False,
                                  retracted=False, provisional=False)
    return {str(uid) for uid in rows.values_list("uid", flat=True)}


def test_a_release_loads_with_datasets_and_holds_each_verified_example_of_its_rounds_once(release_world, researcher,
                                                                                          tmp_path):
    release = make_release(release_world.task, [0, 1], user=researcher)
    assert (release.version, release.rounds, release.created_by) == (1, [0, 1], researcher)
    assert release.splits == ["train", "dev", "test"]
    service.copy_release(release, tmp_path / "out")
    data = load(tmp_path / "out", release.splits, tmp_path / "cache")

    seen = []
    for split in release.splits:
        uids = data[split]["uid"]
        assert len(uids) == len(set(uids))
        assert set(uids) == expected_uids(release_world.task, [0, 1], split)
        assert release.counts["splits"][split]["rows"] == len(uids)
        seen += uids
    assert set(seen) == {str(e.uid) for e in release_world.released}
    assert not set(seen) & {str(e.uid) for e in release_world.withheld + release_world.open_round}
    assert set(data["train"]["round"]) == {0, 1}

    rows = {row["uid"]: row for split in release.splits for row in data[split]}
    config = release_world.task.parsed_config
    assert list(data["train"].features) == ["uid", "round", "source", *config.context_field_names,
                                           *config.input_field_names, "label", "model_answer", "fooled",
                                           "target_models", "verified_by", "votes_correct", "votes_incorrect",
                                           "validator_agreement", "annotator"]
    for example in release_world.released:
        row = rows[str(example.uid)]
        assert row["hypothesis"] == example.inputs["hypothesis"]
        assert row["premise"] == example.context.fields["premise"]
        assert row["label"] == example.target["label"]
        if example.source == Example.Source.ANNOTATION:
            assert row["fooled"] is example.fooled
            assert row["model_answer"] == example.prediction["label"]
            assert row["target_models"] == [release_world.model.name]
            assert re.fullmatch(r"ann-[0-9a-f]{20}", row["annotator"])
            assert row["annotator"] == pseudonym(example.annotator_id)  # the keyed hash, not the account
            assert example.annotator.username not in row["annotator"]
        else:
            assert row["fooled"] is None and row["annotator"] is None and row["verified_by"] == "imported"
    by_writer = {}
    for example in release_world.released:
        if example.annotator_id:
            by_writer.setdefault(example.annotator_id, set()).add(rows[str(example.uid)]["annotator"])
    assert all(len(ids) == 1 for ids in by_writer.values()) and len(by_writer) == 2  # one stable id per writer
    assert [r["verified_by"] for r in rows.values() if r["verified_by"] == "researcher"] == ["researcher"]
    markup = next(r for r in rows.values() if r["hypothesis"] == MARKUP)  # data keeps what was written
    assert markup["votes_correct"] == 2


def test_the_annotator_id_is_a_hash_under_the_secret_key(settings, mturk_worker):
    settings.RELEASE_PSEUDONYM_KEY = "one key"
    first = pseudonym(mturk_worker.pk)
    assert first == pseudonym(mturk_worker.pk) != pseudonym(mturk_worker.pk + 1)
    assert mturk_worker.mturk_identity.worker_id not in first and mturk_worker.username not in first
    settings.RELEASE_PSEUDONYM_KEY = "another key"
    assert pseudonym(mturk_worker.pk) != first  # without the key, nobody links it back to the account
    assert pseudonym(None) is None and pseudonym(None, "a-0123") not in (None, "a-0123")


def test_the_card_has_the_hub_header_and_counts_that_match_the_database(release_world, researcher, tmp_path):
    from huggingface_hub import DatasetCard

    release = make_release(release_world.task, [0, 1], user=researcher)
    service.copy_release(release, tmp_path)
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    card = DatasetCard(readme)
    assert card.data.license == "unknown"  # the task's licence is "unspecified"
    assert card.data.task_categories == ["text-classification"]
    assert card.data.language == ["en"]
    assert card.data.size_categories == ["n<1K"]
    assert card.data.configs == [{"config_name": "default", "data_files": [
        {"split": s, "path": f"data/{s}.parquet"} for s in release.splits]}]

    counted = {}
    for line in readme.splitlines():
        match = re.fullmatch(r"\| (train|dev|test) \| (\d+) \| ([a-z_-]+) \| (\d+) \|", line)
        if match:
            split, number, label, n = match.groups()
            counted[(split, int(number), label)] = int(n)
    expected = {}
    for example in release_world.released:
        key = (example.split, example.round.number, example.target["label"])
        expected[key] = expected.get(key, 0) + 1
    assert {k: v for k, v in counted.items() if v} == expected
    assert sum(counted.values()) == release.total_rows == len(release_world.released)

    # Every file's sha256 is in the card, and is the file's.
    for name in (*release.data_files, "croissant.json"):
        digest = release.files[name]["sha256"]
        assert f"| `{name}` |" in readme and f"`{digest}`" in readme
        from leaderboard.releases.files import sha256_of
        assert sha256_of(tmp_path / name) == digest
    assert sha256_of(tmp_path / "README.md") == release.files["README.md"]["sha256"]

    # The model error rate of round 1 at collection, with its Wilson interval, from the counters.
    from ml.metrics import wilson_interval
    written = [e for e in release_world.released + release_world.withheld if e.round.number == 1 and not e.retracted]
    fooled = sum(1 for e in written if e.fooled)
    low, high = wilson_interval(fooled, len(written))
    assert f"{100 * fooled / len(written):.1f}% ({100 * low:.1f}%–{100 * high:.1f}%)" in readme
    # The task's rule, in words: the default (adaptive, tasks/config.py) with its own numbers.
    assert ("Adaptive validation: each vote is weighed by its validator's estimated reliability, and an example "
            "is decided once the probability that its writer is right (or wrong) reaches 0.9, after 2 to 5 votes"
            in readme)
    assert "1 of 2 cases" in readme  # blind answers: one of the two agreed
    per_writer = Counter(e.annotator_id for e in release_world.released if e.annotator_id)
    assert per_writer[release_world.released[3].annotator_id] == per_writer[release_world.released[4].annotator_id]
    assert "Writers contributed unequal" not in readme  # they did not, here
    assert "## Known limitations" in readme and "No licence was chosen" in readme
    assert "Content warning" not in readme  # NLI has none


def test_the_limitations_say_only_what_holds_for_the_release():
    from leaderboard.releases.card import limitations

    facts = {"round_facts": [{"static": True, "collected": 0, "target_models": []}],
             "validation": {"vote_agreement": None, "verified_by": {"imported": 3}}, "license": "mit",
             "empty_splits": [], "annotator_rows": []}
    lines = limitations(facts)
    assert not any("fool particular target models" in line for line in lines)  # static data only
    assert any(line.startswith("3 example(s) (source import or seed)") for line in lines)
    facts.update(round_facts=[{"static": False, "collected": 5, "target_models": ["m1", "<b>m2</b>"]}],
                 validation={"vote_agreement": 0.75, "verified_by": {"imported": 0}}, annotator_rows=[5, 2, 1],
                 license="unspecified", empty_splits=["dev"])
    text = "\n".join(limitations(facts))
    assert "(&lt;b&gt;m2&lt;/b&gt;, m1)" in text and "disagreed with the outcome in 25.0%" in text
    assert "from 1 to 5 of the 8 with a writer" in text and "No verified example in the split(s) dev." in text
    assert "No licence was chosen" in text and "imported data set" not in text


def test_the_card_escapes_what_people_wrote_and_carries_the_content_warning(demo_tasks, annotator,
                                                                            second_annotator, researcher,
                                                                            other_researcher, superuser, tmp_path):
    hate = demo_tasks["hate"]
    hate.goal = MARKUP
    hate.config = {**hate.config, "license": "cc-by-4.0"}
    hate.save()
    populate(hate, [annotator, second_annotator], researcher, [other_researcher, superuser])
    release = make_release(hate, [1], splits=["train", "test"])
    service.copy_release(release, tmp_path)
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "> **Content warning:** This task shows and asks for offensive and hateful language." in readme
    assert "<script" not in readme and "<img" not in readme and "&lt;script&gt;" in readme
    assert "**Licence:** cc-by-4.0 (https://creativecommons.org/licenses/by/4.0/)" in readme
    assert release.license == "cc-by-4.0" and release.rounds == [1]
    assert release.splits == ["train", "test"] and not (tmp_path / "data" / "dev.parquet").exists()


def test_a_qa_release_has_the_answer_span(demo_tasks, annotator, second_annotator, researcher, other_researcher,
                                          superuser, tmp_path):
    qa = populate(demo_tasks["qa"], [annotator, second_annotator], researcher, [other_researcher, superuser])
    release = make_release(qa.task, [1])
    service.copy_release(release, tmp_path)
    data = load(tmp_path, release.splits, tmp_path / "cache")
    assert "label" not in data["train"].features
    for row in data["train"]:
        example = Example.objects.get(uid=row["uid"])
        passage = example.context.fields["passage"]
        assert passage[row["answer_start"]:row["answer_start"] + len(row["answer_text"])] == row["answer_text"]
        assert row["title"] == example.context.fields["title"] and row["question"] == example.inputs["question"]
    from huggingface_hub import DatasetCard
    assert DatasetCard((tmp_path / "README.md").read_text()).data.task_categories == ["question-answering"]


def test_releases_refuse_open_and_draft_rounds_unknown_splits_and_nothing_to_release(release_world, researcher):
    task = release_world.task
    with pytest.raises(Conflict, match="Round 2 of nli is open"):
        service.start_release(task, rounds=[1, 2])
    Round.objects.create(task=task, number=3)
    with pytest.raises(Conflict, match="Round 3 of nli is a draft"):
        service.start_release(task, rounds=[3])
    with pytest.raises(InvalidInput, match="no round 9"):
        service.start_release(task, rounds=[9])
    with pytest.raises(InvalidInput, match="Unknown split"):
        service.start_release(task, rounds=[1], splits=["validation"])
    with pytest.raises(InvalidInput, match="at least one round"):
        service.start_release(task, rounds=[])
    delete_examples(Example.objects.filter(task=task, round__number=1, split="dev"))  # counters follow
    with pytest.raises(Conflict, match="Nothing to release"):
        service.start_release(task, rounds=[1], splits=["dev"])
    assert not Job.objects.filter(kind=Job.Kind.RELEASE_DATASET).exists()
    assert not Release.objects.exists()


def test_a_round_opened_or_a_key_lost_after_queueing_fails_the_job_with_the_reason(release_world, settings):
    settings.JOBS_RUN_INLINE = False  # leave the job queued (a command run outside a server)
    with engine.held_for_the_server():
        job = service.start_release(release_world.task, rounds=[1])
    settings.RELEASE_PSEUDONYM_KEY = ""
    with pytest.raises(Unavailable, match="RELEASE_PSEUDONYM_KEY"):
        service.start_release(release_world.task, rounds=[0])
    service.run_release_job(job.pk)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "RELEASE_PSEUDONYM_KEY" in job.error
    assert not Release.objects.exists()


def test_one_release_job_per_task_at_a_time(release_world, settings):
    settings.JOBS_RUN_INLINE = False
    with engine.held_for_the_server():
        first = service.start_release(release_world.task, rounds=[1])
        with pytest.raises(Conflict, match=f"job #{first.pk}"):
            service.start_release(release_world.task, rounds=[0])


def test_a_release_is_immutable_and_the_next_is_the_next_version(release_world):
    first = make_release(release_world.task, [0])
    second = make_release(release_world.task, [0, 1])
    assert (first.version, second.version) == (1, 2)
    assert first.location != second.location
    first.license = "mit"
    with pytest.raises(ImmutableRelease):
        first.save()
    with pytest.raises(ImmutableRelease):
        Release.objects.filter(pk=first.pk).update(license="mit")
    first.refresh_from_db()
    assert first.license == "unspecified"
    with pytest.raises(Conflict, match="never made twice"):
        engine.rerun_job(first.job)


@pytest.mark.django_db(transaction=True)
def test_the_command_writes_the_folder_and_refuses_an_open_round(release_world, tmp_path):
    out = tmp_path / "release"
    call_command("release_dataset", "--task", "nli", "--rounds", "0,1", "--out", str(out))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "README.md", "croissant.json", "data/dev.parquet", "data/train.parquet"]  # no test split by default
    release = Release.objects.get()
    assert release.rounds == [0, 1] and release.created_by is None and not release.test_split_released
    with pytest.raises(CommandError, match="Round 2 of nli is open"):
        call_command("release_dataset", "--task", "nli", "--rounds", "1,2", "--out", str(tmp_path / "other"))
    assert not (tmp_path / "other").exists()
    with pytest.raises(CommandError, match="Unknown task"):
        call_command("release_dataset", "--task", "nope", "--rounds", "1")
    with pytest.raises(CommandError, match="--rounds"):
        call_command("release_dataset", "--task", "nli", "--rounds", "one")
    with pytest.raises(CommandError, match="not empty"):
        call_command("release_dataset", "--task", "nli", "--rounds", "1", "--out", str(out))
    assert Release.objects.count() == 1

