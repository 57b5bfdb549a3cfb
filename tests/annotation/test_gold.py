"""Gold items and who the reliability fit believes, from the attacker's side: a ring of
aged accounts at distinct addresses that vote together, patient copiers, and flags
(``annotation.gold``, ``trust``, ``reliability``)."""

import random

import pytest

from annotation import gold, reliability, serving, sessions, trust, validation
from annotation import reliability_model as R
from annotation.models import AnnotationSession, Example, Validation, ValidatorReliability
from annotation.stats import round_stats

from .test_trust import account, paid, vote, with_trust_rule, write

pytestmark = pytest.mark.django_db


def gold_set(task, researcher, writer, verdicts):
    """Examples by ``writer`` that the researcher makes gold items with ``verdicts``."""
    items = []
    for i, verdict in enumerate(verdicts):
        label = "positive" if verdict == "correct" else "negative"  # "A fine film" is positive
        example = write(task, writer, label=label, text=f"A fine film, gold {i}")
        items.append(validation.mark_gold(example.pk, researcher, verdict))
    return items


def answer_gold(user, items, *, right: bool | None = None, always: str | None = None):
    """``user`` answers each gold item: rightly, wrongly, or ``always`` the same label."""
    for item in items:
        label = always or (item.gold_verdict if right else
                           ("incorrect" if item.gold_verdict == "correct" else "correct"))
        vote(user, item, label)


def test_a_ring_of_aged_accounts_decides_no_paid_example_and_moves_no_public_rate(demo_tasks, researcher,
                                                                                   annotator):
    task = demo_tasks["sentiment"]  # the default rule: only trusted votes decide, on every example
    items = gold_set(task, researcher, annotator, ["correct", "incorrect"] * 3)
    before = round_stats(task.open_round())
    ring = [account(f"ring{i}", f"198.51.100.{60 + i}") for i in range(3)]
    written = []
    for i, writer in enumerate(ring):
        written.append(write(task, writer, label="negative", text=f"A fine film {i}"))  # mislabelled, "fooled"
        written.append(paid(task, writer, label="negative", text=f"Paid {i}"))
    for example in written:
        for voter in ring:
            if voter.pk != example.annotator_id:
                decided = vote(voter, example, "correct")
                assert not decided.counted and decided.not_counted_because == "untrusted"
    for member in ring:  # the script says "correct" to everything, gold items included
        answer_gold(member, items, always="correct")
    for example in written:
        example.refresh_from_db()
        assert example.validation_status == "pending" and example.validations_correct == 0
    after = round_stats(task.open_round())
    assert after["verified_fooled"] == before["verified_fooled"]  # the gold items' own
    assert after["verified"] == before["verified"]
    # Always "correct" is no better than the constant answer: no trust, and below the
    # gold threshold (3 of 6 right, under 60%) their votes stop counting at all.
    for member in ring:
        record = trust.standing(task, member)
        assert (record.answers, record.agreeing, record.trusted) == (6, 3, False)
        assert trust.failed_gold(task, member)
    late = write(task, annotator, text="Late one")
    assert vote(ring[0], late).not_counted_because == "failed_gold"
    # The fit learns nothing from the ring's votes on their own examples: only their
    # gold answers, which show them for what they are.
    learned = {(example, validator) for example, validator, *_ in reliability.learning_votes(task)}
    ring_ids = {member.pk for member in ring}
    assert not {pair for pair in learned if pair[1] in ring_ids and pair[0] not in {i.pk for i in items}}
    reliability.refit(task)
    newcomer = R.Reliability.newcomer().strength
    for row in ValidatorReliability.objects.filter(task=task, validator__in=ring):
        assert row.weight <= newcomer


def test_an_honest_validator_who_passes_gold_items_earns_trust_and_weight(demo_tasks, researcher, annotator):
    """On a task whose researchers trust gold items alone (``min_reference_answers: 0``;
    the default asks for answers on examples others decided too, below)."""
    task = with_trust_rule(demo_tasks["sentiment"], min_answers=6, min_agreement=0.8, min_reference_answers=0)
    task.config = {**task.config, "validation": {"policy": "adaptive"}}
    task.save()
    items = gold_set(task, researcher, annotator, ["correct", "incorrect"] * 3)
    honest = account("honest", "198.51.100.80")
    example = write(task, annotator, text="Before the gold")
    assert vote(honest, example).not_counted_because == "untrusted"
    answer_gold(honest, items, right=True)
    record = trust.standing(task, honest)
    assert (record.answers, record.agreeing, record.trusted) == (6, 6, True)
    assert vote(honest, write(task, annotator, text="After the gold")).counted
    reliability.refit(task)
    row = ValidatorReliability.objects.get(task=task, validator=honest)
    assert row.weight > R.Reliability.newcomer().strength  # gold answers support it


def test_gold_answers_alone_earn_no_trust_by_default(demo_tasks, researcher, annotator):
    """A ring that knows every gold verdict answers all twenty right. By default that is not
    trust: the rule also asks for answers on examples that others decided after the
    answer was given, which nobody can know in advance. There a validator who tells the
    truth agrees, and one who lies on paid examples does not."""
    task = demo_tasks["sentiment"]  # the default rule: 20 checked answers, 5 of them on such examples
    items = gold_set(task, researcher, annotator, ["correct", "incorrect"] * 12)
    knows, honest = account("knows", "198.51.100.95"), account("honest", "198.51.100.96")
    for user in (knows, honest):
        answer_gold(user, items[:20], right=True)
        record = trust.standing(task, user)
        assert (record.answers, record.agreeing, record.reference_answers, record.trusted) == (20, 20, 0, False)
        assert "on examples that others decided after your answer" in record.describe()
    for item in items[20:]:  # blind answers alone on gold items are no reference answers either
        serving.assign(item, knows)
        validation.give_blind_answer(item.pk, knows, item.target)
    assert trust.standing(task, knows).reference_answers == 0
    deciders = [account(f"decider{i}", f"198.51.100.{97 + i}") for i in range(2)]
    for user in deciders:
        trust.vouch(task, user, researcher)
    writer = account("writer", "203.0.113.90")
    hit = sessions.start_session(writer, task, mturk_assignment_id="A-writer", mode=AnnotationSession.Mode.CREATE)
    for i in range(5):
        example = write(task, writer, text=f"A fine film, paid {i}", session=hit)
        assert vote(honest, example, "correct").not_counted_because == "untrusted"
        assert vote(knows, example, "incorrect", answer={"label": "negative"}).not_counted_because == "untrusted"
        for user in deciders:
            vote(user, example, "correct")
        example.refresh_from_db()
        assert example.validation_status == "verified"
    assert trust.standing(task, honest).trusted
    record = trust.standing(task, knows)
    assert (record.reference_answers, record.reference_agreeing, record.trusted) == (5, 0, False)
    assert vote(knows, write(task, writer, text="A fine film, paid again", session=hit)).not_counted_because == \
        "untrusted"


def test_agreeing_with_the_writer_every_time_earns_no_trust(demo_tasks, researcher, annotator):
    """Copying: three in four gold items have the writer right, so always "correct"
    scores 75%, the rule's bar, and still no more than the constant answer."""
    task = with_trust_rule(demo_tasks["sentiment"], min_answers=4, min_agreement=0.75, min_reference_answers=0)
    items = gold_set(task, researcher, annotator, ["correct", "correct", "correct", "incorrect"])
    copier, honest = account("copier", "198.51.100.90"), account("honest", "198.51.100.91")
    answer_gold(copier, items, always="correct")
    answer_gold(honest, items, right=True)
    assert trust.standing(task, copier).agreement == 0.75 and not trust.standing(task, copier).trusted
    assert trust.standing(task, honest).trusted
    # The fit reads many validators' records at once: the same records.
    assert trust.standings(task, [copier.pk, honest.pk]) == {copier.pk: trust.standing(task, copier),
                                                              honest.pk: trust.standing(task, honest)}


def test_an_unchecked_weight_is_capped_at_a_newcomers(demo_tasks, researcher, annotator):
    """Two vouched validators who always agree look reliable to the EM; with no gold item
    or researcher's decision behind it, the weight stays a newcomer's, and one gold answer
    adds what one answer supports, not what the EM makes of their agreement."""
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "validation": {"policy": "adaptive", "min_votes": 5, "max_votes": 5}}
    task.save()
    pair = [account(f"pair{i}", f"198.51.100.{100 + i}") for i in range(2)]
    for member in pair:
        trust.vouch(task, member, researcher)
    for i in range(12):
        example = write(task, annotator, text=f"Agreed {i}")
        for member in pair:
            assert vote(member, example).counted
    reliability.refit(task)
    newcomer = R.Reliability.newcomer().strength
    assert all(row.weight <= newcomer + 1e-9 for row in ValidatorReliability.objects.filter(task=task))
    # One gold answer each no longer lifts the cap: the weight is what one answer supports
    # (the prior and one right answer where the writer was right), either way.
    [item] = gold_set(task, researcher, annotator, ["correct"])
    for member in pair:
        vote(member, item, "correct")
    reliability.refit(task)
    one_answer = R.Reliability(4 + 1, 1, 4, 1)
    for row in ValidatorReliability.objects.filter(task=task):
        fitted = R.Reliability(row.s_hits, row.s_misses, row.t_hits, row.t_misses)
        for says in (True, False):
            assert abs(fitted.weight(says)) <= abs(one_answer.weight(says)) + 1e-9, (row.validator.username, says)


def test_gold_items_look_like_any_other_item_before_and_after(demo_tasks, researcher, annotator, client_for):
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "validation": {"gold_rate": 1.0}}
    task.save()
    [item] = gold_set(task, researcher, annotator, ["incorrect"])
    plain = write(task, annotator, text="A plain one")
    validator = account("validator", "198.51.100.110")
    client = client_for(validator)
    served = client.get("/api/tasks/sentiment/validations/next/").json()
    assert served["id"] == item.pk  # gold_rate 1: the gold item first
    assert set(served) == {"id", "round", "context", "inputs", "blind", "blind_answer", "target", "prediction",
                           "fooled"}
    assert served["target"] is None  # the researcher's verdict is not shown
    assert client.post(f"/api/examples/{item.pk}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 201
    on_gold = client.post(f"/api/examples/{item.pk}/validations/", {"label": "correct"}, format="json").json()
    serving.assign(plain, validator)
    client.post(f"/api/examples/{plain.pk}/blind-answer/", {"answer": {"label": "positive"}}, format="json")
    on_plain = client.post(f"/api/examples/{plain.pk}/validations/", {"label": "correct"}, format="json").json()
    for body in (on_gold, on_plain):
        assert body["example"]["validation_status"] is None  # a validator is not told outcomes
        assert (body["counted"], body["not_counted_because"]) == (False, "untrusted")
    assert on_gold["note"] == on_plain["note"]
    assert {k: v for k, v in on_gold["example"].items() if k != "id"} == \
        {k: v for k, v in on_plain["example"].items() if k != "id"}
    stored = Validation.objects.get(example=item, validator=validator)
    assert (stored.not_counted_because, stored.gold_agrees, stored.counted) == ("gold", False, False)
    item.refresh_from_db()
    assert item.validation_status == "rejected"  # the researcher's verdict stands
    # Each gold item is served once: the next is the plain queue (empty now).
    assert client.get("/api/tasks/sentiment/validations/next/").status_code == 204


def test_gold_items_are_mixed_in_at_the_configured_rate(demo_tasks, researcher, annotator):
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "validation": {"gold_rate": 0.25}}
    task.save()
    gold_set(task, researcher, annotator, ["correct"] * 3)
    validator = account("validator", "198.51.100.120")
    rng = random.Random(7)
    draws = [gold.pick(task, validator, rng) is not None for _ in range(400)]
    assert 0.18 < sum(draws) / len(draws) < 0.32
    task.config = {**task.config, "validation": {"gold_rate": 0}}
    task.save()
    assert gold.pick(task, validator, rng) is None


class Always(random.Random):
    """A draw that always serves a gold item, from a random start."""

    def random(self):
        return 0.0

    def getrandbits(self, k):  # (defined, so that randint still draws from the seed)
        return super().getrandbits(k)


def test_a_draw_walks_the_gold_items_a_page_at_a_time_and_skips_the_answered(demo_tasks, researcher, annotator,
                                                                             monkeypatch):
    """Whatever the random start, the one gold item left unanswered is found (the walk
    wraps round); none is served twice, nor one the validator's own account wrote; and
    past the page budget a draw gives up instead of reading the whole gold set."""
    task = demo_tasks["sentiment"]
    items = gold_set(task, researcher, annotator, ["correct", "incorrect"] * 3)
    validator = account("walker", "198.51.100.121")
    monkeypatch.setattr(gold, "GOLD_PAGE", 2)
    answer_gold(validator, items[:2] + items[3:], right=True)
    for seed in range(12):
        assert gold.pick(task, validator, Always(seed)) == items[2]
    assert gold.pick(task, annotator, Always(1)) is None  # they wrote every one
    answer_gold(validator, items[2:3], right=True)
    assert all(gold.pick(task, validator, Always(seed)) is None for seed in range(6))
    newcomer = account("newcomer", "198.51.100.122")
    monkeypatch.setattr(gold, "GOLD_PAGES", 1)
    seen = {gold.pick(task, newcomer, Always(seed)) for seed in range(30)}
    assert None not in seen and len(seen) > 1  # a random start, not always the first


def test_only_researchers_mark_gold_items_with_a_verdict_that_agrees(demo_tasks, researcher, annotator,
                                                                       client_for):
    task = demo_tasks["sentiment"]
    example = write(task, annotator)
    stranger = client_for(account("stranger", "198.51.100.130"))
    assert stranger.post(f"/api/examples/{example.pk}/gold/", {"verdict": "correct"},
                         format="json").status_code == 403
    owner = client_for(researcher)
    bad = owner.post(f"/api/examples/{example.pk}/gold/", {"verdict": "maybe"}, format="json")
    assert bad.status_code == 400 and "verdict" in bad.json()["errors"]
    done = owner.post(f"/api/examples/{example.pk}/gold/", {"verdict": "incorrect"}, format="json")
    assert done.status_code == 200 and done.json()["validation_status"] == "rejected"
    again = owner.post(f"/api/examples/{example.pk}/gold/", {"verdict": "correct"}, format="json")
    assert again.status_code == 409
    example.refresh_from_db()
    assert example.gold_verdict == "incorrect" and example.validation_status == "rejected"


def test_a_paid_example_needs_two_validators_who_are_not_one_person(demo_tasks, researcher, annotator):
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "num_matching_validations": 1, "validation": {"policy": "fixed"}}
    task.save()
    example = paid(task, annotator)
    first, twin, other = (account("first", "198.51.100.140"), account("twin", "198.51.100.140"),
                          account("other", "198.51.100.141"))
    for user in (first, twin, other):
        trust.vouch(task, user, researcher)
    assert vote(first, example).counted
    example.refresh_from_db()
    assert example.validation_status == "pending"  # one vote would do on an unpaid example
    assert vote(twin, example).counted
    example.refresh_from_db()
    assert example.validation_status == "pending"  # the same person twice
    assert vote(other, example).counted
    example.refresh_from_db()
    assert example.validation_status == "verified"
    unpaid = write(task, annotator, text="Unpaid")
    vote(first, unpaid)
    unpaid.refresh_from_db()
    assert unpaid.validation_status == "verified"


def test_users_flags_on_a_paid_example_wait_for_a_researcher(demo_tasks, researcher, annotator):
    task = demo_tasks["sentiment"]
    example = paid(task, annotator)
    flaggers = [account(f"flagger{i}", f"198.51.100.{150 + i}") for i in range(3)]
    for user in flaggers:
        trust.vouch(task, user, researcher)
        assert vote(user, example, "flagged").counted
    example.refresh_from_db()
    assert example.validation_status == Example.ValidationStatus.ESCALATED  # not settled at $0 by users
    validation.validate_example(example.pk, researcher, label="correct")
    example.refresh_from_db()
    assert example.validation_status == "verified"


def test_flags_on_gold_items_count_as_wrong(demo_tasks, researcher, annotator):
    task = with_trust_rule(demo_tasks["sentiment"], gold_min_answers=3, gold_min_agreement=0.6)
    items = gold_set(task, researcher, annotator, ["correct", "incorrect", "correct"])
    flagger = account("flagger", "198.51.100.160")
    answer_gold(flagger, items, always="flagged")
    assert trust.checked_record(task, flagger) == (3, 0) and trust.failed_gold(task, flagger)


def test_flags_and_votes_are_judged_against_researchers_decisions(demo_tasks, researcher, annotator):
    """A flag-only voter was never judged; now every decision a researcher's verdict
    checks counts: five flags on examples the researcher then verified fail."""
    task = with_trust_rule(demo_tasks["sentiment"], gold_min_answers=5, gold_min_agreement=0.6, decides="paid")
    flagger, careful = account("flagger", "198.51.100.170"), account("careful", "198.51.100.171")
    for i in range(5):
        example = write(task, annotator, text=f"Checked by a researcher {i}")
        vote(flagger, example, "flagged")
        vote(careful, example, "correct")
        validation.validate_example(example.pk, researcher, label="correct")
    assert trust.checked_record(task, flagger) == (5, 0) and trust.failed_gold(task, flagger)
    assert trust.checked_record(task, careful) == (5, 5) and not trust.failed_gold(task, careful)
    assert vote(flagger, write(task, annotator, text="Next")).not_counted_because == "failed_gold"


def test_flags_are_weighed_like_other_votes_on_an_adaptive_task(demo_tasks, researcher, annotator):
    """Three newcomers' flags no longer flag an example by their count: they are weighed
    as evidence against it, like "incorrect" votes; validators the fit knows flag it."""
    from tests.annotation.test_adaptive_validation import adaptive, known

    task = adaptive(demo_tasks["sentiment"], max_votes=10)
    example = write(task, annotator, text="Unanswerable?")
    for i in range(3):
        vote(account(f"newflag{i}", f"198.51.100.{180 + i}"), example, "flagged")
    example.refresh_from_db()
    # from a prior of 0.8, three flags at a newcomer's weight: 0.06, not yet sure enough
    assert example.validation_status == "pending" and 0.05 < example.decision_posterior < 0.07
    other = write(task, annotator, text="Unanswerable, surely")
    for i in range(2):
        vote(known(task, account(f"expertflag{i}", f"198.51.100.{190 + i}")), other, "flagged")
    other.refresh_from_db()
    assert other.validation_status == "flagged" and other.decision_posterior < 0.002


def test_only_the_tasks_researchers_vouch_for_validators(demo_tasks, researcher, other_researcher, annotator,
                                                          client_for):
    """A researcher of another task, or a validator vouching for their own second account,
    makes no one trusted: through the service and through the admin's add form."""
    from annotation.models import VouchedValidator
    from core.errors import Forbidden

    task = demo_tasks["sentiment"]
    puppet = account("puppet", "198.51.100.200")
    for outsider in (other_researcher, account("self_voucher", "198.51.100.201")):
        with pytest.raises(Forbidden):
            trust.vouch(task, puppet, outsider)
    admin = client_for(other_researcher)
    response = admin.post("/admin/annotation/vouchedvalidator/add/", {"task": task.pk, "validator": puppet.pk})
    assert response.status_code in (200, 403)  # the form refuses a task that is not theirs
    assert not VouchedValidator.objects.exists() and not trust.standing(task, puppet).trusted
    trust.vouch(task, puppet, researcher)
    assert trust.standing(task, puppet).trusted
