"""Fair pay, measured (``crowd.pay``): the median time per assignment and the effective
hourly pay from the stored times of submitted assignments, the estimate for a new
batch on the publish form, and the floor it warns below (or, by setting, refuses)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation import validation
from annotation.models import Example
from crowd import bonuses, pay, sync
from crowd.models import Assignment, Batch
from tests.crowd.test_crowd_admin import PUBLISH
from tests.crowd.test_crowd_flow import do_one_assignment, make_batch

pytestmark = pytest.mark.django_db
OTHER = "A3WORKERTWO88"


@pytest.fixture
def crowd(crowd, settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("1000.00")
    settings.DYNABENCH_MIN_HOURLY_PAY = Decimal("7.25")
    settings.DYNABENCH_REFUSE_BELOW_MIN_PAY = False
    return crowd


def timed(assignment, minutes):
    """The assignment took ``minutes`` from its acceptance to MTurk's SubmitTime."""
    start = timezone.now() - timedelta(hours=2)
    Assignment.objects.filter(pk=assignment.pk).update(accepted_at=start,
                                                       submitted_at=start + timedelta(minutes=minutes))


@pytest.fixture
def paid_batch(live_tasks, crowd, client, researcher):
    """Two approved assignments of one writing batch: 6 minutes with a $0.25 bonus paid
    ($0.75 / 0.1 h = $7.50/h), 12 minutes with none yet ($0.50 / 0.2 h = $2.50/h)."""
    batch = make_batch(live_tasks["sentiment"])
    first = do_one_assignment(client, crowd, batch)
    second = do_one_assignment(client, crowd, batch, worker=OTHER, text="Another film, another day.")
    assert sync.sync().approved == 2
    timed(first, 6)
    timed(second, 12)
    for example in Example.objects.filter(session=first.session):
        validation.validate_example(example.pk, researcher, label="correct")
    assert bonuses.pay_bonuses().paid == 1
    return batch


def test_the_hourly_pay_is_computed_from_the_stored_timings(paid_batch):
    found = pay.batch_pay(paid_batch)
    assert found.timed == 2 and found.median_seconds == 9 * 60
    assert found.paid_timed == 2 and found.median_hourly == Decimal("5.00")  # median of $7.50 and $2.50
    # An assignment not submitted, or with no submit time, is not timed.
    Assignment.objects.filter(hit__batch=paid_batch).update(submitted_at=None, finished_at=None)
    assert pay.batch_pay(paid_batch).timed == 0 and pay.batch_pay(paid_batch).median_hourly is None


def test_the_admin_shows_each_batchs_median_time_and_hourly_pay(paid_batch, superuser, client):
    client.force_login(superuser)
    listing = client.get(reverse("admin:crowd_batch_changelist")).content.decode()
    assert "9.0 min" in listing and "$5.00/h" in listing and "below-floor" in listing
    page = client.get(reverse("admin:crowd_batch_change", args=[paid_batch.pk])).content.decode()
    assert "median 9.0 min per assignment over 2 submitted" in page and "$5.00/h" in page


def test_the_publish_form_estimates_from_earlier_batches_and_warns_below_the_floor(paid_batch, superuser, client):
    task = paid_batch.task
    estimate = pay.estimate(task, "create")
    assert estimate.samples == 2 and estimate.median_seconds == 9 * 60
    assert estimate.bonus_examples_per_assignment == 1.0  # the one settled assignment paid one example
    assert estimate.hourly_for(Decimal("0.50"), Decimal("0.25")) == Decimal("5.00")
    assert estimate.reward_for_floor(Decimal("0.25")) == Decimal("0.84")  # 7.25 * 0.15 h - 0.25, rounded up
    client.force_login(superuser)
    form = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert 'id="publish-pay"' in form and "9.0 min" in form and "DYNABENCH_MIN_HOURLY_PAY" in form
    batches = Batch.objects.count()
    warned = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk})
    html = warned.content.decode()
    assert warned.status_code == 200 and 'id="low-pay-warning"' in html and "$5.00" in html and "$0.84" in html
    assert Batch.objects.count() == batches  # nothing published before the confirmation
    confirmed = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk,
                                                                   "accept_low_pay": "on"})
    assert confirmed.status_code == 302 and Batch.objects.count() == batches + 1
    fair = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk, "reward": "1.00"})
    assert fair.status_code == 302 and Batch.objects.count() == batches + 2  # $1.25 / 0.15 h = $8.33/h


def test_a_superuser_setting_makes_the_service_refuse_a_batch_below_the_floor(paid_batch, settings, superuser,
                                                                              client):
    settings.DYNABENCH_REFUSE_BELOW_MIN_PAY = True
    task = paid_batch.task
    batches = Batch.objects.count()
    with pytest.raises(pay.PayBelowFloor) as refused:
        make_batch(task)  # $0.50 + $0.25 at 9 minutes: $5.00/h
    assert refused.value.code == "pay_below_floor" and "$7.25/hour" in refused.value.message
    assert "$0.84" in refused.value.message and Batch.objects.count() == batches
    client.force_login(superuser)  # ticking the form's box does not lift it
    page = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk, "accept_low_pay": "on"})
    assert page.status_code == 200 and "below the floor" in page.content.decode()
    assert Batch.objects.count() == batches
    assert make_batch(task, reward=Decimal("1.00")).status == Batch.Status.PUBLISHED
    # Another kind of work (validation) has no earlier timings: no estimate, nothing refused.
    assert pay.estimate(task, "validate").median_seconds is None
    settings.DYNABENCH_MIN_HOURLY_PAY = Decimal("0")  # no floor: nothing is refused
    assert make_batch(task).status == Batch.Status.PUBLISHED


def test_a_first_batch_has_no_estimate_and_is_not_held_back(live_tasks, crowd, settings):
    settings.DYNABENCH_REFUSE_BELOW_MIN_PAY = True
    task = live_tasks["nli"]
    assert pay.estimate(task, "create").hourly_for(Decimal("0.01")) is None
    assert make_batch(task, reward=Decimal("0.01")).status == Batch.Status.PUBLISHED
