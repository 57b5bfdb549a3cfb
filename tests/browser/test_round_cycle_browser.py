"""A researcher's whole round cycle in the admin, in headless Chromium.

The researcher is staff but not a superuser, and owns only the sentiment task:

    upload contexts to draft round 2 -> set its target, open it -> annotators write,
    the researcher validates -> train the next model (admin action, intermediate form)
    -> its job page -> its evaluation beside the current target -> promote it:
    round 3 opens with it as the target, round 2 closes.

Plus the refusal: a model without a finished evaluation is not promoted, and the
admin says why. Jobs run inline here (``JOBS_RUN_INLINE``): the live server's request
thread trains the model, so the training is tiny (a handful of examples, head only,
one epoch). Uses ``browser_page`` from tests/browser/conftest.py.
"""

import json

import pytest
from django.urls import NoReverseMatch, reverse

from annotation.models import Example
from jobs.models import Job
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from tasks.models import Context, Round

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROUND_2_CONTEXTS = [
    {"external_id": "r2-kitchen", "tag": "round-2", "fields": {"prompt": "The kitchen closed an hour early."}},
    {"external_id": "r2-view", "tag": "round-2", "fields": {"prompt": "Our table looked over the harbour."}},
    {"external_id": "r2-bill", "tag": "round-2", "fields": {"prompt": "The bill came with a handwritten note."}},
]
WRITTEN = [("Not exactly terrible, I suppose.", "positive"), ("Oh great, another hour-long wait.", "negative"),
           ("I would hardly call it a disappointment.", "positive"),
           ("Lovely decor, shame about the food.", "negative")]
# The researchers' test set for round 1 (imported, so verified): what evaluations score.
TEST_SET = [("I loved every minute of it.", "positive"), ("A dull, tired mess.", "negative"),
            ("Wonderful staff and great food!", "positive"), ("Never again, awful service.", "negative")]


@pytest.fixture
def cycle_researcher(django_user_model):
    from tasks.roles import make_researcher
    from tests.conftest import PASSWORD

    return make_researcher(django_user_model.objects.create_user("cycle_researcher", password=PASSWORD))


@pytest.fixture
def sentiment(demo_tasks, tiny_artifact, cycle_researcher):
    """The sentiment task: round 1 open with model r1 as its target, model r2 ready for
    round 2, a small verified test set in round 1; owned by ``cycle_researcher``."""
    from registry.services import register_model

    task = demo_tasks["sentiment"]
    task.owners.add(cycle_researcher)
    artifact = tiny_artifact("sentiment")
    task.open_round().target_models.add(register_model(task, artifact, name="sentiment-r1"))
    register_model(task, artifact, name="sentiment-r2")
    for i, (text, label) in enumerate(TEST_SET):
        Example.objects.create(task=task, round=task.open_round(), split="test", source="import",
                               validation_status="verified", external_uid=f"test-{i}",
                               inputs={"statement": text}, target={"label": label})
    return task


def run_action(page, base, changelist, pks, action):
    """Tick ``pks`` on an admin change list and run ``action`` (its function name)."""
    page.goto(f"{base}{reverse(changelist)}")
    for pk in pks:
        page.check(f"input[name=_selected_action][value='{pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def message(page, level):
    return page.locator(f"ul.messagelist li.{level}").all_inner_texts()


def test_a_researcher_runs_a_round_cycle_in_the_admin(live_server, sentiment, cycle_researcher, annotator,
                                                      client_for, browser_page, sign_in):
    from tests.conftest import PASSWORD

    page, errors = browser_page
    base, task = live_server.url, sentiment
    r1_model = ModelVersion.objects.get(task=task, name="sentiment-r1")
    r2_model = ModelVersion.objects.get(task=task, name="sentiment-r2")
    sign_in(page, base, cycle_researcher.username, PASSWORD, "/admin/")
    assert not cycle_researcher.is_superuser

    # A draft round 2, made in the admin.
    page.goto(f"{base}{reverse('admin:tasks_round_add')}")
    page.select_option("#id_task", label=task.name)
    page.fill("#id_number", "2")
    page.click("input[name=_continue]")
    page.wait_for_selector("ul.messagelist li.success")
    round2 = Round.objects.get(task=task, number=2)
    assert round2.status == Round.Status.DRAFT
    change_round2 = f"{base}{reverse('admin:tasks_round_change', args=[round2.pk])}"
    assert page.url == change_round2

    # (a) Contexts for round 2.
    try:
        upload_url = reverse("admin:tasks_round_upload_contexts", args=[round2.pk])
    except NoReverseMatch:
        upload_url = None
    if upload_url and page.locator("a:has-text('Upload contexts')").count():
        page.click("a:has-text('Upload contexts')")
        page.wait_for_url(f"{base}{upload_url}")
        page.set_input_files("input[name=file]", files=[{
            "name": "round2.jsonl", "mimeType": "application/jsonl",
            "buffer": "".join(json.dumps(row) + "\n" for row in ROUND_2_CONTEXTS).encode()}])
        page.click("#upload_contexts_form input[type=submit]")
        page.wait_for_url(change_round2)
        assert "Added 3 contexts" in " ".join(message(page, "success"))
    else:
        # TODO(upload-contexts): the round page's "Upload contexts" admin view
        # (admin:tasks_round_upload_contexts, RoundAdmin.upload_contexts_view) is not on
        # this branch yet; until it is merged the branch above is skipped and the contexts
        # come from the service. Once merged, the branch above runs and this one is dead.
        from tasks.services import add_contexts

        add_contexts(task, ROUND_2_CONTEXTS, round=round2)
    contexts = list(Context.objects.filter(task=task, round=round2).order_by("pk"))
    assert [c.external_id for c in contexts] == [row["external_id"] for row in ROUND_2_CONTEXTS]

    # (b) Its target, in the change form; then open it with the admin action.
    page.goto(change_round2)
    page.select_option("#id_target_models_from", label=str(r2_model))
    page.click("#id_target_models_add")
    page.click("input[name=_save]")
    page.wait_for_selector("ul.messagelist li.success")
    assert list(round2.target_models.all()) == [r2_model]
    run_action(page, base, "admin:tasks_round_changelist", [round2.pk], "open_rounds")
    page.wait_for_selector("ul.messagelist li.success")
    assert message(page, "success") == ["Opened: 1."]
    assert task.open_round() == round2
    assert Round.objects.get(task=task, number=1).status == Round.Status.CLOSED

    # The refusal: a model with no finished evaluation is not promoted, and the admin says why.
    run_action(page, base, "admin:registry_modelversion_changelist", [r1_model.pk], "promote_1")
    page.wait_for_selector("ul.messagelist li.error")
    [refusal] = message(page, "error")
    assert "sentiment-r1 has no finished evaluation; evaluate it first" in refusal
    assert task.open_round() == round2 and task.rounds.count() == 2

    # (c) Collect: an annotator writes on round 2's contexts; the researcher (an owner)
    # validates, which decides at once. Only verified examples train the next model.
    writer, owner = client_for(annotator), client_for(cycle_researcher)
    for context, (text, label) in zip(contexts * 2, WRITTEN, strict=False):
        written = writer.post(f"/api/tasks/{task.slug}/examples/", {
            "context": context.pk, "inputs": {"statement": text}, "target": {"label": label}}, format="json")
        assert written.status_code == 201, written.content
        decided = owner.post(f"/api/examples/{written.json()['id']}/validations/", {"label": "correct"},
                             format="json")
        assert decided.status_code == 201, decided.content
        assert decided.json()["example"]["validation_status"] == "verified"
    assert Example.objects.filter(round=round2, validation_status="verified").count() == len(WRITTEN)

    # (d) Train the next model: the Task admin's action and its intermediate form.
    page.goto(f"{base}{reverse('admin:tasks_task_changelist')}")
    assert page.locator("#result_list tbody tr").count() == 1  # only the task this researcher owns
    run_action(page, base, "admin:tasks_task_changelist", [task.pk], "train_next_model")
    page.wait_for_selector("input[name=apply]")
    assert page.locator("#content h1").inner_text() == "Train the next target model"
    page.select_option("#id_selection", "verified")
    page.select_option("#id_mode", "head")
    page.fill("#id_epochs", "1")
    page.fill("#id_name", "r3-candidate")
    # The job runs inline in the request thread: the answer comes once it has trained.
    with page.expect_navigation(timeout=300_000):
        page.click("input[name=apply]")
    [queued] = message(page, "success")
    train_job = Job.objects.get(task=task, kind=Job.Kind.TRAIN_MODEL)
    assert queued == f"{task.name}: training job #{train_job.pk} queued."
    page.click(f"ul.messagelist a:has-text('#{train_job.pk}')")
    page.wait_for_url(f"{base}/jobs/{train_job.pk}/")
    # The page refreshes itself every 5 s while the job is active.
    page.wait_for_selector("dd.status-succeeded", timeout=300_000)
    assert page.locator("meta[http-equiv=refresh]").count() == 0
    assert page.locator("progress").get_attribute("value") == "100"
    assert "training on" in page.locator("pre.log").inner_text()
    candidate = ModelVersion.objects.get(task=task, name="r3-candidate")
    assert page.locator("dl.job").inner_text().count("r3-candidate") == 1
    assert candidate.training_data["train"]["count"] + candidate.training_data["dev"]["count"] == len(WRITTEN)

    # (e) Evaluate: the training job queued the candidate's evaluation; the researcher
    # evaluates the current target too, then reads them side by side.
    evaluation_job = Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=candidate.pk)
    assert evaluation_job.status == Job.Status.SUCCEEDED, evaluation_job.error
    run_action(page, base, "admin:registry_modelversion_changelist", [r2_model.pk], "evaluate_models")
    page.wait_for_selector("ul.messagelist li.success")
    assert message(page, "success") == ["Evaluation queued: 1."]
    assert Evaluation.objects.filter(model_version=r2_model, round__number=1).exists()
    page.goto(f"{base}{reverse('admin:registry_modelversion_change', args=[candidate.pk])}")
    table = page.locator(".field-evaluations_vs_target")
    assert "evaluation finished" in table.inner_text()
    # text_content: the admin's CSS shows table heads in capitals.
    assert table.locator("thead th").all_text_contents()[1:] == ["r3-candidate", "sentiment-r2 (target)"]
    [row] = table.locator("tbody tr").all()
    assert row.locator("th").text_content() == "round 1"
    for cell in row.locator("td").all_inner_texts():
        assert cell.endswith(f"({len(TEST_SET)})") and 0 <= float(cell.split()[0]) <= 1

    # (f) Promote: round 3 opens with the candidate as its target; round 2 closes.
    run_action(page, base, "admin:registry_modelversion_changelist", [candidate.pk], "promote_1")
    page.wait_for_selector("ul.messagelist li.success")
    assert message(page, "success") == ["Promoted; the next round is open: 1."]
    page.goto(f"{base}{reverse('admin:tasks_round_changelist')}")
    statuses = {row.locator("th").text_content(): row.locator("td.field-status").text_content()
                for row in page.locator("#result_list tbody tr").all()}
    assert statuses == {"sentiment round 1": "Closed", "sentiment round 2": "Closed", "sentiment round 3": "Open"}
    page.goto(f"{base}/tasks/{task.slug}/")
    round3 = page.locator("table.rounds tbody tr", has=page.locator("th", has_text="3"))
    assert round3.locator("td").nth(0).inner_text() == "Open"
    assert round3.locator("td").nth(1).inner_text() == "r3-candidate"
    assert page.locator("a:has-text('Write examples for round 3')").count() == 1
    assert list(task.open_round().target_models.all()) == [candidate]
    assert errors == []
