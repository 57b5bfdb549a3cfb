"""The counters the pages read (``annotation.counters``): every write path keeps
them equal to a recount of the rows, a drifted one is found and repaired, and the pages
that show them cost the same whatever the number of examples."""

import random
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotation import counters, examples, serving, sessions, validation
from annotation.datasets import import_records
from annotation.models import AnnotationSession, Example, RoundCounts, Validation, WriterCounts
from annotation.stats import round_stats
from datafiles.readers import Record

pytestmark = pytest.mark.django_db


def account(name):
    return get_user_model().objects.create_user(name, password="pw-pw-pw-123",
                                                date_joined=timezone.now() - timedelta(days=30))


def write(task, writer, *, fooled, session=None, text="A statement"):
    """An example as ``create_example`` stores it (without asking a model)."""
    return Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=writer, session=session,
        provisional=bool(session and session.provisional), inputs={"statement": text},
        target={"label": "positive"}, fooled=fooled, prediction={"label": "negative" if fooled else "positive"})


def vote(user, example, label="correct", *, agree=True, session=None):
    serving.assign(example, user)
    validation.give_blind_answer(example.pk, user, example.target if agree else {"label": "negative"})
    return validation.validate_example(example.pk, user, label=label, session=session)


def no_drift():
    drifts = counters.reconcile()
    assert drifts == [], [str(d) for d in drifts]


def test_every_write_path_keeps_the_counters_equal_to_a_recount(demo_tasks, researcher):
    """A seeded random history through the services: writes, blind answers, decisions,
    a researcher's decisions and reversals, retractions, flags, an MTurk assignment
    written provisionally then confirmed, split moves and deletes. After each step a
    recount of the rows finds nothing to repair."""
    task = demo_tasks["sentiment"]
    rng = random.Random(42)
    writers = [account(f"w{i}") for i in range(3)]
    validators = [account(f"v{i}") for i in range(4)]
    hit = sessions.start_session(writers[0], task, mturk_assignment_id="ASSIGNCOUNT1",
                                 mode=AnnotationSession.Mode.CREATE, provisional=True)
    written = [write(task, rng.choice(writers), fooled=rng.choice([True, False, None])) for _ in range(12)]
    written += [write(task, writers[0], fooled=True, session=hit, text=f"paid {i}") for i in range(3)]
    no_drift()
    for step in range(60):
        example = Example.objects.get(pk=rng.choice(written).pk)
        action = rng.choice(["vote", "vote", "vote", "blind", "researcher", "retract", "flag", "unflag", "split"])
        try:
            if action == "vote":
                voter = rng.choice([v for v in validators if v.pk != example.annotator_id])
                vote(voter, example, rng.choice(["correct", "incorrect", "flagged"]), agree=rng.random() < 0.7)
            elif action == "blind":
                voter = rng.choice(validators)
                serving.assign(example, voter)
                validation.give_blind_answer(example.pk, voter, {"label": rng.choice(["positive", "negative"])})
            elif action == "researcher":
                validation.validate_example(example.pk, researcher, label=rng.choice(["correct", "incorrect"]))
            elif action == "retract":
                examples.retract_example(example, example.annotator)
            elif action == "flag":
                examples.flag_example(example, researcher, "look")
            elif action == "unflag":
                examples.unflag_example(example, researcher)
            elif action == "split":
                examples.move_to_split(example, rng.choice(["train", "dev", "test"]))
        except Exception as exc:  # a refusal (409/403) changes nothing; the recount says so
            assert getattr(exc, "message", None), exc
        no_drift()
        if step == 30:
            assert validation.confirm_session(hit) >= 0
            no_drift()
    examples.delete_examples(Example.objects.filter(pk__in=[e.pk for e in written[:4]]))
    no_drift()
    Example.objects.get(pk=written[5].pk).delete()
    no_drift()
    stats = round_stats(task.open_round())
    assert stats["collected"] == Example.objects.filter(task=task, source="annotation", retracted=False,
                                                        provisional=False).count() > 0
    assert stats["validations"] > 0 and stats["blind_answers"] > 0


def test_a_confirmed_mturk_assignment_is_collected_and_counted_from_then_on(demo_tasks):
    task = demo_tasks["sentiment"]
    worker, checker = account("worker"), account("checker")
    hit = sessions.start_session(worker, task, mturk_assignment_id="ASSIGNCOUNT2",
                                 mode=AnnotationSession.Mode.CREATE, provisional=True)
    paid = write(task, worker, fooled=True, session=hit)
    assert round_stats(task.open_round())["collected"] == 0  # a worker id typed into a URL moves no number
    assert serving.next_for(task, checker) is None  # and is not served to validators
    validation.confirm_session(hit)
    assert Example.objects.get(pk=paid.pk).provisional is False
    assert (round_stats(task.open_round())["collected"], round_stats(task.open_round())["fooled"]) == (1, 1)
    assert serving.next_for(task, checker).pk == paid.pk
    no_drift()


def test_imports_join_the_counters_in_bulk(demo_tasks):
    task = demo_tasks["sentiment"]
    records = [Record(line=i + 1, external_uid=f"imp{i}", inputs={"statement": f"imported {i}"},
                      target={"label": "positive"}, split=split, round=0)
               for i, split in enumerate(["train"] * 5 + ["dev"] * 2 + ["test"] * 3)]
    report = import_records(task, records)
    assert report.created == 10
    zero = task.rounds.get(number=0)
    assert counters.counts_of(zero)["usable_train"] >= 5
    assert counters.counts_of(zero)["collected"] == 0  # imported data is not collected
    no_drift()


def test_a_drifted_counter_is_reported_and_repaired(demo_tasks, annotator, capsys):
    task = demo_tasks["sentiment"]
    for i in range(3):
        write(task, annotator, fooled=i == 0)
    rnd = task.open_round()
    RoundCounts.objects.filter(round=rnd).update(collected=F("collected") + 5, fooled=0)
    WriterCounts.objects.filter(round=rnd, annotator=annotator).update(verified_fooled=2, record_decided=7)
    call_command("reconcile_counts", "--task", task.slug)
    out = capsys.readouterr().out
    assert f"sentiment round {rnd.number} collected: stored 8, counted 3 (drift +5)" in out
    assert f"sentiment round {rnd.number} fooled: stored 0, counted 1 (drift -1)" in out
    assert f"writer {annotator.pk} verified_fooled: stored 2, counted 0 (drift +2)" in out
    assert f"writer {annotator.pk} record_decided: stored 7, counted 0 (drift +7)" in out
    assert "4 counter(s) repaired" in out
    assert round_stats(rnd)["collected"] == 3 and round_stats(rnd)["fooled"] == 1
    call_command("reconcile_counts")
    assert "0 counter(s) repaired" in capsys.readouterr().out
    with pytest.raises(Exception, match="Unknown task 'nope'"):
        call_command("reconcile_counts", "--task", "nope")


def test_a_recount_waits_for_a_write_in_progress_and_loses_nothing(demo_tasks, annotator):
    """The recount locks the round's counter row: a write's counter change lands after
    the recount (and adds to the repaired value) or before it (and is in the recount)."""
    task = demo_tasks["sentiment"]
    write(task, annotator, fooled=True)
    rnd = task.open_round()
    drifts = counters.reconcile_round(rnd)
    assert drifts == []
    write(task, annotator, fooled=False)
    assert counters.counts_of(rnd)["collected"] == 2
    assert RoundCounts.objects.get(round=rnd).reconciled_at is not None


def test_the_pages_cost_the_same_with_five_or_fifty_examples(demo_tasks, annotator, anonymous):
    """Home, task page, rounds and round statistics: query counts do not grow with the data."""
    task = demo_tasks["sentiment"]
    writers = [account(f"writer{i}") for i in range(3)]
    paths = ["/", "/tasks/sentiment/", "/api/tasks/sentiment/rounds/",
             f"/api/tasks/sentiment/rounds/{task.open_round().number}/stats/"]
    from django.db import connection

    def costs():
        found = []
        for path in paths:
            with CaptureQueriesContext(connection) as queries:
                assert anonymous.get(path).status_code == 200, path
            found.append(len(queries.captured_queries))
        return found

    for i in range(5):
        write(task, writers[i % 3], fooled=i % 2 == 0)
    small = costs()
    for i in range(45):
        write(task, writers[i % 3], fooled=i % 2 == 0)
    assert costs() == small
    assert round_stats(task.open_round())["collected"] == 50


def test_round_statistics_list_the_top_writers_and_say_how_many_there_are(demo_tasks, settings, monkeypatch):
    from annotation import stats

    monkeypatch.setattr(stats, "ANNOTATORS_SHOWN", 2)
    task = demo_tasks["sentiment"]
    writers = [account(f"top{i}") for i in range(3)]
    for i, writer in enumerate(writers):
        for _ in range(i + 1):
            write(task, writer, fooled=True)
    shown = stats.round_stats(task.open_round(), identify=True)
    assert [row["username"] for row in shown["annotators"]] == ["top2", "top1"]  # most fooling first
    assert shown["annotators_total"] == 3


def test_a_validation_stored_counts_once_whatever_path_stores_it(demo_tasks, annotator):
    task = demo_tasks["sentiment"]
    example = write(task, annotator, fooled=True)
    checker = account("checker2")
    Validation.objects.create(example=example, validator=checker, blind_answer={"label": "positive"},
                              blind_agrees=True)
    counts = counters.counts_of(task.open_round())
    assert (counts["blind_answers"], counts["blind_agreeing"], counts["decisions"]) == (1, 1, 0)
    stored = Validation.objects.get(example=example, validator=checker)
    stored.label = "correct"
    stored.save()
    assert counters.counts_of(task.open_round())["decisions"] == 1
    stored.save()  # saved again unchanged: nothing moves
    assert counters.counts_of(task.open_round())["decisions"] == 1
    no_drift()
