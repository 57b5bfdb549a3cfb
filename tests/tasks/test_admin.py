import json

import pytest
from django.urls import reverse

from annotation.models import Example, Validation
from crowd.models import WorkerIdentity
from leaderboard.models import ModelVersion
from tasks.models import Context, Job, Round, Task

ALL_MODELS = [Task, Round, Context, Job, Example, Validation, ModelVersion, WorkerIdentity]


@pytest.fixture
def populated(demo_tasks, annotator, second_annotator):
    nli = demo_tasks["nli"]
    context = Context.objects.create(task=nli, fields={"premise": "<b>bold</b> premise"})
    example = Example.objects.create(
        task=nli, round=nli.open_round(), context=context, annotator=annotator,
        inputs={"hypothesis": "A <script>alert(1)</script> hypothesis 😀"}, target={"label": "neutral"},
        fooled=True,
    )
    Validation.objects.create(example=example, validator=second_annotator, label="correct")
    ModelVersion.objects.create(task=nli, name="r0", artifact_path="nli/r0", sha256="ab" * 32)
    Job.objects.create(kind=Job.Kind.HEALTH_CHECK, task=nli)
    return example


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_model_is_registered_and_renders_for_researchers(populated, client, researcher, mturk_worker, model):
    client.force_login(researcher)
    meta = model._meta
    changelist = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
    assert changelist.status_code == 200
    obj = model.objects.first()
    change = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk]))
    assert change.status_code == 200
    # Search and filters work without errors.
    assert client.get(changelist.request["PATH_INFO"] + "?q=a").status_code == 200


def test_admin_refuses_non_staff_and_anonymous(client, annotator):
    url = reverse("admin:tasks_task_changelist")
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(annotator)
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_admin_shows_a_clear_error_for_a_bad_config(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("admin:tasks_task_add"), {
        "name": "Broken", "slug": "broken", "task_type": "classification",
        "config": json.dumps({"context_fields": [], "input_fields": [{"name": "text"}],
                              "model_inputs": ["text"], "labels": [{"name": "one"}]}),
        "rounds-TOTAL_FORMS": "0", "rounds-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200  # the form again, with the error
    assert "a classification task needs at least two labels" in response.content.decode()
    assert not Task.objects.filter(slug="broken").exists()


def test_export_selected_examples_as_jsonl(populated, client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("admin:annotation_example_changelist"), {
        "action": "export_jsonl", "_selected_action": [populated.pk],
    })
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["uid"] == str(populated.uid)
    assert record["task"] == "nli" and record["round"] == 1
    assert record["inputs"]["hypothesis"] == "A <script>alert(1)</script> hypothesis 😀"
    assert record["context"]["fields"] == {"premise": "<b>bold</b> premise"}
    assert record["validation"] == {"status": "pending", "correct": 0, "incorrect": 0, "flagged": 0}
    assert record["annotator"].startswith("a-") and "annotator" not in record["annotator"]
    assert str(populated.annotator_id) != record["annotator"][2:]


def test_admin_change_page_escapes_user_text(populated, client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("admin:annotation_example_change", args=[populated.pk])).content.decode()
    assert "<script>alert(1)</script>" not in page
