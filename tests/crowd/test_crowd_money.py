"""Money has limits that a researcher cannot lift alone: per-task budgets that
superusers set, committed money that counts, and a second person for large
batches. Each test is an attempt to spend more than allowed, against the fake MTurk."""

import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.urls import reverse

from annotation import validation
from annotation.models import Example
from core.errors import Conflict, Forbidden
from crowd import budgets, costs, publishing, sync
from crowd.models import Batch, CrowdBudget
from tests.crowd.test_crowd_admin import PUBLISH
from tests.crowd.test_crowd_flow import do_one_assignment, make_batch

pytestmark = pytest.mark.django_db

# make_batch's default batch, 2 HITs x 2 assignments x ($0.50 + $0.10 fee + 2 x $0.25 bonus + $0.10 fee)
FOUR_EIGHTY = Decimal("4.80")
MTURK_ASKED = ("GetAccountBalance", "CreateHITType", "CreateHITWithHITType", "CreateHIT")


@pytest.fixture
def crowd(crowd, settings):
    """The shared fake MTurk (tests/crowd/conftest.py), with fewer retries and the default approval threshold."""
    settings.MTURK_MAX_ATTEMPTS = 2
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("100.00")
    return crowd


def asked(fake) -> int:
    return sum(fake.count(op) for op in MTURK_ASKED)


@pytest.fixture
def second_superuser(db, django_user_model):
    return django_user_model.objects.create_superuser("root2", password="a-long-enough-password-2")


def test_a_second_batch_cannot_promise_the_dollars_the_first_did(live_tasks, crowd, superuser):
    task = live_tasks["sentiment"]
    budgets.set_budget(task, Decimal("8.00"), superuser)
    first = make_batch(task)
    assert first.status == Batch.Status.PUBLISHED and first.max_cost == FOUR_EIGHTY
    before = asked(crowd)
    with pytest.raises(Conflict) as refused:
        make_batch(task)  # alone it fits the budget; with the first one's promise it does not
    message = refused.value.message
    assert "$8.00" in message and "$4.80 is committed" in message and "$3.20 is left" in message
    assert "may cost up to $4.80" in message
    assert Batch.objects.count() == 1 and asked(crowd) == before  # refused before any MTurk call
    # Another task's budget is its own.
    budgets.set_budget(live_tasks["nli"], Decimal("5.00"), superuser)
    assert make_batch(live_tasks["nli"]).status == Batch.Status.PUBLISHED


def test_the_balance_counts_what_every_open_batch_has_committed(live_tasks, crowd):
    crowd.balance = Decimal("8.00")
    make_batch(live_tasks["sentiment"])
    creates = crowd.count("CreateHITWithHITType")
    with pytest.raises(Conflict) as refused:
        make_batch(live_tasks["nli"])  # another task: the account is shared
    assert "holds $8.00; $4.80 of it is committed" in refused.value.message
    assert crowd.count("CreateHITType") == 1 and crowd.count("CreateHITWithHITType") == creates
    assert Batch.objects.count() == 1


def test_a_live_task_without_a_budget_publishes_nothing_until_a_superuser_sets_one(live_tasks, crowd, settings,
                                                                                    superuser):
    settings.MTURK_SANDBOX = False  # the fake stands in for the live site (MTURK_ENDPOINT_URL)
    task = live_tasks["sentiment"]
    with pytest.raises(Conflict, match="no crowd budget.*CROWD_DEFAULT_TASK_BUDGET"):
        make_batch(task, hits=1, assignments_per_hit=1)
    assert crowd.calls == [] and not Batch.objects.exists()
    budgets.set_budget(task, Decimal("2.00"), superuser)
    batch = make_batch(task, hits=1, assignments_per_hit=1)
    assert batch.status == Batch.Status.PUBLISHED and batch.sandbox is False
    # What the sandbox committed does not count on the live site, nor the other way round.
    settings.MTURK_SANDBOX = True
    assert budgets.standing(task, True).committed == 0
    assert budgets.standing(task, False).committed == batch.max_cost == Decimal("1.20")


def test_committed_money_is_released_as_work_is_decided_and_paid(live_tasks, crowd, client, researcher,
                                                                 superuser):
    task = live_tasks["sentiment"]
    budgets.set_budget(task, Decimal("10.00"), superuser)
    batch = make_batch(task, hits=1, assignments_per_hit=1)  # at most $0.60 reward + $0.60 bonus
    assert budgets.standing(task, True).committed == Decimal("1.20")
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()  # approved: the reward is spent; its bonus is still promised
    standing = budgets.standing(task, True)
    assert (standing.spent, standing.committed) == (Decimal("0.60"), Decimal("0.60"))
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    from crowd import bonuses

    bonuses.pay_bonuses()  # one fooling example verified: $0.25 + $0.05 fee
    standing = budgets.standing(task, True)
    assert (standing.spent, standing.committed, standing.left) == (Decimal("0.90"), Decimal("0.00"),
                                                                   Decimal("9.10"))
    assert costs.batch_spend(batch).total + costs.committed(Batch.objects.all()) <= batch.max_cost


def test_a_researcher_cannot_set_or_raise_a_budget(live_tasks, crowd, client, researcher, superuser):
    task = live_tasks["sentiment"]
    with pytest.raises(Forbidden):
        budgets.set_budget(task, Decimal("1000000.00"), researcher)
    budget = budgets.set_budget(task, Decimal("10.00"), superuser)
    client.force_login(researcher)
    # The researcher sees their task's budget and where its money stands ...
    make_batch(task)
    listing = client.get(reverse("admin:crowd_crowdbudget_changelist")).content.decode()
    assert "$10.00" in listing and "$4.80" in listing
    # ... but can neither add nor change one (the Researchers group holds every crowd permission).
    assert client.get(reverse("admin:crowd_crowdbudget_add")).status_code == 403
    response = client.post(reverse("admin:crowd_crowdbudget_add"),
                           {"task": live_tasks["nli"].pk, "amount": "999.00"})
    assert response.status_code == 403 and not CrowdBudget.objects.filter(task=live_tasks["nli"]).exists()
    response = client.post(reverse("admin:crowd_crowdbudget_change", args=[budget.pk]), {"amount": "999.00"})
    assert response.status_code == 403
    budget.refresh_from_db()
    assert budget.amount == Decimal("10.00")
    # A superuser sets one in the admin, through the service.
    client.force_login(superuser)
    response = client.post(reverse("admin:crowd_crowdbudget_add"),
                           {"task": live_tasks["nli"].pk, "amount": "25.00", "note": "round 2"})
    assert response.status_code == 302
    created = CrowdBudget.objects.get(task=live_tasks["nli"])
    assert created.amount == Decimal("25.00") and created.set_by == superuser
    page = client.get(reverse("admin:crowd_crowdbudget_change", args=[budget.pk])).content.decode()
    assert "$4.80 committed" in page and "$5.20 left" in page


def test_other_researchers_do_not_see_a_tasks_budget(live_tasks, crowd, client, other_researcher, superuser):
    budgets.set_budget(live_tasks["sentiment"], Decimal("10.00"), superuser)
    client.force_login(other_researcher)
    assert "0 crowd budgets" in client.get(reverse("admin:crowd_crowdbudget_changelist")).content.decode()


def test_the_admin_shows_budget_committed_and_spent_per_task(live_tasks, crowd, client, researcher, superuser):
    budgets.set_budget(live_tasks["sentiment"], Decimal("10.00"), superuser)
    make_batch(live_tasks["sentiment"])
    client.force_login(researcher)
    listing = client.get(reverse("admin:crowd_batch_changelist")).content.decode()
    table = listing[listing.index('id="spending-per-task"'):]
    assert "<td>$10.00</td><td>$4.80</td><td>$5.20</td>" in table
    form = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert 'id="publish-budgets"' in form and "<td>$10.00</td><td>$0.00</td><td>$4.80</td><td>$5.20</td>" in form


def test_a_large_batch_waits_for_a_superuser_other_than_its_creator(live_tasks, crowd, client, researcher,
                                                                    other_researcher, superuser, settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("2.00")
    task = live_tasks["sentiment"]
    client.force_login(researcher)
    response = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": task.pk}, follow=True)
    batch = Batch.objects.get()
    assert batch.status == Batch.Status.AWAITING_APPROVAL and batch.max_cost == Decimal("2.40")
    assert "until a superuser other than you approves it" in response.content.decode()
    assert crowd.count("CreateHITType") == 0 and crowd.hits == {}
    changelist = reverse("admin:crowd_batch_changelist")
    # The researcher cannot post it themselves: not by "publish the remaining HITs", not by approving ...
    client.post(changelist, {"action": "publish_remaining", "_selected_action": [batch.pk]})
    client.post(changelist, {"action": "approve_batches", "_selected_action": [batch.pk]})
    with pytest.raises(Forbidden):
        publishing.approve(batch, researcher)
    with pytest.raises(Conflict):
        publishing.post_hits(batch)
    # ... nor with a second account of theirs, even one that owns the task.
    task.owners.add(other_researcher)
    with pytest.raises(Forbidden):
        publishing.approve(batch, other_researcher)
    client.force_login(other_researcher)
    client.post(changelist, {"action": "approve_batches", "_selected_action": [batch.pk]})
    batch.refresh_from_db()
    assert batch.status == Batch.Status.AWAITING_APPROVAL and crowd.hits == {} and batch.approved_by is None
    # A superuser approves it: the HITs go out.
    client.force_login(superuser)
    response = client.post(changelist, {"action": "approve_batches", "_selected_action": [batch.pk]}, follow=True)
    assert "approved; 2 HITs posted" in response.content.decode()
    batch.refresh_from_db()
    assert batch.status == Batch.Status.PUBLISHED and batch.approved_by == superuser and len(crowd.hits) == 2
    with pytest.raises(Conflict):  # once
        publishing.approve(batch, superuser)


def test_a_superuser_who_asked_for_a_large_batch_needs_a_second_superuser(live_tasks, crowd, superuser,
                                                                          second_superuser, settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("3.00")
    batch = publishing.publish(publishing.BatchRequest(
        task=live_tasks["sentiment"], mode="create", hits=2, assignments_per_hit=2, reward=Decimal("0.50"),
        bonus_per_example=Decimal("0.25"), examples_per_assignment=2), user=superuser)
    assert batch.status == Batch.Status.AWAITING_APPROVAL
    with pytest.raises(Forbidden, match="second person"):
        publishing.approve(batch, superuser)
    assert publishing.approve(batch, second_superuser).status == Batch.Status.PUBLISHED


def test_a_batch_awaiting_approval_holds_its_money_and_approval_checks_it_again(live_tasks, crowd, researcher,
                                                                              superuser, settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("3.00")
    task = live_tasks["sentiment"]
    budgets.set_budget(task, Decimal("5.50"), superuser)
    waiting = make_batch(task)
    assert waiting.status == Batch.Status.AWAITING_APPROVAL
    # Its $4.80 is promised: a small batch cannot take it meanwhile ...
    with pytest.raises(Conflict, match=r"\$4.80 is committed"):
        make_batch(task, hits=1, assignments_per_hit=1, reward=Decimal("1.00"), bonus_per_example=Decimal("0"))
    # ... and if the budget shrinks (or the balance does) before approval, approval refuses and posts nothing.
    budgets.set_budget(task, Decimal("4.00"), superuser)
    with pytest.raises(Conflict, match=r"\$4.00"):
        publishing.approve(waiting, superuser)
    crowd.balance = Decimal("4.00")
    budgets.set_budget(task, Decimal("5.50"), superuser)
    with pytest.raises(Conflict, match=r"holds \$4.00"):
        publishing.approve(waiting, superuser)
    waiting.refresh_from_db()
    assert waiting.status == Batch.Status.AWAITING_APPROVAL and crowd.count("CreateHITType") == 0
    # Cancelled, it holds nothing.
    with pytest.raises(Forbidden):
        publishing.cancel(waiting, None)
    publishing.cancel(waiting, researcher)
    assert budgets.standing(task, True).committed == 0
    with pytest.raises(Conflict):
        publishing.approve(waiting, superuser)


@pytest.mark.django_db(transaction=True)
def test_two_publishes_at_once_cannot_both_pass_the_budget(live_tasks, crowd, superuser):
    if connection.vendor != "postgresql":
        pytest.skip("row-lock concurrency is tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI)")
    task = live_tasks["sentiment"]
    budgets.set_budget(task, Decimal("8.00"), superuser)
    racers = 4
    barrier = threading.Barrier(racers)
    published, refused = [], []

    def publish_one():
        from django.db import connection as thread_connection

        try:
            barrier.wait()
            published.append(make_batch(task).pk)
        except Conflict as exc:
            refused.append(exc.message)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=publish_one) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(published) == 1 and len(refused) == racers - 1, refused
    assert Batch.objects.count() == 1 and crowd.count("CreateHITType") == 1
    assert budgets.standing(task, True).committed == FOUR_EIGHTY


def test_splitting_a_large_batch_into_small_ones_still_needs_a_second_person(live_tasks, crowd, researcher,
                                                                            superuser, settings):
    """Under the threshold one at a time, over it together: what one person published
    alone on one task in a rolling day counts toward the approval threshold."""
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("10.00")
    task, other_task = live_tasks["sentiment"], live_tasks["nli"]
    small = dict(task=task, mode="create", hits=2, assignments_per_hit=2, reward=Decimal("0.50"),
                 bonus_per_example=Decimal("0.25"), examples_per_assignment=2)  # $4.80 each
    first = publishing.publish(publishing.BatchRequest(**small), user=researcher)
    second = publishing.publish(publishing.BatchRequest(**small), user=researcher)
    assert first.status == second.status == Batch.Status.PUBLISHED  # $9.60 together
    third = publishing.publish(publishing.BatchRequest(**small), user=researcher)
    assert third.status == Batch.Status.AWAITING_APPROVAL  # $14.40 in the day: a second person
    posted = len(crowd.hits)
    # Another task, or another person, starts its own count.
    assert publishing.publish(publishing.BatchRequest(**{**small, "task": other_task}),
                              user=researcher).status == Batch.Status.PUBLISHED
    assert publishing.publish(publishing.BatchRequest(**small), user=superuser).status == Batch.Status.PUBLISHED
    assert len(crowd.hits) == posted + 4
    # A day later the first two no longer count.
    Batch.objects.filter(pk__in=[first.pk, second.pk]).update(created_at=first.created_at - budgets.APPROVAL_WINDOW)
    assert publishing.publish(publishing.BatchRequest(**small), user=researcher).status == Batch.Status.PUBLISHED
