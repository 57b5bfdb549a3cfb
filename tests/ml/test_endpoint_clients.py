"""ml.endpoints against a protocol-level fake OpenAI-compatible server: the answer read
strictly, retries within the wait budget, and every failure case, with no word of the
endpoint's own error text in any message. The fake listens on 127.0.0.1, which the
policy these tests pass allows explicitly (the default refuses it:
tests/ml/test_endpoint_network.py)."""

import logging
import time

import pytest

from ml import TaskSpec
from ml import endpoints as remote
from ml.endpoints import oip_v2, prompts
from ml.endpoints.transport import retry_after_seconds
from tests.fake_openai import FakeOpenAI

SENTIMENT = TaskSpec(kind="classification", labels=["negative", "positive"], input_fields=["statement"])
QA = TaskSpec(kind="extractive_qa")
ROW = {"statement": "The film was a delight."}
LOCAL = remote.NetworkPolicy(allowed_hosts=("127.0.0.1",))  # the fake's address, allowed by name


def endpoint(fake, **kwargs):
    return remote.Endpoint(protocol="openai", url=fake.url, model="fake-chat", network=LOCAL, **kwargs)


@pytest.fixture
def fake():
    with FakeOpenAI(slow_seconds=1.5) as server:
        yield server


def test_parse_label_is_strict():
    labels = ["negative", "positive"]
    assert prompts.parse_label("positive", labels) == "positive"
    assert prompts.parse_label("  'Positive'.\n", labels) == "positive"
    for answer in ("positive or negative", "The answer is positive", "", "pos", None, "negative positive"):
        assert prompts.parse_label(answer, labels) is None, answer


def test_parse_span_must_be_copied_from_the_passage():
    passage = "The library opens at nine in the morning."
    assert prompts.parse_span("at nine", passage) == (18, 25)
    assert prompts.parse_span("\"nine in the morning.\"", passage) == (21, 41)
    assert prompts.parse_span("at 9", passage) is None
    assert prompts.parse_span("  ", passage) is None


def test_a_writers_text_never_reaches_into_the_template():
    values = prompts.values_for({"statement": "{labels} {__class__} }{"}, ["a", "b"], {})
    text = prompts.render("Say: {statement} / {labels}", values)
    assert text == "Say: {labels} {__class__} }{ / a, b"
    assert prompts.check_template("{statement} {secret}", {"statement"}).startswith("unknown placeholders")


def test_a_chat_answer_with_its_raw_text_tokens_and_the_request_shape(fake):
    fake.api_key = "sk-test-key"
    [prediction] = remote.predict(endpoint(fake, secret="sk-test-key", secret_hosts=("127.0.0.1",)), SENTIMENT,
                                  [ROW], budget=5)
    assert prediction["label"] == "positive" and prediction["probabilities"] == {"negative": 0.0, "positive": 1.0}
    info = prediction["endpoint"]
    assert info["raw"] == "positive" and len(info["raw_sha256"]) == 64 and info["attempts"] == 1
    assert info["prompt_tokens"] > 5 and info["completion_tokens"] == 1 and info["latency_ms"] > 0
    [request] = fake.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["temperature"] == 0 and request["body"]["model"] == "fake-chat"
    assert request["body"]["n"] == 1
    user = request["body"]["messages"][-1]["content"]
    assert "The film was a delight." in user and "negative, positive" in user
    assert request["headers"]["Authorization"] == "Bearer sk-test-key"


def test_an_answer_that_cannot_be_read_is_recorded_as_such(fake):
    fake.answer = lambda text: "It is probably positive, but maybe negative."
    [prediction] = remote.predict(endpoint(fake), SENTIMENT, [ROW], budget=5)
    assert prediction["unparseable"] is True and prediction["label"] is None
    assert prediction["endpoint"]["raw"] == "It is probably positive, but maybe negative."


def test_a_qa_answer_is_a_span_of_the_passage(fake):
    row = {"passage": "The library opens at nine in the morning.", "question": "When does it open?"}
    fake.answer = lambda text: "at nine in the morning"
    [prediction] = remote.predict(endpoint(fake), QA, [row], budget=5)
    assert prediction["answer"] == "at nine in the morning" and (prediction["start"], prediction["end"]) == (18, 40)
    fake.answer = lambda text: "At 9 am"
    [prediction] = remote.predict(endpoint(fake), QA, [row], budget=5)
    assert prediction["unparseable"] and prediction["answer"] == ""


@pytest.mark.parametrize("fault", ["429", "500", "503", "drop"])
def test_transient_failures_are_retried(fake, fault):
    fake.fail(fault, fault)
    [prediction] = remote.predict(endpoint(fake), SENTIMENT, [ROW], budget=10)
    assert prediction["label"] == "positive" and prediction["endpoint"]["attempts"] == 3
    assert len(fake.requests) == 3


def test_a_timeout_is_retried_within_the_budget(fake):
    fake.fail("timeout")
    [prediction] = remote.predict(endpoint(fake, timeout=0.5), SENTIMENT, [ROW], budget=5)
    assert prediction["label"] == "positive" and prediction["endpoint"]["attempts"] == 2


def test_failures_past_the_wait_budget_are_unavailable(fake):
    fake.fail(*["503"] * 50)
    started = time.monotonic()
    with pytest.raises(remote.EndpointUnavailable) as caught:
        remote.predict(endpoint(fake), SENTIMENT, [ROW], budget=1.0)
    assert time.monotonic() - started < 2.0
    assert "HTTP 503" in caught.value.message and caught.value.retry_after is not None
    fake.faults.clear()
    fake.fail(*["timeout"] * 5)
    started = time.monotonic()
    with pytest.raises(remote.EndpointUnavailable, match="no answer within"):
        remote.predict(endpoint(fake, timeout=0.3), SENTIMENT, [ROW], budget=0.8)
    assert time.monotonic() - started < 1.5


def test_a_429_whose_retry_after_is_beyond_the_budget_is_not_waited_for():
    assert retry_after_seconds("7") == 7 and retry_after_seconds("soon") is None and retry_after_seconds("-1") is None
    with FakeOpenAI() as fake:
        fake.fail("429")
        # The fake says Retry-After: 0; a long one is honoured by giving up at once.
        from ml.endpoints import transport

        sleeps = []
        response = transport.post_json(fake.url + "/v1/chat/completions",
                                       {"model": "fake-chat", "messages": [{"role": "user", "content": "x"}]},
                                       network=LOCAL, timeout=2, budget=3, sleep=sleeps.append)
        assert response.attempts == 2 and sleeps == [0.0]


def test_a_refusal_is_not_retried_and_never_shows_the_key_or_the_endpoints_text(fake, caplog):
    fake.api_key = "sk-right"  # the fake's 401 echoes the key it was given, as OpenAI's does
    caplog.set_level(logging.DEBUG)
    wrong = endpoint(fake, secret="sk-wrong-secret-value", secret_hosts=("127.0.0.1",))
    with pytest.raises(remote.EndpointRejected) as caught:
        remote.predict(wrong, SENTIMENT, [ROW], budget=5)
    assert len(fake.requests) == 1 and "HTTP 401" in caught.value.message and "key" in caught.value.message
    assert "sk-wrong-secret-value" not in caught.value.message and "Incorrect API key" not in caught.value.message
    assert "sk-wrong-secret-value" not in caplog.text
    assert "sk-wrong-secret-value" not in repr(wrong)


def test_unknown_models_and_malformed_answers(fake):
    with pytest.raises(remote.EndpointRejected, match="no such path or model") as caught:
        remote.predict(remote.Endpoint(protocol="openai", url=fake.url, model="nope", network=LOCAL), SENTIMENT,
                       [ROW], budget=5)
    assert "does not exist" not in caught.value.message  # the fake's own words are not repeated
    fake.fail("not_json")
    with pytest.raises(remote.EndpointProtocolError, match="not JSON"):
        remote.predict(endpoint(fake), SENTIMENT, [ROW], budget=5)
    fake.fail("no_choices")
    with pytest.raises(remote.EndpointProtocolError, match="choices"):
        remote.predict(endpoint(fake), SENTIMENT, [ROW], budget=5)


def test_a_refused_connection_is_unavailable():
    with FakeOpenAI() as fake:
        url = fake.url
    with pytest.raises(remote.EndpointUnavailable, match="could not be reached") as caught:
        remote.predict(remote.Endpoint(protocol="openai", url=url, model="fake-chat", network=LOCAL), SENTIMENT,
                       [ROW], budget=0.6)
    assert caught.value.billable is False  # nothing was sent: nothing to pay for


def test_v2_answers_are_checked_for_shape_and_type():
    rows = [ROW, {"statement": "Dull."}]
    good = {"outputs": [{"name": "probabilities", "shape": [2, 2], "datatype": "FP32",
                         "data": [0.2, 0.8, 0.9, 0.1]}]}
    assert [p["label"] for p in oip_v2.interpret(SENTIMENT, rows, good)] == ["positive", "negative"]
    nested = {"outputs": [{**good["outputs"][0], "data": [[0.2, 0.8], [0.9, 0.1]]}]}
    assert [p["label"] for p in oip_v2.interpret(SENTIMENT, rows, nested)] == ["positive", "negative"]
    for bad, message in [
        ({"outputs": []}, "no single output"),
        ({"outputs": [{**good["outputs"][0], "shape": [2, 3]}]}, "shape"),
        ({"outputs": [{**good["outputs"][0], "datatype": "BYTES"}]}, "datatype"),
        ({"outputs": [{**good["outputs"][0], "data": [0.2, 0.8, 0.9]}]}, "does not hold 4 values"),
        ({"outputs": [{**good["outputs"][0], "data": [0.5, 0.8, 0.9, 0.1]}]}, "probability distribution"),
        ({"outputs": [{**good["outputs"][0], "data": [0.2, "x", 0.9, 0.1]}]}, "finite number"),
        ({}, "outputs"),
    ]:
        with pytest.raises(remote.EndpointProtocolError, match=message):
            oip_v2.interpret(SENTIMENT, rows, bad)
    qa_rows = [{"passage": "abc def", "question": "q?"}]
    span = {"outputs": [{"name": "start", "shape": [1], "datatype": "INT64", "data": [4]},
                        {"name": "end", "shape": [1], "datatype": "INT64", "data": [7]}]}
    assert oip_v2.interpret(QA, qa_rows, span)[0]["answer"] == "def"
    span["outputs"][1]["data"] = [99]
    with pytest.raises(remote.EndpointProtocolError, match="not inside the passage"):
        oip_v2.interpret(QA, qa_rows, span)
    assert oip_v2.request_body(SENTIMENT, rows)["inputs"] == [
        {"name": "statement", "shape": [2], "datatype": "BYTES", "data": ["The film was a delight.", "Dull."]}]


def test_occlusion_is_bounded_and_scores_words():
    calls = []

    def predict(rows):
        calls.append(len(rows))
        return [{"label": "positive", "probabilities": {"positive": 0.2 if "delight" not in r["statement"] else 0.9,
                                                        "negative": 0.0}} for r in rows]

    result = remote.explain_by_occlusion(predict, SENTIMENT, ROW, max_calls=40)
    scores = {w["text"]: w["attribution"] for w in result["words"]}
    assert scores["delight."] == pytest.approx(0.7) and scores["film"] == 0 and result["complete"]
    assert max(w["heat"] for w in result["words"]) == 1.0
    assert calls == [6]
    bounded = remote.explain_by_occlusion(predict, SENTIMENT, ROW, max_calls=3)
    assert bounded["calls"] == 3 and len(bounded["words"]) == 2 and bounded["complete"] is False


def test_a_v2_model_name_is_one_path_segment():
    assert oip_v2.infer_url("http://h:8080/", "tiny") == "http://h:8080/v2/models/tiny/infer"
    assert oip_v2.infer_url("http://h", "org/model v1") == "http://h/v2/models/org%2Fmodel%20v1/infer"
