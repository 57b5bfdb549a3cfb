"""Unit tests of crowd/mturk.py, the one boto3 module, with botocore's Stubber:
the exact requests it sends and how it reads MTurk's answers and errors."""

from decimal import Decimal

import pytest
from botocore.stub import ANY, Stubber

from crowd import mturk


@pytest.fixture
def stub(settings, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    settings.MTURK_ENDPOINT_URL = "https://mturk.stub.invalid"
    settings.MTURK_MAX_ATTEMPTS = 1
    with Stubber(mturk.client()) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def test_the_endpoint_is_the_sandbox_unless_told_otherwise(settings):
    settings.MTURK_ENDPOINT_URL = ""
    settings.MTURK_SANDBOX = True
    assert mturk.endpoint_url() == "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
    settings.MTURK_SANDBOX = False
    assert mturk.endpoint_url() == "https://mturk-requester.us-east-1.amazonaws.com"
    settings.MTURK_ENDPOINT_URL = "http://127.0.0.1:9999"
    assert mturk.endpoint_url() == "http://127.0.0.1:9999"


def test_account_balance_is_a_decimal(stub):
    stub.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    assert mturk.account_balance() == Decimal("10000.00")


def test_create_hit_sends_the_token_and_gives_back_the_first_hit_on_a_repeat(stub):
    question = mturk.external_question("https://example.org/mturk/hit/?a=1&b=2")
    assert "<ExternalURL>https://example.org/mturk/hit/?a=1&amp;b=2</ExternalURL>" in question
    expected = {"HITTypeId": "T" * 30, "MaxAssignments": 3, "LifetimeInSeconds": 600, "Question": question,
                "UniqueRequestToken": "dynabench-abc-1", "RequesterAnnotation": "batch 1"}
    stub.add_response("create_hit_with_hit_type", {"HIT": {"HITId": "H" * 30}}, expected)
    stub.add_client_error("create_hit_with_hit_type", service_error_code="RequestError",
                          service_message="There is already a HIT which exists with the same UniqueRequestToken. "
                                          f"The HIT ID is {'H' * 30}. (1700000000000)",
                          http_status_code=400, expected_params=expected)
    for _ in range(2):
        assert mturk.create_hit(hit_type_id="T" * 30, question=question, max_assignments=3, lifetime=600,
                                unique_request_token="dynabench-abc-1", annotation="batch 1") == "H" * 30


@pytest.mark.parametrize("code, message, status, kind", [
    ("ThrottlingException", "Rate exceeded", 400, "throttled"),
    ("ServiceFault", "Internal error", 500, "unavailable"),
    ("RequestError", "This Requester has insufficient funds in their account to complete this transaction.", 400,
     "insufficient_funds"),
    ("RequestError", 'The idempotency token "x" has already been processed. (1)', 400, "duplicate"),
    ("RequestError", "This operation can be called with a status of: Submitted", 400, "request"),
])
def test_errors_say_what_to_do(stub, code, message, status, kind):
    stub.add_client_error("send_bonus", service_error_code=code, service_message=message, http_status_code=status)
    with pytest.raises(mturk.MTurkError) as raised:
        mturk.send_bonus(worker_id="AWORKER1", assignment_id="A" * 30, amount=Decimal("0.5"), reason="r",
                         unique_request_token="t")
    assert raised.value.kind == kind and raised.value.operation == "send_bonus"
    assert raised.value.retryable == (kind in ("throttled", "unavailable"))


def test_send_bonus_sends_the_amount_in_cents_and_the_token(stub):
    stub.add_response("send_bonus", {}, {"WorkerId": "AWORKER1", "AssignmentId": "A" * 30, "BonusAmount": "0.50",
                                         "Reason": "well done", "UniqueRequestToken": "dynabench-bonus-1"})
    mturk.send_bonus(worker_id="AWORKER1", assignment_id="A" * 30, amount=Decimal("0.5"), reason="well done",
                     unique_request_token="dynabench-bonus-1")


def test_assignments_are_listed_page_by_page(stub):
    first = {"HITId": "H" * 30, "MaxResults": 100, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"]}
    stub.add_response("list_assignments_for_hit", {"Assignments": [{"AssignmentId": "1" * 30}], "NextToken": "p2",
                                                   "NumResults": 1}, first)
    stub.add_response("list_assignments_for_hit", {"Assignments": [{"AssignmentId": "2" * 30}], "NumResults": 1},
                      {**first, "NextToken": "p2"})
    assert [a["AssignmentId"] for a in mturk.list_assignments("H" * 30)] == ["1" * 30, "2" * 30]


def test_answers_are_read_from_mturks_xml():
    xml = ('<?xml version="1.0" encoding="ASCII"?><QuestionFormAnswers xmlns="http://mechanicalturk.amazonaws.com/'
           'AWSMechanicalTurkDataSchemas/2005-10-01/QuestionFormAnswers.xsd"><Answer><QuestionIdentifier>'
           'completionToken</QuestionIdentifier><FreeText>abc</FreeText></Answer></QuestionFormAnswers>')
    assert mturk.parse_answer(xml) == {"completionToken": "abc"}
    assert mturk.parse_answer("not xml <") == {} and mturk.parse_answer("") == {}


def test_a_rejection_always_says_why(stub):
    with pytest.raises(ValueError):
        mturk.reject("A" * 30, "")
    stub.add_response("reject_assignment", {}, {"AssignmentId": "A" * 30, "RequesterFeedback": "why"})
    mturk.reject("A" * 30, "why")


def test_notify_sends_at_most_100_workers_a_call(stub):
    workers = [f"AWORKER{n:05d}" for n in range(150)]
    stub.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []},
                      {"Subject": "s", "MessageText": "m", "WorkerIds": workers[:100]})
    stub.add_response("notify_workers", {"NotifyWorkersFailureStatuses": [
        {"NotifyWorkersFailureCode": "HardFailure", "NotifyWorkersFailureMessage": "no", "WorkerId": workers[120]}]},
        {"Subject": "s", "MessageText": "m", "WorkerIds": workers[100:]})
    assert [f["WorkerId"] for f in mturk.notify(workers, "s", "m")] == [workers[120]]


def test_the_block_qualification_is_required_absent(stub):
    stub.add_response("create_worker_block", {}, {"WorkerId": "AWORKER1", "Reason": "spam"})
    mturk.block_worker("AWORKER1", "spam")
    stub.add_response("associate_qualification_with_worker", {},
                      {"QualificationTypeId": "Q" * 30, "WorkerId": "AWORKER1", "IntegerValue": 1,
                       "SendNotification": False})
    mturk.give_qualification("Q" * 30, "AWORKER1")
    stub.add_response("update_expiration_for_hit", {}, {"HITId": "H" * 30, "ExpireAt": ANY})
    mturk.expire_hit("H" * 30)
