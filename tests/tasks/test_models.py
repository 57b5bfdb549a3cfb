import pytest
from django.db import IntegrityError, transaction

from annotation.models import Example, Validation
from core.errors import Conflict
from registry.models import ModelVersion
from tasks.models import Context, Round, Task
from tasks.roles import is_mturk_worker, is_researcher
from tasks.services import add_contexts, close_round, open_round


def test_round_numbers_are_unique_per_task(demo_tasks):
    nli = demo_tasks["nli"]
    with pytest.raises(IntegrityError), transaction.atomic():
        Round.objects.create(task=nli, number=1)
    Round.objects.create(task=demo_tasks["qa"], number=2)  # other task, other numbers


def test_only_one_open_round_per_task(demo_tasks):
    nli = demo_tasks["nli"]
    with pytest.raises(IntegrityError), transaction.atomic():
        Round.objects.create(task=nli, number=2, status=Round.Status.OPEN)


def test_opening_a_round_closes_the_open_one(demo_tasks):
    nli = demo_tasks["nli"]
    second = Round.objects.create(task=nli, number=2)
    with pytest.raises(Conflict, match="no ready target model"):
        open_round(second)
    assert nli.open_round().number == 1  # refused: nothing changed
    model = ModelVersion.objects.create(task=nli, name="m", artifact_path="m", sha256="0" * 64)
    second.target_models.add(model)
    open_round(second)
    statuses = dict(nli.rounds.values_list("number", "status"))
    assert statuses == {1: "closed", 2: "open"}
    assert nli.rounds.get(number=1).closed_at is not None
    close_round(second)
    assert nli.open_round() is None
    with pytest.raises(Conflict, match="closed"):
        open_round(second)  # closed rounds stay closed
    draft = Round.objects.create(task=nli, number=3)
    with pytest.raises(Conflict, match="never opened"):
        close_round(draft)


def test_model_names_are_unique_per_task(demo_tasks):
    ModelVersion.objects.create(task=demo_tasks["nli"], name="r0", artifact_path="a", sha256="0" * 64)
    ModelVersion.objects.create(task=demo_tasks["qa"], name="r0", artifact_path="b", sha256="0" * 64)
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelVersion.objects.create(task=demo_tasks["nli"], name="r0", artifact_path="c", sha256="1" * 64)


def test_one_validation_per_example_and_validator(demo_tasks, annotator, second_annotator):
    nli = demo_tasks["nli"]
    example = Example.objects.create(
        task=nli, round=nli.open_round(), annotator=annotator,
        inputs={"hypothesis": "x"}, target={"label": "neutral"},
    )
    Validation.objects.create(example=example, validator=second_annotator, label="correct")
    with pytest.raises(IntegrityError), transaction.atomic():
        Validation.objects.create(example=example, validator=second_annotator, label="incorrect")
    assert Validation.objects.filter(example=example).count() == 1


def test_context_external_ids_are_unique_per_task_and_adding_twice_is_harmless(demo_tasks):
    nli, qa = demo_tasks["nli"], demo_tasks["qa"]
    rows = [{"external_id": "p-1", "fields": {"premise": "A cat sat."}}]
    assert add_contexts(nli, rows) == (1, 0)
    assert add_contexts(nli, rows) == (0, 1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Context.objects.create(task=nli, external_id="p-1", fields={"premise": "dup"})
    Context.objects.create(task=qa, external_id="p-1", fields={"title": "t", "passage": "p"})
    # Blank external ids don't collide.
    Context.objects.create(task=nli, fields={"premise": "one"})
    Context.objects.create(task=nli, fields={"premise": "two"})


def test_add_contexts_in_batches_skips_what_the_task_or_the_rows_have(demo_tasks, monkeypatch):
    from tasks import services

    nli, round1 = demo_tasks["nli"], demo_tasks["nli"].open_round()
    monkeypatch.setattr(services, "CONTEXT_BATCH_SIZE", 3)
    Context.objects.create(task=nli, external_id="c4", fields={"premise": "Already here."})
    rows = [{"external_id": f"c{i}", "fields": {"premise": f"P {i}."}} for i in range(8)]
    rows += [{"external_id": "c1", "fields": {"premise": "Repeated."}}, {"fields": {"premise": "No id."}}]
    assert services.add_contexts(nli, rows, round=round1) == (8, 2)
    assert Context.objects.get(task=nli, external_id="c1").fields == {"premise": "P 1."}
    assert Context.objects.get(task=nli, external_id="c4").round is None  # left as it was
    assert Context.objects.filter(round=round1).count() == 8
    assert services.add_contexts(nli, rows, round=round1) == (1, 9)  # only the row without an id is new


def test_context_fields_must_match_the_task_config(demo_tasks):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as exc_info:
        add_contexts(demo_tasks["nli"], [{"fields": {"passage": "wrong field"}}])
    assert "missing ['premise']" in str(exc_info.value)
    with pytest.raises(ValidationError, match="Must not be empty"):
        add_contexts(demo_tasks["nli"], [{"fields": {"premise": "   "}}])  # the model reads it
    with pytest.raises(ValidationError, match="Must be text"):
        add_contexts(demo_tasks["nli"], [{"fields": {"premise": 7}}])
    assert not Context.objects.filter(task=demo_tasks["nli"], fields__premise="   ").exists()


def test_ownership_and_roles(demo_tasks, researcher, other_researcher, superuser, annotator, second_annotator,
                            mturk_worker):
    nli, qa = demo_tasks["nli"], demo_tasks["qa"]
    nli.owners.add(annotator)
    assert is_researcher(researcher, nli) and is_researcher(researcher, qa)  # owns all four
    assert not is_researcher(other_researcher, nli)  # staff, but owns none: not theirs
    assert is_researcher(superuser, qa)
    assert is_researcher(annotator, nli) and not is_researcher(annotator, qa)  # owner of nli only
    assert not is_researcher(second_annotator, nli)
    assert is_mturk_worker(mturk_worker) and not is_mturk_worker(annotator)


def test_hidden_tasks_are_visible_to_their_researchers_only(demo_tasks, researcher, other_researcher, annotator,
                                                          second_annotator):
    from django.contrib.auth.models import AnonymousUser

    hate = demo_tasks["hate"]
    hate.is_hidden = True
    hate.save()
    hate.owners.add(annotator)
    assert "hate" not in Task.objects.visible_to(AnonymousUser()).values_list("slug", flat=True)
    assert "hate" not in Task.objects.visible_to(second_annotator).values_list("slug", flat=True)
    assert "hate" in Task.objects.visible_to(annotator).values_list("slug", flat=True)
    assert "hate" in Task.objects.visible_to(researcher).values_list("slug", flat=True)
    assert "hate" not in Task.objects.visible_to(other_researcher).values_list("slug", flat=True)
