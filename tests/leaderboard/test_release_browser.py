"""The task page's releases and the public browser of closed rounds' verified examples."""

import re
from urllib.parse import parse_qsl

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.leaderboard.release_data import MARKUP

# --- the task page and the public browser -------------------------------------------------


def test_the_task_page_links_the_examples_and_each_releases_files(released, client):
    page = client.get(reverse("task-detail", args=["nli"])).content.decode()
    assert reverse("public-examples", args=["nli"]) in page
    for name, entry in released.files.items():
        assert f'href="{reverse("release-file", args=["nli", 1, name])}"' in page
        assert entry["sha256"] in page


def test_the_public_sees_verified_examples_of_closed_rounds_only_escaped(release_world, client):
    url = reverse("public-examples", args=["nli"])
    page = client.get(url)  # the newest closed round with examples: round 1
    assert page.status_code == 200
    text = page.content.decode()
    shown = set(re.findall(r'data-uid="([0-9a-f-]+)"', text))  # no test split: nobody released it on purpose
    assert shown == {str(e.uid) for e in release_world.released if e.round.number == 1 and e.split != "test"}
    assert "<script>alert" not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    for example in release_world.released:
        if example.round.number == 1 and example.split != "test":
            block = re.search(rf'data-uid="{example.uid}">(.*?)</li>', text, re.S).group(1)
            assert f"<strong>Model's answer:</strong> {example.prediction['label']}" in block
            assert f"({release_world.model.name})" in block
            assert ("fooled the model" in block) is example.fooled
    static = client.get(url, {"round": 0}).content.decode()
    assert set(re.findall(r'data-uid="([0-9a-f-]+)"', static)) == {str(e.uid) for e in release_world.released
                                                                   if e.round.number == 0 and e.split != "test"}
    assert client.get(url, {"round": 2}).status_code == 404  # open
    assert client.get(url, {"round": 9}).status_code == 404
    bad = client.get(url, {"before": "x"})
    assert bad.status_code == 400 and "Not a position this list gave" in bad.content.decode()
    assert client.get(url, {"split": "validation"}).status_code == 400
    assert client.get(url, {"q": "x" * 201}).status_code == 400


def test_pages_walk_the_round_by_keyset_and_never_read_it_all(release_world, client, settings):
    settings.PUBLIC_EXAMPLES_PAGE = 3
    url = reverse("public-examples", args=["nli"])
    seen, query = [], {"round": 1}
    for _ in range(10):
        with CaptureQueriesContext(connection) as queries:
            page = client.get(url, query)
        text = page.content.decode()
        uids = re.findall(r'data-uid="([0-9a-f-]+)"', text)
        assert len(uids) <= 3
        seen += uids
        reads = [q["sql"] for q in queries.captured_queries if 'FROM "annotation_example"' in q["sql"]]
        # One walk of the round, and one count of the task's gold items in use (their own index).
        walks = [sql for sql in reads if "COUNT(" not in sql]
        assert len(walks) == 1 and "LIMIT 4" in walks[0]
        assert len(reads) == 2 and "gold_verdict" in next(sql for sql in reads if "COUNT(" in sql)
        assert len(queries.captured_queries) <= 14
        found = re.search(r'rel="next" href="\?([^"]+)"', text)
        if not found:
            break
        query = dict(parse_qsl(found.group(1).replace("&amp;", "&")))
    public = [e for e in release_world.released if e.round.number == 1 and e.split != "test"]
    assert len(seen) == len(set(seen)) == len(public)
    assert [u for u in seen] == [str(e.uid) for e in sorted(public, key=lambda e: -e.pk)]


def test_search_finds_words_within_a_bounded_window(release_world, client, settings):
    url = reverse("public-examples", args=["nli"])
    found = client.get(url, {"round": 1, "q": "BOLD alert"}).content.decode()
    assert re.findall(r'data-uid="([0-9a-f-]+)"', found) == [str(e.uid) for e in release_world.released
                                                            if e.inputs["hypothesis"] == MARKUP]
    public = sum(1 for e in release_world.released if e.round.number == 1 and e.split != "test")
    assert f"Searched {public} examples of round 1." in found
    settings.PUBLIC_EXAMPLES_SEARCH_WINDOW = 2
    with CaptureQueriesContext(connection) as queries:
        first = client.get(url, {"round": 1, "q": "example 1-10"}).content.decode()
    walks = [q["sql"] for q in queries.captured_queries
             if 'FROM "annotation_example"' in q["sql"] and "COUNT(" not in q["sql"]]  # (the gold items' count)
    assert len(walks) == 1 and "LIMIT 2" in walks[0]
    assert "Searched 2 examples of round 1, the most one search reads" in first
    assert "Search further" in first
    # Following "Search further" reaches the oldest example, which has the words.
    query, uids = {"round": 1, "q": "example 1-10"}, []
    for _ in range(10):
        text = client.get(url, query).content.decode()
        uids += re.findall(r'data-uid="([0-9a-f-]+)"', text)
        more = re.search(r'rel="next" href="\?([^"]+)"', text)
        if not more:
            break
        query = dict(parse_qsl(more.group(1).replace("&amp;", "&")))
    [wanted] = [e for e in release_world.released if e.inputs["hypothesis"] == "nli example 1-10"]
    assert uids == [str(wanted.uid)]


def test_a_hidden_tasks_releases_and_examples_are_its_researchers_alone(released, release_world, anonymous, client,
                                                                        client_for, researcher):
    release_world.task.is_hidden = True
    release_world.task.save()
    assert anonymous.get(reverse("api:release-list", args=["nli"])).status_code == 404
    assert client.get(reverse("release-file", args=["nli", 1, "README.md"])).status_code == 404
    assert client.get(reverse("public-examples", args=["nli"])).status_code == 404
    assert client_for(researcher).get(reverse("api:release-list", args=["nli"])).json()["count"] == 1
