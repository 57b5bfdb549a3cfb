"""The replay command, end to end on tiny real subsets (fast mode): it drives the
platform's own services and leaves every model registered with its evaluations."""

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from annotation.models import Example, Validation
from jobs.models import Job
from leaderboard.evaluation import has_finished_evaluation
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from replay.report import interface_problems
from tasks.models import Round, Task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def data_dir() -> Path:
    path = Path(settings.DYNABENCH_DATA_DIR or "/nonexistent")
    if not (path / "dynahate").is_dir() or not (path / "anli").is_dir():
        pytest.skip(f"the shared data sets are not at {path} (set DYNABENCH_DATA_DIR)")
    return path


@pytest.mark.parametrize("task, first_round, control, store", [("hate", "DynaHate R1", "static", "file"),
                                                                ("nli", "ANLI R1", None, "s3")])
def test_replay_smoke(tmp_path, capsys, request, task, first_round, control, store):
    """Hate with the file store; NLI with object storage (moto's S3 server): its models
    are registered by URL and its report is uploaded beside them."""
    data = data_dir()
    bucket = request.getfixturevalue("s3_store") if store == "s3" else None
    out = tmp_path / "report.json"
    call_command("replay", task=task, data_dir=str(data), mode="fast", limit=16, rounds=1, out=str(out),
                 epochs=1, static_epochs=1, job_timeout=600, control=control)
    report = json.loads(out.read_text())
    assert interface_problems(report) == []
    assert report["strategy"] == "cumulative" and report["seeds"] == [0]
    assert out.with_suffix(".md").read_text().count("|") > 10
    assert out.with_suffix(".svg").read_text().startswith("<svg")
    assert [r["number"] for r in report["rounds"]] == [0, 1]
    collection = report["rounds"][1]["collection"]
    assert collection["target"] == f"{task}-m0" and collection["submitted"] > 0
    assert collection["model_error_rate"] == pytest.approx(collection["fooled"] / collection["submitted"])
    for entry in report["rounds"]:
        assert set(entry["test"]) >= {report["rounds"][0]["name"], first_round}
        for value in entry["test"].values():
            assert value["ci_low"] <= value["accuracy"] <= value["ci_high"]
    gain = report["rounds"][1]["gain_over_previous"]
    assert gain["test_set"] == first_round and gain["ci_low"] <= gain["difference"] <= gain["ci_high"]

    replay_task = Task.objects.get(slug=f"{task}-replay-fast")
    # What the report says is what the platform stored.
    written = Example.objects.filter(task=replay_task, round__number=1, source=Example.Source.ANNOTATION)
    assert written.count() == collection["submitted"]
    assert written.filter(fooled=True).count() == collection["fooled"]
    assert not written.exclude(validation_status=Example.ValidationStatus.VERIFIED).exists()
    assert Validation.objects.filter(example__in=written, mode=Validation.Mode.OWNER).count() == written.count()
    models = list(ModelVersion.objects.filter(task=replay_task).order_by("pk"))
    names = [f"{task}-m0", f"{task}-m1"] + ([f"{task}-control-c1"] if control else [])
    assert [m.name for m in models] == names
    printed = capsys.readouterr().out
    if bucket:
        assert all(m.artifact_path == f"s3://{bucket}/store/artifacts/{m.sha256}" for m in models)
        assert f"; stored s3://{bucket}/store/replays/" in printed
    assert f"models trained and evaluated: {len(names)}/{len(names)} (100%)" in printed
    assert all(has_finished_evaluation(m) for m in models)
    assert Evaluation.objects.filter(model_version__in=models).count() == 2 * len(models)  # rounds 0 and 1
    assert not Evaluation.objects.filter(model_version__in=models, metrics__has_key="throughput").exists()
    assert models[1].parent == models[0]
    # M1 learnt round 1 plus as many rehearsed from round 0 (the cumulative strategy).
    counts = models[1].training_data["counts"]
    static_train = report["data"]["rounds"][0]["splits"]["train"]["count"]
    assert counts["rehearsal"] == {"0": min(collection["submitted"], static_train)} and counts["rounds"]["train"] > 0
    if control:
        c1 = models[2]
        assert c1.parent == models[0] and c1.training_data["control_for"] == f"{task}-m1"
        # As many training rows as M1, none of them adversarial: fresh static rows that M0 never saw.
        assert c1.training_data["counts"]["train"] == counts["rounds"]["train"] + counts["rehearsal"]["0"]
        assert report["controls"]["static"]["rounds"][1]["model"] == c1.name
        assert set(report["rounds"][1]["vs_control"]) >= {first_round, "HateCheck"}
    else:
        assert report["controls"] == {} and "vs_control" not in report["rounds"][1]
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


def test_a_test_row_the_importer_refuses_leaves_the_plan_for_every_model(tmp_path):
    """A test statement over the task's length limit is refused on import: no model is
    scored on it, so the report leaves it out of the accuracies and the reference lines."""
    from .test_replay_data import DYNAHATE_HEADER, dynahate_rows, make_hate_dir, write_csv

    base = make_hate_dir(tmp_path / "data")
    rows = dynahate_rows("test", 12)
    rows[0][1] = "far too long " * 100  # 1,300 characters: the hate task takes 1,000
    write_csv(base / "dynahate/db_test.csv", DYNAHATE_HEADER, rows)
    out = tmp_path / "report.json"
    call_command("replay", task="hate", data_dir=str(base), mode="fast", limit=12, rounds=1, out=str(out),
                 epochs=1, static_epochs=1, job_timeout=600)
    report = json.loads(out.read_text())
    r1 = report["rounds"][1]
    assert r1["test"]["DynaHate R1"]["num_examples"] == report["references"]["DynaHate R1"]["num_examples"] == 11
    assert report["rounds"][0]["test"]["DynaHate R1"]["num_examples"] == 11


def test_the_balanced_control_follows_m1s_recipe_with_the_rounds_label_shares(tmp_path):
    """Both controls on tiny made-up data: C(1) static and C(1) balanced each learn as many rows
    as M1; the balanced one's fresh rows have round 1's label shares, the static one's the pool's."""
    from collections import Counter

    from replay.data import build_plan

    from .test_replay_data import make_hate_dir

    base = make_hate_dir(tmp_path / "data", davidson=300)
    out = tmp_path / "report.json"
    call_command("replay", task="hate", data_dir=str(base), mode="fast", limit=12, rounds=1, out=str(out),
                 epochs=1, static_epochs=1, job_timeout=600, control=["static", "balanced"])
    report = json.loads(out.read_text())
    assert interface_problems(report) == [] and report["control_names"] == ["static", "balanced"]
    models = {m.name: m for m in ModelVersion.objects.filter(task__slug="hate-replay-fast")}
    static, balanced, m1 = models["hate-control-c1"], models["hate-balanced-control-c1"], models["hate-m1"]
    assert static.training_data["control"] == "static" and balanced.training_data["control"] == "balanced"
    assert balanced.training_data["counts"] == static.training_data["counts"]  # the same recipe, the same steps
    plan = build_plan("hate", base, mode="fast", limit=12)
    written = Counter(r.label for r in plan.rounds[1].train + plan.rounds[1].dev)
    fresh = balanced.training_data["fresh_labels"]
    total = sum(fresh.values())
    for label, n in written.items():  # the round's label shares, to within one row
        assert abs(fresh.get(label, 0) - total * n / sum(written.values())) <= 1
    assert static.training_data["fresh_labels"] != fresh  # Davidson's pool is two thirds not-hateful
    assert set(report["rounds"][1]["vs_controls"]) == {"static", "balanced"}
    assert set(report["rounds"][1]["vs_majority"]) >= {"DynaHate R1", "HateCheck"}
    assert m1.training_data["counts"]["rounds"]["train"] == static.training_data["counts"]["fresh"]
    assert "## Against the majority answer" in out.with_suffix(".md").read_text()


def test_several_seeds_write_each_seeds_report_and_a_pooled_summary(tmp_path):
    """--seeds 2: each seed's own report under seed-<n>/ beside --out, the pooled one at
    summary.json; the summary's per-seed values are the seeds' own reports' accuracies,
    and its accuracy is their mean. The committed runs' reader takes the summary."""
    from replay.results import load_reports, report_paths

    from .test_replay_data import make_hate_dir

    base = make_hate_dir(tmp_path / "data")
    out = tmp_path / "runs" / "hate-two" / "report.json"
    call_command("replay", task="hate", data_dir=str(base), mode="fast", limit=12, rounds=1, out=str(out),
                 epochs=1, static_epochs=1, job_timeout=600, seeds=2, seed=5)
    folder = out.parent
    assert not out.exists()
    summary = json.loads((folder / "summary.json").read_text())
    own = [json.loads((folder / f"seed-{s}" / "report.json").read_text()) for s in (5, 6)]
    assert summary["seeds"] == [5, 6] and [r["seeds"] for r in own] == [[5], [6]]
    assert interface_problems(summary) == [] and all(interface_problems(r) == [] for r in own)
    for i, entry in enumerate(summary["rounds"]):
        for name, stat in entry["test"].items():
            alone = [r["rounds"][i]["test"][name]["accuracy"] for r in own]
            assert stat["by_seed"] == pytest.approx(alone)
            assert stat["accuracy"] == pytest.approx(sum(alone) / 2)
    assert all((folder / f"seed-{s}" / "report.md").exists() for s in (5, 6))
    assert (folder / "summary.md").exists() and (folder / "summary.svg").exists()
    assert report_paths(tmp_path / "runs") == {"hate-two": folder / "summary.json"}
    assert load_reports(tmp_path / "runs")["hate-two"]["seeds"] == [5, 6]
    assert Task.objects.filter(slug__in=["hate-replay-fast-s5", "hate-replay-fast-s6"]).count() == 2
