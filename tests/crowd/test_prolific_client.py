"""crowd/prolific.py against the fake Prolific server (crowd/testing/fake_prolific.py)."""

import logging
from decimal import Decimal

import pytest
import requests

from crowd import prolific
from crowd.prolific import ProlificError
from crowd.testing.fake_prolific import FakeProlific, ParticipantActionError

TOKEN = "secret-test-token-123"
REASON = ("Your answers did not follow the instructions of the study: every item was answered with the same "
          "option, and the attention checks were failed.")


@pytest.fixture
def fake(settings, monkeypatch):
    with FakeProlific(token=TOKEN) as server:
        settings.PROLIFIC_API_URL = server.url
        settings.PROLIFIC_TOKEN = TOKEN
        yield server


@pytest.fixture
def pauses(monkeypatch):
    waited = []
    monkeypatch.setattr(prolific, "sleep", waited.append)
    return waited


def new_study(currency="GBP", places=3, **extra):
    return prolific.create_study(
        name="Fool the model", internal_name="nli r1 batch 7", description="Write sentences that fool a model.",
        external_study_url=prolific.study_url_template("https://dynabench.example/prolific/task/1"),
        completion_code="C0DE7", estimated_completion_time_minutes=10, reward_cents=200,
        total_available_places=places, currency=currency, **extra)


def published(currency="GBP", places=3):
    study = new_study(currency, places)
    prolific.publish_study(study["id"])
    return study["id"]


def test_study_url_and_completion_url():
    assert prolific.study_url_template("https://x.example/t/1") == (
        "https://x.example/t/1?PROLIFIC_PID={%PROLIFIC_PID%}&STUDY_ID={%STUDY_ID%}&SESSION_ID={%SESSION_ID%}")
    assert prolific.study_url_template("https://x.example/t?a=1").startswith("https://x.example/t?a=1&PROLIFIC_PID=")
    assert prolific.completion_url("AB C") == "https://app.prolific.com/submissions/complete?cc=AB%20C"


def test_study_lifecycle(fake):
    study = new_study()
    assert study["status"] == "UNPUBLISHED"
    assert study["reward"] == 200 and study["currency"] == "GBP"
    assert study["completion_codes"][0] == {"code": "C0DE7", "code_type": "COMPLETED",
                                            "actions": [{"action": "MANUALLY_REVIEW"}]}
    assert prolific.publish_study(study["id"])["status"] == "ACTIVE"
    assert prolific.get_study(study["id"])["status"] == "ACTIVE"
    submission = fake.start_submission(study["id"], "p1")
    assert prolific.stop_study(study["id"])["status"] == "AWAITING REVIEW"  # one still in progress
    fake.complete(submission, "C0DE7")
    prolific.approve_submission(submission)
    assert prolific.get_study(study["id"])["status"] == "COMPLETED"


def test_a_full_study_awaits_review_then_completes(fake):
    study_id = published(places=2)
    first, second = fake.add_submission(study_id, "p1"), fake.add_submission(study_id, "p2")
    assert prolific.get_study(study_id)["status"] == "AWAITING REVIEW"
    prolific.approve_submission(first)
    prolific.reject_submission(second, REASON, "FAILED_INSTRUCTIONS")
    assert prolific.get_study(study_id)["status"] == "COMPLETED"


def test_publishing_twice_is_refused_with_the_api_message(fake):
    study_id = published()
    with pytest.raises(ProlificError) as caught:
        prolific.publish_study(study_id)
    assert caught.value.kind == "request" and caught.value.status == 400
    assert "cannot be transitioned with PUBLISH" in caught.value.message


def test_invalid_study_fields_are_a_request_error_naming_them(fake):
    with pytest.raises(ProlificError) as caught:
        prolific.create_study(name="", internal_name="", description="d", external_study_url="ftp://x",
                              completion_code="C", estimated_completion_time_minutes=5, reward_cents=0,
                              total_available_places=1)
    assert caught.value.kind == "request"
    assert "name" in caught.value.message and "reward" in caught.value.message
    with pytest.raises(ValueError):
        new_study(currency="EUR")


def test_missing_study_is_not_found(fake):
    with pytest.raises(ProlificError) as caught:
        prolific.get_study("0" * 24)
    assert caught.value.kind == "not_found" and caught.value.status == 404


def test_wrong_or_missing_token_is_auth(fake, settings):
    settings.PROLIFIC_TOKEN = "wrong"
    with pytest.raises(ProlificError) as caught:
        prolific.get_study("x")
    assert caught.value.kind == "auth" and caught.value.status == 401
    settings.PROLIFIC_TOKEN = ""
    calls = len(fake.calls)
    with pytest.raises(ProlificError) as caught:
        prolific.get_study("x")
    assert caught.value.kind == "auth" and len(fake.calls) == calls  # nothing sent
    response = requests.get(f"{fake.url}/api/v1/studies/x/", timeout=5)
    assert response.status_code == 401
    assert response.json()["error"]["detail"] == "Authentication credentials were not provided."


def test_list_submissions_follows_pages(fake):
    fake.page_size = 2
    study_id = published(places=5)
    ids = [fake.add_submission(study_id, f"p{i}") for i in range(5)]
    rows = list(prolific.list_submissions(study_id))
    assert [r["id"] for r in rows] == ids
    assert [r["participant_id"] for r in rows] == [f"p{i}" for i in range(5)]
    assert all(r["status"] == "AWAITING REVIEW" and r["study_code"] == "C0DE7" for r in rows)
    assert fake.count("list_submissions") == 3


def test_approve_and_reject(fake):
    study_id = published()
    approved, rejected = fake.add_submission(study_id, "p1"), fake.add_submission(study_id, "p2")
    assert prolific.approve_submission(approved)["status"] == "APPROVED"
    assert prolific.approve_submission(approved)["status"] == "APPROVED"  # the same again is ignored
    assert prolific.reject_submission(rejected, REASON, "LOW_EFFORT")["status"] == "REJECTED"
    with pytest.raises(ProlificError) as caught:
        prolific.approve_submission(rejected)
    assert caught.value.kind == "request"


def test_a_short_rejection_message_is_refused_before_any_call(fake):
    study_id = published()
    submission = fake.add_submission(study_id, "p1")
    calls = len(fake.calls)
    with pytest.raises(ValueError, match="at least 100"):
        prolific.reject_submission(submission, "Low effort.", "LOW_EFFORT")
    with pytest.raises(ValueError, match="category"):
        prolific.reject_submission(submission, REASON, "BAD_VIBES")
    assert len(fake.calls) == calls
    # the server enforces it too
    response = requests.post(f"{fake.url}/api/v1/submissions/{submission}/transition/", timeout=5,
                             json={"action": "REJECT", "message": "short", "rejection_category": "LOW_EFFORT"},
                             headers={"Authorization": f"Token {TOKEN}"})
    assert response.status_code == 400 and "message" in response.json()["error"]["detail"]
    assert fake.submissions[submission]["status"] == "AWAITING REVIEW"


@pytest.mark.parametrize(("currency", "amount", "minor", "fees"), [
    ("GBP", Decimal("1.50"), 150, 50), ("USD", Decimal("0.75"), 75, 25), ("USD", Decimal("4"), 400, 133)])
def test_bonus_setup_and_pay_in_gbp_and_usd(fake, currency, amount, minor, fees):
    study_id = published(currency)
    submission = fake.add_submission(study_id, "p1")
    bulk = prolific.setup_bonus(study_id, [("p1", amount)])
    assert bulk["amount"] == minor and bulk["fees"] == fees and bulk["total_amount"] == minor + fees
    assert bulk["study"] == study_id
    assert fake.calls[-1][3]["csv_bonuses"] == f"p1,{amount:.2f}\n"
    assert prolific.bonus_payment_status(study_id, [("p1", amount)]).state == "not_seen"
    prolific.pay_bonus(bulk["id"])
    assert fake.paid_to("p1") == [minor] and fake.payments[0]["currency"] == currency
    assert prolific.get_submission(submission)["bonus_payments"] == [minor]
    status = prolific.bonus_payment_status(study_id, [("p1", amount)])
    assert status.state == "paid" and status.seen == {"p1": [minor]} and status.paid_twice == []


def test_bonus_rows_are_checked_before_any_call(fake):
    study_id = published()
    fake.add_submission(study_id, "p1")
    calls = len(fake.calls)
    for rows in ([], [("p1", Decimal("1.234"))], [("p1", Decimal("0"))], [("p1", Decimal("-1"))],
                 [("p1", "abc")], [("p1,p2", Decimal("1"))], [("p1", Decimal("1")), ("p1", Decimal("2"))]):
        with pytest.raises(ValueError):
            prolific.setup_bonus(study_id, rows)
    assert len(fake.calls) == calls


def test_bonus_for_someone_outside_the_study_is_refused(fake):
    study_id = published()
    fake.add_submission(study_id, "p1")
    with pytest.raises(ProlificError) as caught:
        prolific.setup_bonus(study_id, [("p1", Decimal("1")), ("stranger", Decimal("1"))])
    assert caught.value.kind == "request" and "stranger" in caught.value.message
    assert fake.bulk_bonuses == {}


def test_pay_is_not_idempotent_on_the_fake(fake):
    study_id = published()
    fake.add_submission(study_id, "p1")
    bulk = prolific.setup_bonus(study_id, [("p1", Decimal("1.00"))])
    prolific.pay_bonus(bulk["id"])
    prolific.pay_bonus(bulk["id"])
    assert fake.paid_to("p1") == [100, 100]
    assert prolific.bonus_payment_status(study_id, [("p1", Decimal("1.00"))]).paid_twice == ["p1"]


@pytest.mark.parametrize("fault", ["drop_after_commit", "hang_after_commit"])
def test_a_lost_pay_answer_is_connection_and_pays_once(fake, pauses, monkeypatch, fault):
    monkeypatch.setattr(prolific, "READ_TIMEOUT", 0.5)
    fake.hang_seconds = 1.5
    study_id = published()
    fake.add_submission(study_id, "p1")
    fake.add_submission(study_id, "p2")
    rows = [("p1", Decimal("1.00")), ("p2", Decimal("0.50"))]
    before = prolific.bonuses_paid(study_id, ["p1", "p2"])
    bulk = prolific.setup_bonus(study_id, rows)
    fake.inject("pay_bonus", fault)
    with pytest.raises(ProlificError) as caught:
        prolific.pay_bonus(bulk["id"])
    assert caught.value.kind == "connection" and caught.value.retryable
    assert fake.count("pay_bonus") == 1 and pauses == []  # sent once, no retry
    assert fake.paid_to("p1") == [100] and fake.paid_to("p2") == [50]
    assert prolific.bonus_payment_status(study_id, rows, paid_before=before).state == "paid"


@pytest.mark.parametrize(("fault", "kind"), [("server_error", "unavailable"), ("throttle", "throttled")])
def test_pay_never_retries(fake, pauses, fault, kind):
    study_id = published()
    fake.add_submission(study_id, "p1")
    bulk = prolific.setup_bonus(study_id, [("p1", Decimal("1.00"))])
    fake.inject("pay_bonus", fault)
    with pytest.raises(ProlificError) as caught:
        prolific.pay_bonus(bulk["id"])
    assert caught.value.kind == kind and fake.count("pay_bonus") == 1 and pauses == []
    assert fake.payments == []


def test_paying_an_unknown_bulk_bonus_is_not_found(fake):
    with pytest.raises(ProlificError) as caught:
        prolific.pay_bonus("f" * 24)
    assert caught.value.kind == "not_found"


def test_earlier_bonuses_do_not_count_and_async_payments_show_late(settings):
    with FakeProlific(token=TOKEN, async_payments=True) as fake:
        settings.PROLIFIC_API_URL, settings.PROLIFIC_TOKEN = fake.url, TOKEN
        study_id = published()
        fake.add_submission(study_id, "p1")
        fake.add_submission(study_id, "p2")
        first = prolific.setup_bonus(study_id, [("p1", Decimal("1.00"))])
        prolific.pay_bonus(first["id"])
        fake.process_payments()
        before = prolific.bonuses_paid(study_id, ["p1", "p2"])
        assert before == {"p1": [100], "p2": []}
        rows = [("p1", Decimal("1.00")), ("p2", Decimal("2.00"))]
        second = prolific.setup_bonus(study_id, rows)
        prolific.pay_bonus(second["id"])
        assert prolific.bonus_payment_status(study_id, rows, paid_before=before).state == "not_seen"
        fake.process_payments()
        status = prolific.bonus_payment_status(study_id, rows, paid_before=before)
        assert status.state == "paid" and status.seen == {"p1": [100, 100], "p2": [200]}


def test_partial_status(fake):
    study_id = published()
    fake.add_submission(study_id, "p1")
    fake.add_submission(study_id, "p2")
    prolific.pay_bonus(prolific.setup_bonus(study_id, [("p1", Decimal("1.00"))])["id"])
    status = prolific.bonus_payment_status(study_id, [("p1", Decimal("1.00")), ("p2", Decimal("1.00"))])
    assert status.state == "partial" and status.missing == ["p2"]


def test_429_waits_for_retry_after_then_succeeds(fake, pauses):
    fake.retry_after = 7
    study_id = published()
    fake.inject("get_study", "throttle", times=2)
    assert prolific.get_study(study_id)["id"] == study_id
    assert pauses == [7.0, 7.0] and fake.count("get_study") == 3


def test_throttling_that_lasts_ends_as_throttled_with_retry_after(fake, pauses):
    fake.retry_after = 3
    study_id = published()
    fake.inject("get_study", "throttle", times=prolific.MAX_ATTEMPTS)
    with pytest.raises(ProlificError) as caught:
        prolific.get_study(study_id)
    assert caught.value.kind == "throttled" and caught.value.retry_after == 3.0 and caught.value.status == 429
    assert fake.count("get_study") == prolific.MAX_ATTEMPTS and len(pauses) == prolific.MAX_ATTEMPTS - 1


def test_a_long_retry_after_is_not_waited_for(fake, pauses):
    fake.retry_after = prolific.RETRY_AFTER_CAP + 1
    fake.inject("create_study", "throttle")
    with pytest.raises(ProlificError) as caught:
        new_study()
    assert caught.value.kind == "throttled" and pauses == [] and fake.studies == {}


def test_5xx_is_retried_with_backoff_then_unavailable(fake, pauses):
    study_id = published()
    fake.inject("get_study", "server_error", times=1)
    assert prolific.get_study(study_id)["id"] == study_id
    assert pauses == [prolific.BACKOFF_FIRST]
    fake.inject("get_study", "server_error", times=prolific.MAX_ATTEMPTS)
    with pytest.raises(ProlificError) as caught:
        prolific.get_study(study_id)
    assert caught.value.kind == "unavailable" and caught.value.status == 500


def test_lost_connection_on_a_read_is_retried_but_not_on_create(fake, pauses):
    study_id = published()
    fake.inject("get_study", "drop_after_commit")
    assert prolific.get_study(study_id)["id"] == study_id
    fake.inject("create_study", "drop_after_commit")
    with pytest.raises(ProlificError) as caught:
        new_study()
    assert caught.value.kind == "connection" and len(fake.studies) == 2  # made, answer lost, not sent again


def test_nothing_listening_is_connection(settings, pauses):
    settings.PROLIFIC_API_URL, settings.PROLIFIC_TOKEN = "http://127.0.0.1:9", TOKEN
    with pytest.raises(ProlificError) as caught:
        prolific.setup_bonus("s", [("p1", Decimal("1"))])
    assert caught.value.kind == "connection"


def test_the_token_is_never_logged(fake, pauses, caplog):
    caplog.set_level(logging.DEBUG)
    study_id = published()
    fake.inject("get_study", "server_error")
    prolific.get_study(study_id)
    assert caplog.records and TOKEN not in caplog.text


def test_a_next_link_to_another_host_is_not_followed(fake, monkeypatch):
    study_id = published()
    monkeypatch.setattr(fake, "page_size", 1)
    fake.add_submission(study_id, "p1")
    fake.add_submission(study_id, "p2")
    monkeypatch.setattr(type(fake), "url", property(lambda self: "http://evil.example"))
    with pytest.raises(ProlificError, match="another host"):
        list(prolific.list_submissions(study_id))


def test_blocklist_group(fake):
    group = prolific.create_participant_group("Dynabench blocked", workspace_id="w1")
    prolific.block_participant(group["id"], "bad1")
    prolific.block_participant(group["id"], "bad1")  # already there: ignored
    assert prolific.group_participants(group["id"]) == ["bad1"]
    study = new_study(block_group_id=group["id"])
    assert study["filters"] == [{"filter_id": "participant_group_blocklist", "selected_values": [group["id"]]}]
    prolific.publish_study(study["id"])
    with pytest.raises(ParticipantActionError, match="participant groups"):
        fake.start_submission(study["id"], "bad1")
    prolific.unblock_participant(group["id"], "bad1")
    assert prolific.group_participants(group["id"]) == []
    assert fake.start_submission(study["id"], "bad1")
    with pytest.raises(ProlificError) as caught:
        prolific.block_participant("0" * 24, "x")
    assert caught.value.kind == "not_found"


def test_allowlist_group_admits_only_its_members_and_the_blocklist_still_holds(fake):
    passed = prolific.create_participant_group("Dynabench: onboarding passed (nli)", workspace_id="w1")
    blocked = prolific.create_participant_group("Dynabench: not admitted (nli)", workspace_id="w1")
    prolific.block_participant(passed["id"], "p1")  # "block" adds to a group, whatever the group is for
    prolific.block_participant(passed["id"], "p3")
    prolific.block_participant(blocked["id"], "p3")
    study = new_study(block_group_ids=[blocked["id"]], allow_group_ids=[passed["id"]])
    assert study["filters"] == [{"filter_id": "participant_group_blocklist", "selected_values": [blocked["id"]]},
                                {"filter_id": "participant_group_allowlist", "selected_values": [passed["id"]]}]
    prolific.publish_study(study["id"])
    assert fake.start_submission(study["id"], "p1")
    for outside in ("p2", "p3"):  # not in the allowlist; in it but blocked
        with pytest.raises(ParticipantActionError, match="participant groups"):
            fake.start_submission(study["id"], outside)
    prolific.block_participant(passed["id"], "p2")  # a group's change applies to a published study at once
    assert fake.start_submission(study["id"], "p2")


def test_participant_rules_of_the_fake(fake):
    study_id = published(places=2)
    with pytest.raises(ParticipantActionError):
        fake.add_submission(study_id, "p1", code="WRONG")
    fake.add_submission(study_id, "p2")
    with pytest.raises(ParticipantActionError, match="full"):
        fake.start_submission(study_id, "p3")
    with pytest.raises(ValueError):
        fake.inject("no_such_endpoint", "throttle")
