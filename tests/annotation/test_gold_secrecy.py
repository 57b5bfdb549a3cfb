"""Gold items cannot be told apart, tried as a distinguisher would: two validators in the
same situation, one served a gold item and one an ordinary item with the same text, compare
everything each is shown (the served item, the blind answer's reply, the decision's answer,
/api/me/ and /me/); an account that probes ids it was not served; a validator at the edge of
the failed-gold stop who watches their next decision (``annotation.gold``,
``annotation.record``, ``trust.reasons``)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from annotation import record, sessions, trust, validation
from annotation.models import AccountEmail, AnnotationSession, Example, Validation
from annotation.tokens import make_token

from .test_trust import account, vote

pytestmark = pytest.mark.django_db

WRITER_ADDRESS = "203.0.113.70"


def twin(task, writer, pk):
    """An example with a fixed id and the same text, answer and model answer as its twin."""
    return Example.objects.create(
        pk=pk, task=task, round=task.open_round(), context=task.contexts.order_by("pk").first(), annotator=writer,
        inputs={"statement": "Not a single page of it bored me."}, target={"label": "positive"}, fooled=True,
        prediction={"label": "negative", "probabilities": {"negative": 0.7, "positive": 0.3}})


def set_gold_rate(task, rate):
    task.config = {**task.config, "validation": {**task.config.get("validation", {}), "policy": "fixed",
                                                 "gold_rate": rate}}
    task.save()


def situation(user, task, kind):
    """Put ``user`` in a validator's situation; returns an API client that acts as them."""
    client = APIClient(REMOTE_ADDR=f"198.51.100.{user.pk % 200 + 1}")
    if kind == "provisional":  # a validation HIT that MTurk has not confirmed yet
        session = sessions.start_session(user, task, mturk_assignment_id=f"A{user.pk}", provisional=True,
                                         mode=AnnotationSession.Mode.VALIDATE)
        client.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(session))
        client.session_row = session
        return client
    client.force_login(user)
    if kind == "trusted":
        researcher = task.owners.first()
        trust.vouch(task, user, researcher)
    elif kind == "new_account":
        type(user).objects.filter(pk=user.pk).update(date_joined=timezone.now() - timedelta(minutes=5))
    elif kind == "unconfirmed":
        AccountEmail.objects.create(user=user, email=f"{user.username}@example.org")
    return client


def without(value, keys):
    """``value`` with the given keys left out wherever they occur (ids, times)."""
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


def my_page_tables(client, user, item_pk):
    """The /me/ page's standing and validations tables, with the one user's name, the
    item's id, the row ids and the times taken out."""
    page = client.get("/me/").content.decode()
    parts = [re.search(r'<table id="my-standing">.*?</table>', page, re.S).group(0),
             re.search(r'<table id="my-validations">.*?</table>', page, re.S).group(0)]
    text = " ".join(" ".join(parts).split())
    text = re.sub(r'data-validation="\d+"', "", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", "TIME", text)
    return text.replace(f"<td>{item_pk}</td>", "<td>ITEM</td>").replace(user.username, "USER")


def everything_shown(client, user, item, label, *, confirm=False):
    """Serve ``item`` to ``user`` (the queue's next), answer blind and decide through the
    API; what they were shown at each step, and their page afterwards."""
    served = client.get("/api/tasks/sentiment/validations/next/")
    assert served.status_code == 200 and served.json()["id"] == item.pk, served.content
    blind = client.post(f"/api/examples/{item.pk}/blind-answer/", {"answer": {"label": "positive"}},
                        format="json")
    decided = client.post(f"/api/examples/{item.pk}/validations/", {"label": label}, format="json")
    assert blind.status_code == 201 and decided.status_code == 201, decided.content
    if confirm:  # MTurk confirmed the assignment: its decisions count from now (the service sync calls)
        validation.confirm_session(client.session_row)
    me_client = client
    if confirm:
        me_client = APIClient()
        me_client.force_login(user)
    mine = me_client.get("/api/me/").json()
    return {
        "served": without(served.json(), {"id"}),
        "blind": blind.json(),
        "decided": without(decided.json(), {"id"}),
        "api_me": without(mine, {"id", "example", "created_at", "username"}),
        "me_page": my_page_tables(me_client, user, item.pk),
    }


@pytest.mark.parametrize("kind", ["untrusted", "trusted", "new_account", "unconfirmed", "provisional"])
@pytest.mark.parametrize("label", ["correct", "incorrect"])
def test_a_validator_cannot_tell_a_gold_item_from_an_ordinary_one(demo_tasks, researcher, production_steps,
                                                                   kind, label):
    """One validator is served a gold item, a twin in the same situation its ordinary twin
    (same text, answer, model answer, round); every reply and page each sees, ids and times
    aside, is the same: the item, the blind answer's reply, the decision's answer (whether it
    counts, why not, the note), /api/me/ and /me/ (the decision, whether it counted, the
    standing with the record on checked items)."""
    task = demo_tasks["sentiment"]
    writer = account("writer", WRITER_ADDRESS)
    gold_item, plain = twin(task, writer, 9001), twin(task, writer, 9002)
    validation.mark_gold(gold_item.pk, researcher, "correct")
    gold_item.refresh_from_db()
    earlier = account("earlier", "198.51.100.200")  # a newcomer answered both before: their votes do not count
    for item in (gold_item, plain):
        vote(earlier, item, "correct")
    one, other = account("validator_a", "198.51.100.201"), account("validator_b", "198.51.100.202")
    sees_gold, sees_plain = situation(one, task, kind), situation(other, task, kind)

    set_gold_rate(task, 1.0)  # the draw serves the gold item first
    on_gold = everything_shown(sees_gold, one, gold_item, label, confirm=kind == "provisional")
    set_gold_rate(task, 0.0)
    on_plain = everything_shown(sees_plain, other, plain, label, confirm=kind == "provisional")

    for response in on_gold:
        assert on_gold[response] == on_plain[response], response
    # The gold item's answer decided nothing, and it is stored so; the validators were told
    # what they would have been told on any item.
    stored = Validation.objects.get(example=gold_item, validator=one)
    assert stored.not_counted_because == "gold" and stored.gold_agrees == (label == "correct")
    expected_counted = kind in ("trusted", "provisional")
    assert on_gold["decided"]["counted"] is (expected_counted and kind != "provisional")
    assert on_gold["api_me"]["validations"][0]["counted"] is expected_counted
    assert on_gold["decided"]["example"]["validation_status"] is None  # no outcome is told
    gold_item.refresh_from_db()
    assert gold_item.validation_status == "verified"  # the researcher's verdict stands


def test_an_id_the_queue_did_not_serve_answers_alike_for_a_gold_item_and_a_decided_one(demo_tasks, researcher,
                                                                                      client_for):
    """A script posts blind answers and decisions on ids it was never served: a gold item
    and a decided ordinary example answer the same (409 ``not_assigned``), so probing ids
    does not find the gold items (before, the decided example said "decided already")."""
    task = demo_tasks["sentiment"]
    writer = account("writer", WRITER_ADDRESS)
    gold_item, decided = twin(task, writer, 9011), twin(task, writer, 9012)
    validation.mark_gold(gold_item.pk, researcher, "correct")
    validation.validate_example(decided.pk, researcher, label="correct")
    prober = client_for(account("prober", "198.51.100.210"))
    replies = {}
    for item in (gold_item, decided):
        blind = prober.post(f"/api/examples/{item.pk}/blind-answer/", {"answer": {"label": "positive"}},
                            format="json")
        vote_reply = prober.post(f"/api/examples/{item.pk}/validations/", {"label": "correct"}, format="json")
        replies[item.pk] = [(r.status_code, r.json()["code"], r.json()["detail"]) for r in (blind, vote_reply)]
    assert replies[gold_item.pk] == replies[decided.pk]
    assert replies[gold_item.pk][0][:2] == (409, "not_assigned")
    assert not Validation.objects.filter(validator__username="prober").exists()


def test_the_record_on_checked_items_moves_only_when_a_step_of_decisions_closes(demo_tasks, researcher,
                                                                                production_steps):
    """Twenty decisions make a step: before it closes, no answer on a gold item shows in
    the validator's record (nor decides their trust); when it closes, the whole step joins
    at once, at a point the validator knew in advance."""
    task = demo_tasks["sentiment"]
    writer = account("writer", WRITER_ADDRESS)
    validator = account("stepper", "198.51.100.220")
    gold_items = [twin(task, writer, 9100 + i) for i in range(6)]
    for item in gold_items:
        validation.mark_gold(item.pk, researcher, "correct")
    for item in gold_items:  # six gold items answered right, then ordinary ones
        vote(validator, item, "correct")
        assert trust.standing(task, validator).answers == 0
    for i in range(13):
        vote(validator, twin(task, writer, 9200 + i), "correct")
        assert trust.standing(task, validator).answers == 0
    assert not Validation.objects.filter(validator=validator, in_record=True).exists()
    vote(validator, twin(task, writer, 9300), "correct")  # the twentieth decision closes the step
    assert trust.standing(task, validator).answers == 6
    assert Validation.objects.filter(validator=validator, in_record=False).count() == 0
    assert "6 answers on checked items so far" in trust.standing(task, validator).describe()  # under ten: no rate


def test_a_validator_at_the_failed_gold_edge_learns_nothing_from_their_next_decision(demo_tasks, researcher,
                                                                                     production_steps):
    """The attack: stand at the edge of the failed-gold stop (5 checked answers, 3 right:
    60%, the rule's floor), then answer the next item wrongly on purpose and watch the
    decision after it. Were the record to move with each answer, a gold item would show
    at once (the stop: ``failed_gold``); it moves at the step's end, so nothing shows."""
    task = demo_tasks["sentiment"]
    writer = account("writer", WRITER_ADDRESS)
    attacker = account("edge", "198.51.100.230")
    gold_items = [twin(task, writer, 9400 + i) for i in range(6)]
    for item in gold_items:
        validation.mark_gold(item.pk, researcher, "correct")
    for i, item in enumerate(gold_items[:5]):
        vote(attacker, item, "correct" if i < 3 else "incorrect")
    for i in range(15):  # the step closes at the twentieth decision: the five join the record
        vote(attacker, twin(task, writer, 9500 + i), "correct")
    assert (trust.checked_record(task, attacker), trust.failed_gold(task, attacker)) == ((5, 3), False)
    vote(attacker, gold_items[5], "incorrect")  # 3 of 6 would be under 60%
    after = vote(attacker, twin(task, writer, 9600), "correct")
    assert after.not_counted_because == "untrusted"  # not "failed_gold": nothing points at the gold item
    assert not trust.failed_gold(task, attacker)
    for i in range(18):  # the rest of the step: it closes, and the stop applies from then on
        vote(attacker, twin(task, writer, 9700 + i), "correct")
    assert trust.failed_gold(task, attacker)
    assert vote(attacker, twin(task, writer, 9800), "correct").not_counted_because == "failed_gold"


def test_the_agreement_is_shown_only_over_enough_checked_answers(settings):
    settings.CHECKED_AGREEMENT_MIN_ANSWERS = 10
    settings.CHECKED_RECORD_STEP = 20
    few = trust.Standing(answers=9, agreeing=9, min_answers=20, min_agreement=0.8)
    assert "%" not in few.describe().split(";")[0] and "9 answers on checked items so far" in few.describe()
    enough = trust.Standing(answers=10, agreeing=8, min_answers=20, min_agreement=0.8)
    assert enough.describe().startswith("10 answers on checked items, 80% agreeing")
    assert "every 20 decisions" in enough.describe()
    assert record.shown_agreement(10) and not record.shown_agreement(9)


def test_gold_answers_made_before_the_migration_are_told_as_the_validators_other_decisions(demo_tasks, researcher):
    """Answers on gold items stored before ``shown_not_counted_because`` existed: the
    migration tells each as the validator's nearest ordinary decision on the task was told
    (else as a newcomer's, untrusted), so that their page does not set them apart."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("annotation.migrations.0023_gold_secrecy")
    task = demo_tasks["sentiment"]
    writer = account("writer", WRITER_ADDRESS)
    gold_items = [twin(task, writer, 9900 + i) for i in range(3)]
    for item in gold_items:
        validation.mark_gold(item.pk, researcher, "correct")
    newcomer, trusted, only_gold = (account(name, f"198.51.100.{240 + i}")
                                    for i, name in enumerate(["newcomer", "trusted", "only_gold"]))
    trust.vouch(task, trusted, researcher)
    for user in (newcomer, trusted):
        vote(user, twin(task, writer, 9950 + user.pk), "correct")
    for user in (newcomer, trusted, only_gold):
        vote(user, gold_items[0], "incorrect")
    Validation.objects.filter(not_counted_because="gold").update(shown_not_counted_because="")  # as stored before
    migration.tell_gold_answers_as_any_other(apps, None)
    told = dict(Validation.objects.filter(example=gold_items[0], mode="user")
                .values_list("validator__username", "shown_not_counted_because"))
    assert told == {"newcomer": "untrusted", "trusted": "", "only_gold": "untrusted"}
