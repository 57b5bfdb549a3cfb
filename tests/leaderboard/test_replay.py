"""The replay command, end to end on tiny real subsets (fast mode): it drives the
platform's own services and leaves every model registered with its evaluations."""

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from annotation.models import Example, Validation
from leaderboard.models import Evaluation
from leaderboard.services import has_finished_evaluation
from tasks.models import Job, ModelVersion, Round, Task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def data_dir() -> Path:
    path = Path(settings.DYNABENCH_DATA_DIR or "/nonexistent")
    if not (path / "dynahate").is_dir() or not (path / "anli").is_dir():
        pytest.skip(f"the shared data sets are not at {path} (set DYNABENCH_DATA_DIR)")
    return path


@pytest.mark.parametrize("task, first_round", [("hate", "DynaHate R1"), ("nli", "ANLI R1")])
def test_replay_smoke(tmp_path, task, first_round):
    out = tmp_path / "report.json"
    call_command("replay", task=task, data_dir=str(data_dir()), mode="fast", limit=16, rounds=1, out=str(out),
                 epochs=1, static_epochs=1, job_timeout=600)
    report = json.loads(out.read_text())
    assert out.with_suffix(".md").read_text().count("|") > 10
    assert out.with_suffix(".svg").read_text().startswith("<svg")
    assert [r["number"] for r in report["rounds"]] == [0, 1]
    collection = report["rounds"][1]["collection"]
    assert collection["target"] == f"{task}-m0" and collection["submitted"] > 0
    assert collection["model_error_rate"] == pytest.approx(collection["fooled"] / collection["submitted"])
    for entry in report["rounds"]:
        assert set(entry["evaluations"]) >= {report["rounds"][0]["name"], first_round}

    replay_task = Task.objects.get(slug=f"{task}-replay-fast")
    # What the report says is what the platform stored.
    written = Example.objects.filter(task=replay_task, round__number=1, source=Example.Source.ANNOTATION)
    assert written.count() == collection["submitted"]
    assert written.filter(fooled=True).count() == collection["fooled"]
    assert not written.exclude(validation_status=Example.ValidationStatus.VERIFIED).exists()
    assert Validation.objects.filter(example__in=written, mode=Validation.Mode.OWNER).count() == written.count()
    models = list(ModelVersion.objects.filter(task=replay_task).order_by("pk"))
    assert [m.name for m in models] == [f"{task}-m0", f"{task}-m1"]
    assert all(has_finished_evaluation(m) for m in models)
    assert Evaluation.objects.filter(model_version__in=models).count() == 4  # 2 models x rounds 0 and 1
    assert models[1].parent == models[0]
    # Round 0 never opened; round 1 was collected against M0 and closed when M1 was promoted.
    rounds = {r.number: r for r in replay_task.rounds.all()}
    assert rounds[0].status == Round.Status.CLOSED and rounds[0].opened_at is None
    assert list(rounds[1].target_models.all()) == [models[0]] and rounds[1].status == Round.Status.CLOSED
    assert list(rounds[2].target_models.all()) == [models[1]] and rounds[2].status == Round.Status.OPEN
    assert not Job.objects.filter(task=replay_task).exclude(status=Job.Status.SUCCEEDED).exists()
    if task == "hate":
        assert report["rounds"][1]["functional"]["HateCheck"]["num_examples"] > 0
        assert models[1].metrics["functional"]["HateCheck"]["num_examples"] > 0

    with pytest.raises(CommandError, match="exists already"):
        call_command("replay", task=task, data_dir=str(data_dir()), limit=16, rounds=1, out=str(out))


def test_replay_refuses_a_missing_data_dir(tmp_path):
    with pytest.raises(CommandError, match="data"):
        call_command("replay", task="nli", data_dir=str(tmp_path / "nothing"), out=str(tmp_path / "r.json"))
