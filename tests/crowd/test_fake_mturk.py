"""The fake MTurk requester service, exercised through a real boto3 client."""

import datetime as dt
import xml.etree.ElementTree as ET
from decimal import Decimal

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from crowd.testing.fake_mturk import ANSWERS_NS, WorkerActionError

EXTERNAL_QUESTION = (
    '<ExternalQuestion xmlns="http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/'
    'ExternalQuestion.xsd"><ExternalURL>https://dynabench.example/mturk/task/1</ExternalURL>'
    "<FrameHeight>0</FrameHeight></ExternalQuestion>"
)
WORKERS = [f"AWORKER{i}" for i in range(10)]


@pytest.fixture(autouse=True)
def _requests_follow_the_model(fake_mturk):
    yield
    assert fake_mturk.violations == []


def client_for(fake, **config):
    return boto3.client("mturk", region_name="us-east-1", endpoint_url=fake.endpoint_url,
                        aws_access_key_id="fake", aws_secret_access_key="fake", config=Config(**config))


def create_hit(client, reward="1.00", max_assignments=1, **extra):
    hit_type = client.create_hit_type(Title="Fool the model", Description="Write an example", Reward=reward,
                                      AssignmentDurationInSeconds=600, AutoApprovalDelayInSeconds=3600)
    return client.create_hit_with_hit_type(HITTypeId=hit_type["HITTypeId"], MaxAssignments=max_assignments,
                                           LifetimeInSeconds=3600, Question=EXTERNAL_QUESTION, **extra)["HIT"]


def submitted(fake, hit_id, worker="AWORKER1", answers=None):
    assignment_id = fake.accept(hit_id, worker)
    fake.submit(assignment_id, answers or {"exampleId": "42"})
    return assignment_id


def error_of(excinfo):
    return excinfo.value.response["Error"]["Code"], excinfo.value.response.get("TurkErrorCode", "")


def test_balance(fake_mturk, mturk_client):
    assert mturk_client.get_account_balance()["AvailableBalance"] == "10000.00"
    fake_mturk.balance = "12.5"
    assert mturk_client.get_account_balance()["AvailableBalance"] == "12.50"
    assert fake_mturk.balance == Decimal("12.50")


def test_same_hit_type_parameters_give_the_same_id(mturk_client):
    params = dict(Title="T", Description="D", Reward="0.50", AssignmentDurationInSeconds=600)
    first = mturk_client.create_hit_type(**params)["HITTypeId"]
    assert mturk_client.create_hit_type(**params)["HITTypeId"] == first
    assert mturk_client.create_hit_type(**{**params, "Reward": "0.51"})["HITTypeId"] != first
    assert len(first) == 30 and first.isalnum() and first.upper() == first


def test_create_hit_with_external_question(fake_mturk, mturk_client):
    hit = create_hit(mturk_client, RequesterAnnotation="round-1")
    assert hit["HITStatus"] == "Assignable"
    assert hit["Question"] == EXTERNAL_QUESTION and hit["Reward"] == "1.00"
    assert hit["NumberOfAssignmentsAvailable"] == 1 and hit["RequesterAnnotation"] == "round-1"
    assert isinstance(hit["Expiration"], dt.datetime)
    fetched = mturk_client.get_hit(HITId=hit["HITId"])["HIT"]
    assert fetched["HITTypeId"] == hit["HITTypeId"]
    assert [h["HITId"] for h in mturk_client.list_hits()["HITs"]] == [hit["HITId"]]

    direct = mturk_client.create_hit(Title="Direct", Description="D", Reward="0.10", LifetimeInSeconds=60,
                                     AssignmentDurationInSeconds=60, Question=EXTERNAL_QUESTION)["HIT"]
    assert direct["MaxAssignments"] == 1 and direct["AutoApprovalDelayInSeconds"] == 30 * 24 * 3600
    assert len(fake_mturk.hits) == 2


@pytest.mark.parametrize("question", [
    EXTERNAL_QUESTION.replace("https://", "http://"),
    EXTERNAL_QUESTION.replace("</ExternalQuestion>", ""),
    "<ExternalQuestion><ExternalURL>https://x</ExternalURL><FrameHeight>0</FrameHeight></ExternalQuestion>",
])
def test_bad_question_xml_is_refused(fake_mturk, mturk_client, question):
    hit_type = mturk_client.create_hit_type(Title="T", Description="D", Reward="1",
                                            AssignmentDurationInSeconds=60)["HITTypeId"]
    with pytest.raises(ClientError) as excinfo:
        mturk_client.create_hit_with_hit_type(HITTypeId=hit_type, LifetimeInSeconds=60, Question=question)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.XMLParseError")
    assert fake_mturk.hits == {}


def test_repeated_unique_request_token_creates_one_hit(fake_mturk, mturk_client):
    hit = create_hit(mturk_client, UniqueRequestToken="round-1-batch-1")
    with pytest.raises(ClientError) as excinfo:
        create_hit(mturk_client, UniqueRequestToken="round-1-batch-1")
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.HitAlreadyExists")
    assert hit["HITId"] in excinfo.value.response["Error"]["Message"]
    assert list(fake_mturk.hits) == [hit["HITId"]]
    # The token lives 24 hours.
    fake_mturk.advance(24 * 3600 + 1)
    create_hit(mturk_client, UniqueRequestToken="round-1-batch-1")
    assert len(fake_mturk.hits) == 2


def test_accept_submit_and_list_with_pagination_and_status_filter(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client, max_assignments=5)["HITId"]
    ids = [fake_mturk.accept(hit_id, worker) for worker in WORKERS[:5]]
    assert all(len(i) == 30 and i.isalnum() and i.upper() == i for i in ids)
    with pytest.raises(WorkerActionError):
        fake_mturk.accept(hit_id, WORKERS[5])  # all five taken
    for i, assignment_id in enumerate(ids[:4]):
        fake_mturk.submit(assignment_id, {"exampleId": str(i), "note": "café <&>"})

    # The in-progress assignment is invisible to the requester.
    listed = mturk_client.list_assignments_for_hit(HITId=hit_id)
    assert listed["NumResults"] == 4 and "NextToken" not in listed
    hit = mturk_client.get_hit(HITId=hit_id)["HIT"]
    assert (hit["NumberOfAssignmentsPending"], hit["NumberOfAssignmentsAvailable"]) == (1, 0)
    assert hit["HITStatus"] == "Unassignable"

    first = mturk_client.list_assignments_for_hit(HITId=hit_id, MaxResults=3)
    second = mturk_client.list_assignments_for_hit(HITId=hit_id, MaxResults=3, NextToken=first["NextToken"])
    assert [a["AssignmentId"] for a in first["Assignments"] + second["Assignments"]] == ids[:4]
    assert "NextToken" not in second

    assignment = first["Assignments"][0]
    assert assignment["WorkerId"] == WORKERS[0] and assignment["AssignmentStatus"] == "Submitted"
    assert assignment["AutoApprovalTime"] - assignment["SubmitTime"] == dt.timedelta(hours=1)
    assert assignment["Answer"].startswith('<?xml version="1.0" encoding="ASCII"?><QuestionFormAnswers')
    answers = {a.findtext(f"{{{ANSWERS_NS}}}QuestionIdentifier"): a.findtext(f"{{{ANSWERS_NS}}}FreeText")
               for a in ET.fromstring(assignment["Answer"])}
    assert answers == {"exampleId": "0", "note": "café <&>"}

    mturk_client.approve_assignment(AssignmentId=ids[0])
    submitted_only = mturk_client.list_assignments_for_hit(HITId=hit_id, AssignmentStatuses=["Submitted"])
    assert [a["AssignmentId"] for a in submitted_only["Assignments"]] == ids[1:4]
    paginator = mturk_client.get_paginator("list_assignments_for_hit")
    pages = list(paginator.paginate(HITId=hit_id, AssignmentStatuses=["Approved"], PaginationConfig={"PageSize": 1}))
    assert [a["AssignmentId"] for page in pages for a in page["Assignments"]] == ids[:1]


def test_workers_cannot_double_accept_and_returned_slots_reopen(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client, max_assignments=1)["HITId"]
    assignment_id = fake_mturk.accept(hit_id, "AWORKER1")
    with pytest.raises(WorkerActionError):
        fake_mturk.accept(hit_id, "AWORKER1")
    with pytest.raises(WorkerActionError):
        fake_mturk.accept(hit_id, "not-a-worker-id")
    fake_mturk.return_assignment(assignment_id)
    assert mturk_client.list_assignments_for_hit(HITId=hit_id)["Assignments"] == []
    # MTurk may hand the freed slot, with the same assignment id, to the next worker.
    assert fake_mturk.accept(hit_id, "AWORKER2", assignment_id=assignment_id) == assignment_id
    fake_mturk.submit(assignment_id, {"exampleId": "7"})
    got = mturk_client.get_assignment(AssignmentId=assignment_id)["Assignment"]
    assert got["WorkerId"] == "AWORKER2"


def test_deadlines_abandon_and_auto_approval_pays(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client, max_assignments=2)["HITId"]
    late = fake_mturk.accept(hit_id, "AWORKER1")
    done = submitted(fake_mturk, hit_id, "AWORKER2")
    fake_mturk.advance(601)  # past the 600 s assignment duration
    with pytest.raises(WorkerActionError):
        fake_mturk.submit(late, {"x": "1"})
    assert mturk_client.get_hit(HITId=hit_id)["HIT"]["NumberOfAssignmentsAvailable"] == 1
    assert fake_mturk.auto_approve_due() == []
    fake_mturk.advance(3600)
    assert mturk_client.get_assignment(AssignmentId=done)["Assignment"]["AssignmentStatus"] == "Approved"
    assert fake_mturk.balance == Decimal("10000.00") - Decimal("1.20")


@pytest.mark.parametrize("reward, max_assignments, cost", [
    ("1.00", 1, "1.20"),    # 20% fee
    ("0.50", 10, "0.70"),   # 40% from ten assignments on
    ("0.01", 1, "0.02"),    # at least a cent of fee
    ("0.33", 1, "0.40"),    # 6.6 cents rounds to 7
])
def test_approval_charges_reward_and_fee(fake_mturk, mturk_client, reward, max_assignments, cost):
    hit_id = create_hit(mturk_client, reward=reward, max_assignments=max_assignments)["HITId"]
    assignment_id = submitted(fake_mturk, hit_id)
    mturk_client.approve_assignment(AssignmentId=assignment_id, RequesterFeedback="Thanks!")
    assert fake_mturk.balance == Decimal("10000.00") - Decimal(cost)
    with pytest.raises(ClientError) as excinfo:
        mturk_client.approve_assignment(AssignmentId=assignment_id)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.InvalidAssignmentState")
    assert fake_mturk.balance == Decimal("10000.00") - Decimal(cost)


def test_insufficient_funds(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client, reward="1.00")["HITId"]
    assignment_id = submitted(fake_mturk, hit_id)
    fake_mturk.balance = "1.19"
    with pytest.raises(ClientError) as excinfo:
        mturk_client.approve_assignment(AssignmentId=assignment_id)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.InsufficientFunds")
    assert "insufficient funds" in excinfo.value.response["Error"]["Message"]
    assert fake_mturk.assignments[assignment_id].status == "Submitted"
    assert fake_mturk.balance == Decimal("1.19")
    with pytest.raises(ClientError) as excinfo:  # a HIT must be affordable when it is created
        create_hit(mturk_client, reward="1.00")
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.InsufficientFunds")


def test_reject_needs_feedback_and_can_be_overridden(fake_mturk, mturk_client):
    assignment_id = submitted(fake_mturk, create_hit(mturk_client)["HITId"])
    for feedback in ("", "   "):
        with pytest.raises(ClientError) as excinfo:
            mturk_client.reject_assignment(AssignmentId=assignment_id, RequesterFeedback=feedback)
        assert error_of(excinfo)[0] == "RequestError"
    mturk_client.reject_assignment(AssignmentId=assignment_id, RequesterFeedback="Copied the prompt.")
    got = mturk_client.get_assignment(AssignmentId=assignment_id)["Assignment"]
    assert (got["AssignmentStatus"], got["RequesterFeedback"]) == ("Rejected", "Copied the prompt.")
    assert fake_mturk.balance == Decimal("10000.00")
    with pytest.raises(ClientError):
        mturk_client.approve_assignment(AssignmentId=assignment_id)
    mturk_client.approve_assignment(AssignmentId=assignment_id, OverrideRejection=True)
    assert fake_mturk.assignments[assignment_id].status == "Approved"
    assert fake_mturk.balance == Decimal("10000.00") - Decimal("1.20")


def test_send_bonus_pays_once_per_token(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client)["HITId"]
    assignment_id = submitted(fake_mturk, hit_id)
    bonus = dict(WorkerId="AWORKER1", BonusAmount="2", AssignmentId=assignment_id, Reason="Fooled the model",
                 UniqueRequestToken="bonus-example-42")
    with pytest.raises(ClientError) as excinfo:  # only once the assignment is approved or rejected
        mturk_client.send_bonus(**bonus)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.InvalidAssignmentState")
    mturk_client.approve_assignment(AssignmentId=assignment_id)
    balance = fake_mturk.balance
    with pytest.raises(ClientError):  # the worker must be the assignment's
        mturk_client.send_bonus(**{**bonus, "WorkerId": "AWORKER2"})

    mturk_client.send_bonus(**bonus)
    assert fake_mturk.balance == balance - Decimal("2.40")
    with pytest.raises(ClientError) as excinfo:
        mturk_client.send_bonus(**bonus)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.DuplicateRequest")
    assert "has already been processed" in excinfo.value.response["Error"]["Message"]
    assert len(fake_mturk.bonuses) == 1 and fake_mturk.balance == balance - Decimal("2.40")

    listed = mturk_client.list_bonus_payments(HITId=hit_id)["BonusPayments"]
    assert [(b["WorkerId"], b["BonusAmount"], b["Reason"]) for b in listed] == [
        ("AWORKER1", "2.00", "Fooled the model")]
    assert mturk_client.list_bonus_payments(AssignmentId=assignment_id)["NumResults"] == 1


def test_dropped_response_is_retried_by_boto3_and_pays_once(fake_mturk, mturk_client):
    assignment_id = submitted(fake_mturk, create_hit(mturk_client)["HITId"])
    mturk_client.approve_assignment(AssignmentId=assignment_id)
    fake_mturk.inject("SendBonus", "drop_after_commit")
    with pytest.raises(ClientError) as excinfo:
        mturk_client.send_bonus(WorkerId="AWORKER1", BonusAmount="0.50", AssignmentId=assignment_id,
                                Reason="Fooled the model", UniqueRequestToken="bonus-1")
    assert "has already been processed" in excinfo.value.response["Error"]["Message"]
    assert fake_mturk.count("SendBonus") == 2
    assert len(fake_mturk.bonuses) == 1
    assert fake_mturk.balance == Decimal("10000.00") - Decimal("1.20") - Decimal("0.60")


def test_throttling_surfaces_without_retries_and_passes_with_them(fake_mturk, mturk_client):
    no_retries = client_for(fake_mturk, retries={"total_max_attempts": 1})
    fake_mturk.inject("CreateHITType", "throttle")
    with pytest.raises(ClientError) as excinfo:
        no_retries.create_hit_type(Title="T", Description="D", Reward="1", AssignmentDurationInSeconds=60)
    assert excinfo.value.response["Error"]["Code"] == "ThrottlingException"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert fake_mturk.hit_types == {}

    fake_mturk.inject("CreateHITType", "throttle")
    mturk_client.create_hit_type(Title="T", Description="D", Reward="1", AssignmentDurationInSeconds=60)
    assert fake_mturk.count("CreateHITType") == 3 and len(fake_mturk.hit_types) == 1

    fake_mturk.inject("GetAccountBalance", "server_error")
    with pytest.raises(ClientError) as excinfo:
        no_retries.get_account_balance()
    assert excinfo.value.response["Error"]["Code"] == "ServiceFault"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    no_retries.close()


@pytest.mark.parametrize("operation, params, problem", [
    ("create_worker_block", {"WorkerId": "AWORKER1"}, "CreateWorkerBlock.Reason: missing required member"),
    ("get_hit", {"HITId": "A" * 65}, "GetHIT.HITId: length 65 is above the maximum 64"),
    ("create_worker_block", {"WorkerId": "worker-1", "Reason": "spam"}, "CreateWorkerBlock.WorkerId: 'worker-1'"),
    ("send_bonus", {"WorkerId": "AWORKER1", "BonusAmount": "$5", "AssignmentId": "A1", "Reason": "r"},
     "SendBonus.BonusAmount: '$5' does not match"),
    ("list_hits", {"MaxResults": 101}, "ListHITs.MaxResults: value 101 is above the maximum 100"),
    ("list_hits", {"MaxResults": "10"}, "ListHITs.MaxResults: expected an integer"),
    ("list_assignments_for_hit", {"HITId": "H1", "AssignmentStatuses": ["Accepted"]},
     "ListAssignmentsForHIT.AssignmentStatuses[0]: 'Accepted' is not one of"),
])
def test_requests_are_checked_against_the_service_model(fake_mturk, operation, params, problem):
    raw = client_for(fake_mturk, parameter_validation=False, retries={"total_max_attempts": 1})
    with pytest.raises(ClientError) as excinfo:
        getattr(raw, operation)(**params)
    raw.close()
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"
    assert problem in excinfo.value.response["Error"]["Message"]
    assert len(fake_mturk.violations) == 1 and fake_mturk.violations[0].startswith(problem)
    fake_mturk.violations.clear()


def test_unknown_members_are_violations(fake_mturk, mturk_client):
    # botocore drops unknown members when it serialises; rewrite the serialised body instead.
    mturk_client.meta.events.register("before-call.mturk.GetAccountBalance",
                                      lambda params, **_: params.update(body=b'{"Extra": 1}'))
    with pytest.raises(ClientError):
        mturk_client.get_account_balance()
    assert fake_mturk.violations == ["GetAccountBalance.Extra: unknown member"]
    fake_mturk.violations.clear()


def test_expire_then_delete_hit(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client, max_assignments=2)["HITId"]
    assignment_id = submitted(fake_mturk, hit_id)
    with pytest.raises(ClientError) as excinfo:
        mturk_client.delete_hit(HITId=hit_id)
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.InvalidHITState")
    mturk_client.update_expiration_for_hit(HITId=hit_id, ExpireAt=dt.datetime(2015, 1, 1))
    assert mturk_client.get_hit(HITId=hit_id)["HIT"]["HITStatus"] == "Reviewable"
    with pytest.raises(WorkerActionError):
        fake_mturk.accept(hit_id, "AWORKER2")
    with pytest.raises(ClientError):  # a submitted assignment still awaits review
        mturk_client.delete_hit(HITId=hit_id)
    mturk_client.approve_assignment(AssignmentId=assignment_id)
    mturk_client.delete_hit(HITId=hit_id)
    assert mturk_client.get_hit(HITId=hit_id)["HIT"]["HITStatus"] == "Disposed"
    assert mturk_client.list_hits()["HITs"] == []


def test_worker_blocks(fake_mturk, mturk_client):
    hit_id = create_hit(mturk_client)["HITId"]
    with pytest.raises(ClientError):
        mturk_client.create_worker_block(WorkerId="AWORKER1", Reason="")
    mturk_client.create_worker_block(WorkerId="AWORKER1", Reason="Spam")
    assert mturk_client.list_worker_blocks()["WorkerBlocks"] == [{"WorkerId": "AWORKER1", "Reason": "Spam"}]
    with pytest.raises(WorkerActionError):
        fake_mturk.accept(hit_id, "AWORKER1")
    mturk_client.delete_worker_block(WorkerId="AWORKER1", Reason="Appealed")
    assert fake_mturk.blocks == {}
    fake_mturk.accept(hit_id, "AWORKER1")


def test_qualifications(fake_mturk, mturk_client):
    qualification = mturk_client.create_qualification_type(
        Name="Dynabench NLI", Description="Passed onboarding", QualificationTypeStatus="Active")["QualificationType"]
    type_id = qualification["QualificationTypeId"]
    with pytest.raises(ClientError) as excinfo:
        mturk_client.create_qualification_type(Name="Dynabench NLI", Description="again",
                                               QualificationTypeStatus="Active")
    assert error_of(excinfo) == ("RequestError", "AWS.MechanicalTurk.QualificationTypeAlreadyExists")
    listed = mturk_client.list_qualification_types(MustBeRequestable=False, MustBeOwnedByCaller=True)
    assert [q["QualificationTypeId"] for q in listed["QualificationTypes"]] == [type_id]

    mturk_client.associate_qualification_with_worker(QualificationTypeId=type_id, WorkerId="AWORKER1",
                                                     IntegerValue=5, SendNotification=False)
    mturk_client.associate_qualification_with_worker(QualificationTypeId=type_id, WorkerId="AWORKER2",
                                                     IntegerValue=1)
    workers = mturk_client.list_workers_with_qualification_type(QualificationTypeId=type_id)["Qualifications"]
    assert [(q["WorkerId"], q["IntegerValue"]) for q in workers] == [("AWORKER1", 5), ("AWORKER2", 1)]
    assert fake_mturk.qualification_scores[(type_id, "AWORKER1")]["IntegerValue"] == 5

    hit_id = mturk_client.create_hit(
        Title="Qualified", Description="D", Reward="1", LifetimeInSeconds=600, AssignmentDurationInSeconds=60,
        MaxAssignments=3, Question=EXTERNAL_QUESTION, QualificationRequirements=[
            {"QualificationTypeId": type_id, "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [3]}],
    )["HIT"]["HITId"]
    fake_mturk.accept(hit_id, "AWORKER1")
    for worker in ("AWORKER2", "AWORKER3"):
        with pytest.raises(WorkerActionError):
            fake_mturk.accept(hit_id, worker)

    mturk_client.disassociate_qualification_from_worker(QualificationTypeId=type_id, WorkerId="AWORKER2",
                                                        Reason="Retired")
    workers = mturk_client.list_workers_with_qualification_type(QualificationTypeId=type_id)["Qualifications"]
    assert [q["WorkerId"] for q in workers] == ["AWORKER1"]
    with pytest.raises(ClientError):
        mturk_client.disassociate_qualification_from_worker(QualificationTypeId=type_id, WorkerId="AWORKER2")


def test_notify_workers(fake_mturk, mturk_client):
    answer = mturk_client.notify_workers(Subject="New round", MessageText="Round 2 is open.",
                                         WorkerIds=["AWORKER1", "AWORKER2"])
    assert answer["NotifyWorkersFailureStatuses"] == []
    assert fake_mturk.notifications[0]["WorkerIds"] == ["AWORKER1", "AWORKER2"]
    with pytest.raises(ClientError):
        mturk_client.notify_workers(Subject="Too many", MessageText="x", WorkerIds=[f"A{i}" for i in range(101)])
    assert len(fake_mturk.notifications) == 1


def test_calls_are_recorded(fake_mturk, mturk_client):
    mturk_client.get_account_balance()
    mturk_client.list_hits(MaxResults=5)
    assert fake_mturk.calls == [("GetAccountBalance", {}), ("ListHITs", {"MaxResults": 5})]
