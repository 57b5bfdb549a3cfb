"""Context pools per round: files of contexts uploaded through the service, the API and the admin."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.errors import Conflict, Forbidden, InvalidInput, TooLarge
from tasks.models import Context, Round, Task
from tasks.uploads import (
    MAX_LISTED_ERRORS,
    RowError,
    UploadRefused,
    read_context_file,
    upload_contexts,
)

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"


def jsonl(*rows) -> bytes:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows).encode()


def upload(task, rnd, data, user, **kwargs):
    return upload_contexts(task, rnd, data, user=user, **kwargs)


def refusal(task, rnd, data, user, **kwargs) -> list[RowError]:
    """The problems an upload is refused for; asserts that nothing was written."""
    before = Context.objects.count()
    with pytest.raises(UploadRefused) as caught:
        upload(task, rnd, data, user, **kwargs)
    assert Context.objects.count() == before
    return caught.value.report.errors


@pytest.fixture
def nli(demo_tasks):
    return demo_tasks["nli"]


@pytest.fixture
def round1(nli):
    return nli.open_round()


def round_contexts(rnd):
    return list(Context.objects.filter(round=rnd).order_by("pk"))


# --- the service: happy paths -------------------------------------------------------


def test_jsonl_in_both_shapes(nli, round1, researcher):
    data = jsonl(
        {"fields": {"premise": "A wrapped premise."}, "external_id": "w1", "tag": "news", "metadata": {"src": "x"}},
        {"premise": "A flat premise.", "external_id": "f1", "tag": "wiki"},
        {"premise": "No id at all."},
    )
    report = upload(nli, round1, data, researcher, filename="pool.jsonl")
    assert (report.created, report.skipped, report.errors, report.rows) == (3, 0, [], 3)
    stored = round_contexts(round1)
    assert [(c.external_id, c.fields, c.tag, c.metadata) for c in stored] == [
        ("w1", {"premise": "A wrapped premise."}, "news", {"src": "x"}),
        ("f1", {"premise": "A flat premise."}, "wiki", {}),
        ("", {"premise": "No id at all."}, "", {}),
    ]
    assert all(c.task_id == nli.pk for c in stored)


def test_csv_with_a_bom_crlf_and_a_quoted_multi_line_cell(demo_tasks, researcher):
    qa = demo_tasks["qa"]
    data = ("\ufeffexternal_id,title,passage,tag\r\n"
            'q1,First,"A passage\r\nover two lines, with ""quotes""",t\r\n'
            "q2,,Second passage.,\r\n").encode()
    report = upload(qa, qa.open_round(), data, researcher, filename="POOL.CSV")
    assert (report.created, report.skipped) == (2, 0)
    first, second = round_contexts(qa.open_round())
    assert first.fields == {"title": "First", "passage": 'A passage\r\nover two lines, with "quotes"'}
    assert (first.external_id, first.tag) == ("q1", "t")
    assert (second.external_id, second.fields["title"], second.tag) == ("q2", "", "")


def test_reuploading_a_file_skips_what_is_there(nli, round1, researcher):
    data = jsonl({"premise": "One.", "external_id": "a"}, {"premise": "Two.", "external_id": "b"})
    assert upload(nli, round1, data, researcher, filename="a.jsonl").created == 2
    more = jsonl({"premise": "One, again.", "external_id": "a"}, {"premise": "Three.", "external_id": "c"})
    report = upload(nli, round1, more, researcher, filename="a.jsonl")
    assert (report.created, report.skipped) == (1, 1)
    assert Context.objects.get(task=nli, external_id="a").fields == {"premise": "One."}  # left as it was


def test_the_format_is_told_from_the_name_or_given(nli, round1, researcher):
    data = jsonl({"premise": "P."})
    for name in ("a.jsonl", "a.NDJSON", "a.json"):
        assert read_context_file(nli, data, file_format=None, filename=name)[0] == [
            {"fields": {"premise": "P."}, "external_id": "", "tag": ""}]
    assert read_context_file(nli, b"premise\nP.\n", file_format="csv", filename="pool.txt")[0][0]["fields"] == {
        "premise": "P."}
    with pytest.raises(InvalidInput) as caught:
        read_context_file(nli, data, file_format=None, filename="pool.txt")
    assert "format" in caught.value.errors and "pool.txt" in caught.value.errors["format"][0]
    with pytest.raises(InvalidInput) as caught:
        read_context_file(nli, data, file_format="xml", filename="a.jsonl")
    assert "format" in caught.value.errors


# --- the service: line numbers and bad rows -----------------------------------------


def test_jsonl_line_numbers_count_blank_lines(nli, round1, researcher):
    data = (b'{"premise": "fine"}\n\n   \n{"premise": ""}\r\n{"premise": "fine\\u2028still line 5"}\n'
            b'{"premise": 3}\n')
    assert refusal(nli, round1, data, researcher, filename="a.jsonl") == [
        RowError(4, "premise: Must not be empty."),
        RowError(6, "premise: Must be text."),
    ]


def test_csv_line_numbers_are_where_rows_start(nli, round1, researcher):
    data = (b'premise,external_id\n'
            b'"line two\nand three\nand four",a\n'
            b',b\n'                        # line 5: empty premise
            b'\n'                          # line 6: blank
            b'"seven\neight",c,extra\n'    # line 7: too many cells
            b'nine,a\n'                    # line 9: a repeated id
            b'"ten, never closed\n')
    assert refusal(nli, round1, data, researcher, filename="a.csv") == [
        RowError(5, "premise: Must not be empty."),
        RowError(7, "The row has 3 cells; the header has 2."),
        RowError(9, "external_id 'a' repeats the row on line 2."),
        RowError(10, "Not valid CSV: unexpected end of data."),
    ]


@pytest.mark.parametrize(("row", "expected"), [
    ({"premise": "P.", "hypothesis": "H."}, "unknown ['hypothesis']"),
    ({"fields": {}}, "fields: Expected the fields ['premise']; missing ['premise']"),
    ({"fields": {"premise": "P."}, "label": "x"}, "Unknown keys ['label']"),
    ({"fields": "P."}, "fields: Must be an object"),
    ({"premise": None}, "premise: This field is required."),
    ({"premise": ["P."]}, "premise: Must be text."),
    ({"premise": "   "}, "premise: Must not be empty."),
    ({"premise": "x" * 20001}, "premise: Must be at most 20000 characters"),
    ({"premise": "P\u0000."}, "premise: Must not contain NUL characters."),
    ('{"premise": "\\ud800"}', "premise: Must be valid Unicode text"),
    ({"premise": "P.", "external_id": "x" * 201}, "external_id: Must be at most 200 characters"),
    ({"premise": "P.", "external_id": 7}, "external_id: Must be text, not a number."),
    ({"premise": "P.", "external_id": "a\u0000"}, "external_id: Must not contain NUL characters."),
    ({"premise": "P.", "tag": "t" * 101}, "tag: Must be at most 100 characters"),
    ({"fields": {"premise": "P."}, "metadata": [1]}, "metadata: Must be a JSON object, not an array."),
    ({"fields": {"premise": "P."}, "metadata": {"k": "\u0000"}}, "metadata: Must not contain NUL characters."),
    ("[1, 2]", "Each line must be a JSON object, not an array."),
    ('{"premise": NaN}', "Not valid JSON: NaN is not valid JSON."),
    ('{"premise": "P."', "Not valid JSON: Expecting ',' delimiter"),
    ("[" * 40 + "]" * 40, "nested deeper than 32 levels"),
    ('{"premise": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32 levels"),
    ("7", "Each line must be a JSON object, not a number."),
])
def test_each_bad_row_is_reported_and_nothing_is_written(nli, round1, researcher, row, expected):
    data = jsonl({"premise": "A good row first.", "external_id": "good"}, row)
    errors = refusal(nli, round1, data, researcher, filename="a.jsonl")
    assert [e.line for e in errors] == [2]
    assert expected in errors[0].message, errors


def test_a_json_array_is_not_json_lines(nli, round1, researcher):
    data = b'[\n  {"premise": "A."},\n  {"premise": "B."}\n]\n'
    assert refusal(nli, round1, data, researcher, filename="pool.json") == [
        RowError(1, "The file is a JSON array; upload JSON lines: one JSON object per line.")]


def test_duplicate_external_ids_in_the_file(nli, round1, researcher):
    data = jsonl({"premise": "A.", "external_id": "x"}, {"premise": "B.", "external_id": "y"},
                 {"premise": "C.", "external_id": "x"})
    assert refusal(nli, round1, data, researcher, filename="a.jsonl") == [
        RowError(3, "external_id 'x' repeats the row on line 1.")]


@pytest.mark.parametrize(("header", "expected"), [
    ("external_id,tag", "missing ['premise']"),
    ("premise,hypothesis", "unknown ['hypothesis']"),
    ("premise,premise", "Columns named twice: ['premise']"),
    ("premise,", "A column has no name."),
])
def test_a_bad_csv_header_is_line_one(nli, round1, researcher, header, expected):
    errors = refusal(nli, round1, f"{header}\nP.,x\n".encode(), researcher, filename="a.csv")
    assert errors and all(e.line == 1 for e in errors)
    assert any(expected in e.message for e in errors), errors


@pytest.mark.parametrize(("data", "names"), [
    (b"", ["a.jsonl", "a.csv"]),
    (b"\n\n  \r\n", ["a.jsonl", "a.csv"]),
    (b"\xef\xbb\xbf", ["a.jsonl", "a.csv"]),
    (b"premise\n\n", ["a.csv"]),  # a header alone
])
def test_a_file_without_rows_is_refused(nli, round1, researcher, data, names):
    for name in names:
        with pytest.raises(InvalidInput) as caught:
            upload(nli, round1, data, researcher, filename=name)
        assert caught.value.errors == {"file": ["The file holds no contexts."]}
    assert not round_contexts(round1)


def test_a_file_that_is_not_utf8_names_the_byte_and_line(nli, round1, researcher):
    data = b'{"premise": "fine"}\n{"premise": "caf\xe9"}\n'
    [error] = refusal(nli, round1, data, researcher, filename="a.jsonl")
    assert error.line == 2
    assert "not UTF-8" in error.message and "0xe9" in error.message and "byte offset 36" in error.message
    [error] = refusal(nli, round1, "premise\nok\n".encode("utf-16"), researcher, filename="a.csv")
    assert error.line == 1 and "UTF-16" in error.message


def test_files_over_the_bounds_are_too_large(nli, round1, researcher, settings):
    settings.CONTEXT_UPLOAD_MAX_BYTES = 100
    with pytest.raises(TooLarge, match="the limit is 100 bytes"):
        upload(nli, round1, jsonl(*[{"premise": f"Premise {i}."} for i in range(10)]), researcher,
               filename="a.jsonl")
    settings.CONTEXT_UPLOAD_MAX_BYTES = 10_000
    settings.CONTEXT_UPLOAD_MAX_ROWS = 3
    assert upload(nli, round1, jsonl(*[{"premise": f"P {i}."} for i in range(3)]), researcher,
                  filename="a.jsonl").created == 3
    with pytest.raises(TooLarge, match="more than 3 rows"):
        upload(nli, round1, b"premise\n" + b"P.\n" * 4, researcher, filename="a.csv")
    assert len(round_contexts(round1)) == 3


def test_a_refusal_lists_the_first_hundred_problems_and_counts_them_all(nli, round1, researcher):
    data = jsonl(*[{"premise": ""} for _ in range(150)])
    with pytest.raises(UploadRefused) as caught:
        upload(nli, round1, data, researcher, filename="a.jsonl")
    exc = caught.value
    assert len(exc.errors) == MAX_LISTED_ERRORS
    assert exc.errors[0] == {"line": 1, "message": "premise: Must not be empty."}
    assert len(exc.report.errors) == 150 and exc.report.rows == 150
    assert "150 problems, on 150 lines" in exc.message and "first 100" in exc.message


def test_a_large_file_takes_a_few_queries_per_batch(nli, round1, researcher, django_assert_max_num_queries):
    data = b"external_id,premise\n" + b"".join(f"id-{i},Premise {i}.\n".encode() for i in range(1200))
    with django_assert_max_num_queries(30):  # 3 batches of 500: not a query or two per row
        report = upload(nli, round1, data, researcher, filename="a.csv")
    assert (report.created, report.rows) == (1200, 1200)

def test_markup_is_stored_as_text(nli, round1, researcher):
    upload(nli, round1, jsonl({"premise": SCRIPT, "tag": "<b>", "external_id": "<i>"}), researcher,
           filename="a.jsonl")
    [context] = round_contexts(round1)
    assert (context.fields["premise"], context.tag, context.external_id) == (SCRIPT, "<b>", "<i>")


# --- the service: who and where -----------------------------------------------------


def test_only_the_tasks_researchers_upload(nli, round1, annotator, other_researcher, superuser):
    data = jsonl({"premise": "P."})
    for user in (annotator, other_researcher):
        with pytest.raises(Forbidden):
            upload(nli, round1, data, user, filename="a.jsonl")
    assert not round_contexts(round1)
    assert upload(nli, round1, data, superuser, filename="a.jsonl").created == 1


def test_closed_rounds_round_zero_and_other_tasks_rounds_are_refused(demo_tasks, nli, round1, researcher):
    data = jsonl({"premise": "P."})
    Round.objects.filter(pk=round1.pk).update(status=Round.Status.CLOSED)
    round1.refresh_from_db()
    with pytest.raises(Conflict, match="closed"):
        upload(nli, round1, data, researcher, filename="a.jsonl")
    static = Round(task=nli, number=0, status=Round.Status.DRAFT)  # round 0: static data
    with pytest.raises(Conflict, match="round 0"):
        upload(nli, static, data, researcher, filename="a.jsonl")
    with pytest.raises(Conflict, match="another task"):
        upload(nli, demo_tasks["qa"].open_round(), data, researcher, filename="a.jsonl")
    assert not Context.objects.filter(round__isnull=False).exists()


def test_a_round_closed_meanwhile_takes_nothing(nli, round1, researcher):
    Round.objects.filter(pk=round1.pk).update(status=Round.Status.CLOSED)  # round1 in memory: still open
    with pytest.raises(Conflict, match="closed"):
        upload(nli, round1, jsonl({"premise": "P."}), researcher, filename="a.jsonl")
    assert not round_contexts(round1)


def test_a_draft_round_takes_contexts(nli, researcher):
    draft = Round.objects.create(task=nli, number=2)
    assert upload(nli, draft, jsonl({"premise": "P."}), researcher, filename="a.jsonl").created == 1
    assert len(round_contexts(draft)) == 1


# --- the API ------------------------------------------------------------------------

URL = "/api/tasks/{slug}/rounds/{number}/contexts/"


def post_file(client, data, *, name="pool.jsonl", slug="nli", number=1, **fields):
    body = {"file": SimpleUploadedFile(name, data), **fields}
    return client.post(URL.format(slug=slug, number=number), body, format="multipart")


def test_api_upload_jsonl_and_csv(nli, round1, researcher, client_for):
    client = client_for(researcher)
    response = post_file(client, jsonl({"premise": "P1.", "external_id": "a"}, {"fields": {"premise": "P2."}}))
    assert response.status_code == 201, response.content
    assert response.json() == {"created": 2, "skipped": 0}
    response = post_file(client, b"external_id,premise\na,P1.\nb,\"P3\nover lines\"\n", name="pool.csv")
    assert response.status_code == 201, response.content
    assert response.json() == {"created": 1, "skipped": 1}
    response = post_file(client, b"premise\nP4.\n", name="no-extension", format="csv")
    assert response.status_code == 201 and response.json() == {"created": 1, "skipped": 0}
    assert len(round_contexts(round1)) == 4


def test_api_bad_rows_are_400_by_line(nli, round1, researcher, client_for):
    data = b'premise,tag\n"two\nlines",ok\n,empty\n' + f'{SCRIPT},x\n'.encode() + b"a,b,c\n"
    response = post_file(client_for(researcher), data, name="pool.csv")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "nothing was added" in body["detail"]
    assert body["errors"] == [
        {"line": 4, "message": "premise: Must not be empty."},
        {"line": 6, "message": "The row has 3 cells; the header has 2."},
    ]
    assert not round_contexts(round1)


def test_api_field_errors(nli, round1, researcher, client_for):
    client = client_for(researcher)
    response = client.post(URL.format(slug="nli", number=1), {"format": "csv"}, format="multipart")
    assert response.status_code == 400 and "file" in response.json()["errors"]
    response = post_file(client, jsonl({"premise": "P."}), format="xml")
    assert response.status_code == 400 and "format" in response.json()["errors"]
    response = post_file(client, jsonl({"premise": "P."}), name="pool.txt")
    assert response.status_code == 400 and "format" in response.json()["errors"]
    response = post_file(client, b"", name="pool.csv")
    assert response.status_code == 400
    assert response.json()["errors"] == {"file": ["The file holds no contexts."]}
    response = client.post(URL.format(slug="nli", number=1), {"file": "x"}, format="json")
    assert response.status_code == 415
    assert not round_contexts(round1)


def test_api_who_may_upload(demo_tasks, nli, round1, researcher, other_researcher, annotator, anonymous,
                            client_for, mturk_worker, token_client):
    data = jsonl({"premise": "P."})
    assert post_file(anonymous, data).status_code == 401
    assert post_file(client_for(annotator), data).status_code == 403
    assert post_file(client_for(other_researcher), data).status_code == 403  # a public task: visible, not theirs
    assert post_file(token_client(mturk_worker, nli), data).status_code == 403  # a session token: annotation only
    Task.objects.filter(pk=nli.pk).update(is_hidden=True)
    assert post_file(client_for(other_researcher), data).status_code == 404  # a hidden task is not there for them
    assert post_file(client_for(annotator), data).status_code == 404
    assert not round_contexts(round1)
    assert post_file(client_for(researcher), data).status_code == 201


def test_api_unknown_task_or_round_is_404(nli, researcher, client_for):
    client = client_for(researcher)
    assert post_file(client, jsonl({"premise": "P."}), slug="no-such-task").status_code == 404
    assert post_file(client, jsonl({"premise": "P."}), number=7).status_code == 404
    assert not Context.objects.filter(round__isnull=False).exists()


def test_api_closed_round_is_409(nli, round1, researcher, client_for):
    Round.objects.filter(pk=round1.pk).update(status=Round.Status.CLOSED)
    response = post_file(client_for(researcher), jsonl({"premise": "P."}))
    assert response.status_code == 409 and "closed" in response.json()["detail"]
    assert not round_contexts(round1)


def create_round_zero(task) -> Round:
    """Round 0: the static data, closed from the start."""
    from tasks.services import ensure_static_round

    return ensure_static_round(task)


def test_api_round_zero_is_409(nli, researcher, client_for):
    create_round_zero(nli)
    response = post_file(client_for(researcher), jsonl({"premise": "P."}), number=0)
    assert response.status_code == 409 and "round 0" in response.json()["detail"]
    assert not Context.objects.filter(round__number=0).exists()


def test_api_too_large_is_413(nli, round1, researcher, client_for, settings):
    client = client_for(researcher)
    settings.CONTEXT_UPLOAD_MAX_BYTES = 1000
    response = post_file(client, jsonl(*[{"premise": f"Premise number {i}."} for i in range(100)]))
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    # A body past the file's bound and the framing's room is refused before it is read.
    response = post_file(client, b"premise\n" + b"x" * 100_000)
    assert response.status_code == 413 and "request body" in response.json()["detail"]
    settings.CONTEXT_UPLOAD_MAX_BYTES = 10_000
    settings.CONTEXT_UPLOAD_MAX_ROWS = 5
    response = post_file(client, b"premise\n" + b"P.\n" * 6, name="pool.csv")
    assert response.status_code == 413 and "more than 5 rows" in response.json()["detail"]
    assert not round_contexts(round1)


def test_api_stores_markup_as_text(nli, round1, researcher, client_for):
    client = client_for(researcher)
    assert post_file(client, jsonl({"premise": SCRIPT, "external_id": "x1"})).status_code == 201
    contexts = client.get("/api/tasks/nli/contexts/?page_size=100").json()["results"]
    assert [c["fields"]["premise"] for c in contexts if c["external_id"] == "x1"] == [SCRIPT]


def test_the_schema_documents_the_upload(client):
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/tasks/{slug}/rounds/{number}/contexts/"]["post"]
    assert set(operation["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "415", "429", "503"}
    request = operation["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[1]
    file_field = schema["components"]["schemas"][request]["properties"]["file"]
    assert (file_field["type"], file_field["format"]) == ("string", "binary")
    error = operation["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    shapes = schema["components"]["schemas"][error]["properties"]["errors"]["oneOf"]
    assert {shape["type"] for shape in shapes} == {"object", "array"}


# --- the admin ----------------------------------------------------------------------


def upload_url(rnd):
    return reverse("admin:tasks_round_upload_contexts", args=[rnd.pk])


def admin_post(client, rnd, data, name="pool.jsonl", file_format=""):
    return client.post(upload_url(rnd), {"file": SimpleUploadedFile(name, data), "format": file_format})


def test_the_round_page_links_to_the_upload(nli, round1, client, researcher):
    assert not researcher.is_superuser and researcher.is_staff
    client.force_login(researcher)
    page = client.get(reverse("admin:tasks_round_change", args=[round1.pk]))
    assert page.status_code == 200
    assert f'href="{upload_url(round1)}"' in page.content.decode()
    form = client.get(upload_url(round1))
    assert form.status_code == 200
    content = form.content.decode()
    assert 'enctype="multipart/form-data"' in content and "<code>premise</code>" in content


def test_admin_upload_adds_the_contexts(nli, round1, client, researcher):
    client.force_login(researcher)
    upload(nli, round1, jsonl({"premise": "Old.", "external_id": "old"}), researcher, filename="a.jsonl")
    response = admin_post(client, round1, b"external_id,premise\nold,Old.\nnew,\"New,\nmulti-line.\"\n", "a.csv")
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:tasks_round_change", args=[round1.pk])
    page = client.get(response["Location"])
    assert "Added 1 context to nli round 1 (1 already present)" in page.content.decode()
    assert Context.objects.get(external_id="new").fields == {"premise": "New,\nmulti-line."}
    response = admin_post(client, round1, jsonl({"premise": "P."}), "pool.data", file_format="jsonl")
    assert response.status_code == 302
    assert len(round_contexts(round1)) == 3


def test_admin_lists_bad_rows_by_line_escaped_and_writes_nothing(nli, round1, client, researcher):
    client.force_login(researcher)
    data = jsonl({"premise": "Fine."}, {"premise": ""}, {"premise": "x", SCRIPT: "y"}, {"premise": "ok", "tag": 5})
    response = admin_post(client, round1, data)
    assert response.status_code == 200
    content = response.content.decode()
    assert "The file has 3 problems, on 3 lines; nothing was added." in content
    assert "Line 2: premise: Must not be empty." in content
    assert "Line 3: Expected the fields" in content and "&lt;script&gt;alert(1)&lt;/script&gt;" in content
    assert SCRIPT not in content
    assert "Line 4: tag: Must be text, not a number." in content
    assert not round_contexts(round1)


def test_admin_refusals_are_shown_on_the_form(nli, round1, client, researcher, settings):
    client.force_login(researcher)
    response = admin_post(client, round1, jsonl({"premise": "P."}), "pool.txt")
    assert response.status_code == 200 and "Cannot tell the format of" in response.content.decode()
    response = admin_post(client, round1, b"", "pool.csv")
    assert "The file holds no contexts." in response.content.decode()
    settings.CONTEXT_UPLOAD_MAX_BYTES = 10
    response = admin_post(client, round1, jsonl({"premise": "P."}))
    assert "the limit is 10 bytes" in response.content.decode()
    settings.CONTEXT_UPLOAD_MAX_BYTES = 10_000
    Round.objects.filter(pk=round1.pk).update(status=Round.Status.CLOSED)
    response = admin_post(client, round1, jsonl({"premise": "P."}))
    assert response.status_code == 200 and "is closed" in response.content.decode()
    assert not round_contexts(round1)


def test_admin_upload_is_for_the_tasks_researchers_only(nli, round1, client, other_researcher, annotator):
    client.force_login(other_researcher)
    assert client.get(upload_url(round1)).status_code == 404
    assert admin_post(client, round1, jsonl({"premise": "P."})).status_code == 404
    client.force_login(annotator)  # not staff: the admin sends them to its sign-in page
    response = admin_post(client, round1, jsonl({"premise": "P."}))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.logout()
    assert client.get(upload_url(round1)).status_code == 302
    assert not round_contexts(round1)


def test_uploaded_markup_is_escaped_on_admin_pages(nli, round1, client, researcher):
    upload(nli, round1, jsonl({"premise": SCRIPT, "external_id": "x"}), researcher, filename="a.jsonl")
    client.force_login(researcher)
    context = Context.objects.get(external_id="x")
    for url in (reverse("admin:tasks_context_changelist") + "?q=x",  # its external id
                reverse("admin:tasks_context_change", args=[context.pk])):
        content = client.get(url).content.decode()
        assert "&lt;script&gt;alert(1)" in content and SCRIPT not in content


def test_admin_refuses_round_zero(nli, client, researcher):
    static = create_round_zero(nli)
    client.force_login(researcher)
    response = admin_post(client, static, jsonl({"premise": "P."}))
    assert response.status_code == 200 and "round 0 holds the task&#x27;s static data" in response.content.decode()
    assert not Context.objects.filter(round=static).exists()
