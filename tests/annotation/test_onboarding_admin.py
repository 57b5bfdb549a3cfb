"""The onboarding records in the admin: the task's researchers see their tasks' records
and let a blocked worker try again; nobody else does; for an MTurk worker the task
block that failing gave is lifted on MTurk too."""

import pytest

from annotation import onboarding
from annotation.models import OnboardingRecord
from core.errors import Forbidden
from tests.annotation.test_onboarding import answers, take

pytestmark = pytest.mark.django_db

LIST = "/admin/annotation/onboardingrecord/"


def fail_twice(client, slug="sentiment"):
    take(client, slug, answers(slug, wrong={0, 1}))
    return take(client, slug, answers(slug, wrong={0, 1}))


def test_a_researcher_lists_the_records_and_lets_a_blocked_worker_try_again(
        with_onboarding, demo_tasks, client_for, annotator, researcher, other_researcher):
    assert fail_twice(client_for(annotator))["standing"]["blocked"]
    record = OnboardingRecord.objects.get(user=annotator)

    page = client_for(researcher).get(LIST, {"state": "blocked"})
    assert page.status_code == 200 and "annotator" in page.content.decode()
    assert "annotator" not in client_for(other_researcher).get(LIST).content.decode()  # not their task

    # Another task's researcher cannot lift it, through the admin or the service.
    client_for(other_researcher).post(LIST, {"action": "let_try_again", "_selected_action": [record.pk]})
    assert onboarding.is_blocked(demo_tasks["sentiment"], annotator)
    with pytest.raises(Forbidden):
        onboarding.let_try_again(demo_tasks["sentiment"], annotator, by=other_researcher)

    done = client_for(researcher).post(LIST, {"action": "let_try_again", "_selected_action": [record.pk]},
                                       follow=True)
    assert "1 worker may take the onboarding again" in done.content.decode()
    assert not onboarding.is_blocked(demo_tasks["sentiment"], annotator)
    assert take(client_for(annotator), "sentiment", answers("sentiment"))["standing"]["passed"]
    # A passed record has no block to lift: the action says so and changes nothing.
    assert onboarding.let_try_again(demo_tasks["sentiment"], annotator, by=researcher) is False
    assert OnboardingRecord.objects.get(pk=record.pk).passed_at is not None


def test_records_are_read_only_in_the_admin(with_onboarding, demo_tasks, client_for, annotator, superuser):
    take(client_for(annotator), "sentiment", answers("sentiment"))
    record = OnboardingRecord.objects.get(user=annotator)
    admin = client_for(superuser)
    assert admin.get(f"{LIST}add/").status_code == 403
    admin.post(f"{LIST}{record.pk}/change/", {"tries": 0, "passed_at": ""})
    assert OnboardingRecord.objects.get(pk=record.pk).passed_at is not None
    assert admin.post(f"{LIST}{record.pk}/delete/", {"post": "yes"}).status_code == 403
    assert OnboardingRecord.objects.filter(pk=record.pk).exists()
