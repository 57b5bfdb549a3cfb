"""The examples list in a browser: pick a task, then one of its rounds, and export what
the list shows; the job's page offers the file."""

import os
from pathlib import Path

import pytest

from annotation.models import Example
from tasks.models import Round
from tests.conftest import PASSWORD


def shoot(page, name):
    """A screenshot where DYNABENCH_SCREENSHOTS names a folder, for a person to look at."""
    if os.environ.get("DYNABENCH_SCREENSHOTS"):
        page.screenshot(path=os.path.join(os.environ["DYNABENCH_SCREENSHOTS"], name), full_page=True)


@pytest.mark.browser
def test_filter_by_task_and_round_then_export_the_list(live_server, demo_tasks, researcher, annotator, browser_page,
                                                       sign_in, settings, tmp_path):
    settings.STORAGES = {**settings.STORAGES, "job_files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path}}}
    nli = demo_tasks["nli"]
    rnd = nli.rounds.get(number=1)
    Round.objects.create(task=nli, number=2, status=Round.Status.DRAFT)  # two rounds to choose from
    Example.objects.bulk_create([Example(task=nli, round=rnd, annotator=annotator, inputs={"hypothesis": f"h {i}"},
                                         target={"label": "neutral"}) for i in range(120)])
    page, errors = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, live_server.url, researcher.username, PASSWORD,
            f"/admin/annotation/example/?task__id__exact={nli.pk}")
    page.click("#changelist-filter >> text=Round 1")
    page.wait_for_url(f"**round__id__exact={rnd.pk}**")
    shoot(page, "export-list.png")
    page.click("text=Export these examples…")
    shoot(page, "export-form.png")
    assert page.locator("#id_task").input_value() == str(nli.pk)
    assert page.locator("#id_round").input_value() == str(rnd.pk)
    assert page.locator("#id_retracted").input_value() == "exclude"
    page.click("input[type=submit][value=Export]")
    page.wait_for_url("**/jobs/*/")
    text = page.inner_text("main")
    assert "Succeeded" in text and "120 examples: round 1; retracted and flagged left out" in text
    with page.expect_download() as download:
        page.click("a.job-file")
    lines = Path(download.value.path()).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 121 and lines[0].startswith("uid,external_uid,task,round,")
    shoot(page, "export-job.png")
    assert errors == []
