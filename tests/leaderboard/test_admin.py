"""The round loop's admin: the train-next form, refusals by name, the evaluation table."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from annotation.models import Example
from jobs.models import Job
from registry.models import ModelVersion
from registry.services import register_model

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
    assert set(form.context["form"].fields) == {"selection", "mode", "from_parent", "rounds", "epochs", "name",
                                                "allow_no_new_examples"}

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
    content = client.get(reverse("admin:registry_modelversion_change", args=[model.pk])).content.decode()
    assert "No evaluation yet: use the action" in content
    assert "<b>bold</b>" not in content and "&lt;b&gt;bold&lt;/b&gt;" in content
    assert ModelVersion.objects.count() == 1


def test_the_submissions_list_shows_uploads_only_with_their_evaluation_and_hides_them_on_request(
        demo_tasks, tiny_artifact, client, researcher, annotator, other_researcher):
    from django.contrib.auth.models import Group, Permission

    from jobs.engine import create_job
    from tasks.roles import RESEARCHERS_GROUP

    task = demo_tasks["sentiment"]
    trained = register_model(task, tiny_artifact("sentiment"), name="trained-here")
    sent = [register_model(task, tiny_artifact("sentiment"), name=f"upload-{i}", user=annotator) for i in range(3)]
    ModelVersion.objects.filter(pk__in=[m.pk for m in sent]).update(submitted=True)
    jobs = {m.pk: create_job(Job.Kind.EVALUATE_MODEL, params={"model_version": m.pk, "rounds": None}, task=task)
            for m in sent[:2]}
    Job.objects.filter(pk=jobs[sent[0].pk].pk).update(status=Job.Status.RUNNING, progress=40)
    newer = create_job(Job.Kind.EVALUATE_MODEL, params={"model_version": sent[1].pk, "rounds": None}, task=task)

    # A group made before the submissions list existed lacks its permission: the migrate
    # that creates it grants it; a permission an admin took away stays away.
    group = Group.objects.get(name=RESEARCHERS_GROUP)
    new = Permission.objects.get(codename="view_submission")
    taken = Permission.objects.get(codename="delete_evaluation")
    group.permissions.remove(new, taken)
    from django.apps import apps

    from tasks import apps as task_apps

    task_apps._known["default"] = set(Permission.objects.exclude(pk=new.pk).values_list("pk", flat=True))
    try:
        task_apps._grant_new_permissions(apps.get_app_config("leaderboard"))
    finally:
        task_apps._known.clear()
    assert group.permissions.filter(pk=new.pk).exists() and not group.permissions.filter(pk=taken.pk).exists()

    client.force_login(researcher)
    url = reverse("admin:leaderboard_submission_changelist")
    with_queries = client.get(url)
    page = with_queries.content.decode()
    assert with_queries.status_code == 200 and "trained-here" not in page
    assert all(f"upload-{i}" in page for i in range(3))
    assert "Running (40%)" in page and f"#{newer.pk} Queued" in page and "none yet" in page
    from django.core.cache import cache

    from leaderboard.board import _version_key, board_json

    board_json(task)  # a cached public board, under the task's current version
    cached = cache.get(_version_key(task.pk))
    assert cached is not None
    response = client.post(url, {"action": "make_private", ACTION_CHECKBOX_NAME: [sent[0].pk, sent[1].pk]},
                           follow=True)
    assert "2 submission(s) made private." in [str(m) for m in response.context["messages"]]
    assert cache.get(_version_key(task.pk)) != cached  # every cached board of the task was dropped
    assert list(ModelVersion.objects.filter(is_public=False).order_by("pk")) == sent[:2]
    assert trained.is_public

    client.force_login(other_researcher)  # not a researcher of this task: none of its submissions
    page = client.get(url).content.decode()
    assert "upload-0" not in page


def test_a_staff_member_who_may_only_view_submissions_cannot_change_their_visibility(
        demo_tasks, tiny_artifact, client, annotator, django_user_model):
    from django.contrib.auth.models import Permission

    task = demo_tasks["sentiment"]
    upload = register_model(task, tiny_artifact("sentiment"), name="private-upload", user=annotator)
    ModelVersion.objects.filter(pk=upload.pk).update(submitted=True, is_public=False)
    viewer = django_user_model.objects.create_user("viewer", password="x" * 20, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_submission"))
    task.owners.add(viewer)
    client.force_login(viewer)
    url = reverse("admin:leaderboard_submission_changelist")
    assert "private-upload" in client.get(url).content.decode()  # they may look
    client.post(url, {"action": "make_public", ACTION_CHECKBOX_NAME: [upload.pk]}, follow=True)
    upload.refresh_from_db()
    assert upload.is_public is False  # but not publish someone's private model
