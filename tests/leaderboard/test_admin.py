"""The round loop's admin: the train-next form, refusals by name, the evaluation table."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from annotation.models import Example
from tasks.models import Job, ModelVersion
from tasks.registry import register_model

pytestmark = pytest.mark.django_db


def test_the_train_form_and_its_refusals_name_the_problem(demo_tasks, client, researcher):
    task = demo_tasks["sentiment"]
    Example.objects.create(task=task, round=task.open_round(), source="import", validation_status="verified",
                           external_uid="t-1", inputs={"statement": "Fine."}, target={"label": "positive"})
    client.force_login(researcher)
    url = reverse("admin:tasks_task_changelist")
    selected = {"action": "train_next_model", ACTION_CHECKBOX_NAME: [task.pk]}
    form = client.post(url, selected)
    assert form.status_code == 200 and 'name="apply"' in form.content.decode()
    assert set(form.context["form"].fields) == {"selection", "mode", "from_parent", "rounds", "epochs", "name"}

    response = client.post(url, {**selected, "apply": "1", "selection": "verified", "mode": "head", "epochs": 1,
                                 "rounds": "9"}, follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert message == "Sentiment Analysis: rounds: Task sentiment has no round(s) [9]."
    response = client.post(url, {**selected, "apply": "1", "selection": "verified", "mode": "head", "epochs": 1,
                                 "rounds": "1, x"})
    assert response.status_code == 200 and "Write round numbers separated by commas" in response.content.decode()
    assert not Job.objects.exists()


def test_the_evaluation_table_is_escaped_and_says_when_there_is_none(demo_tasks, tiny_artifact, client,
                                                                     researcher):
    task = demo_tasks["sentiment"]
    model = register_model(task, tiny_artifact("sentiment"), name="<b>bold</b>")
    client.force_login(researcher)
    content = client.get(reverse("admin:tasks_modelversion_change", args=[model.pk])).content.decode()
    assert "No evaluation yet: use the action" in content
    assert "<b>bold</b>" not in content and "&lt;b&gt;bold&lt;/b&gt;" in content
    assert ModelVersion.objects.count() == 1
