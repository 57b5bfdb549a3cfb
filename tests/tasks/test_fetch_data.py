"""``manage.py fetch_data``: pinned downloads into the data folder (datafiles.fetching).

Every download here comes from a mirror this test builds and serves on 127.0.0.1: no test
reaches the internet. The files are shaped like the upstream ones (a SNLI archive with its
``sentence1``/``sentence2``/``gold_label`` rows, Davidson's csv); their catalogue entries
keep the real converters and only take this test's pins and URLs.
"""

import csv
import hashlib
import io
import json
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from datafiles.fetching import ANLI_MEMBERS, CATALOGUE, MANIFESTS, sha256_of

SNLI_ROWS = [
    {"sentence1": "A man plays a guitar on stage.", "sentence2": "A man is playing music.",
     "gold_label": "entailment"},
    {"sentence1": "A man plays a guitar on stage.", "sentence2": "The man is asleep.", "gold_label": "contradiction"},
    {"sentence1": "Two dogs run in a field.", "sentence2": "The dogs are brothers.", "gold_label": "neutral"},
    {"sentence1": "Two dogs run in a field.", "sentence2": "Animals are outside.", "gold_label": "-"},  # no gold
]


def snli_archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("snli_1.0/snli_1.0_dev.jsonl", "".join(json.dumps(r) + "\n" for r in SNLI_ROWS))
        archive.writestr("snli_1.0/README.txt", "SNLI, as a test stands it in")
    return buffer.getvalue()


def davidson_csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["", "count", "hate_speech", "offensive_language", "neither", "class", "tweet"])
    writer.writerow([0, 3, 0, 0, 3, 2, "what a lovely morning"])
    writer.writerow([1, 3, 2, 1, 0, 0, "a hateful line"])
    return out.getvalue().encode()


class Mirror:
    """An HTTP server on 127.0.0.1 serving ``files`` (URL path -> bytes). ``drop`` maps a path
    to how many of its next responses are cut off half-way (headers promise the whole)."""

    def __init__(self):
        self.files, self.drop, self.requests = {}, {}, []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                mirror.requests.append(self.path)
                body = mirror.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if mirror.drop.get(self.path, 0) > 0:
                    mirror.drop[self.path] -= 1
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the connection drops mid-file
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror():
    with Mirror() as server:
        yield server


def pinned(name: str, url: str, body: bytes):
    """The catalogue entry ``name`` with its real converter, pinned to ``body`` at ``url``."""
    entry = CATALOGUE[name]
    download = replace(entry.downloads[0], url=url, sha256=hashlib.sha256(body).hexdigest(), size=len(body))
    return replace(entry, downloads=(download,))


def fetch_data(*args) -> str:
    out = io.StringIO()
    call_command("fetch_data", *args, stdout=out)
    return out.getvalue()


def test_a_download_is_verified_converted_and_imported(mirror, monkeypatch, tmp_path, demo_tasks):
    body = snli_archive()
    mirror.files["/projects/snli/snli_1.0.zip"] = body
    monkeypatch.setitem(CATALOGUE, "snli", pinned("snli", f"{mirror.base}/projects/snli/snli_1.0.zip", body))
    dest = tmp_path / "data"

    out = fetch_data("snli", "--dest", str(dest))

    assert "Licence: CC BY-SA 4.0" in out
    assert "snli_1.0.zip: 100% of" in out  # progress
    assert "1 fetched, 0 already there" in out
    rows = [json.loads(line) for line in (dest / "nli/snli/dev.jsonl").read_text().splitlines()]
    assert rows == [{"premise": r["sentence1"], "hypothesis": r["sentence2"], "label": r["gold_label"]}
                    for r in SNLI_ROWS if r["gold_label"] != "-"]
    manifest = json.loads((dest / MANIFESTS / "snli.json").read_text())
    assert manifest["sha256"] == [hashlib.sha256(body).hexdigest()] and manifest["files"] == ["nli/snli/dev.jsonl"]
    assert not list(dest.glob(".snli-*")), "the scratch folder with the archive is gone"

    # the importers read what it wrote: round 0 of the NLI task gets the three gold pairs
    out = io.StringIO()
    call_command("import_dataset", str(dest / "nli/snli/dev.jsonl"), "--task", "nli", "--format", "nli-jsonl",
                 "--round", "0", "--split", "test", stdout=out)
    from annotation.models import Example

    imported = Example.objects.filter(task=demo_tasks["nli"], round__number=0, source="import")
    assert sorted(imported.values_list("target__label", flat=True)) == ["contradiction", "entailment", "neutral"]

    # a second run finds it there and downloads nothing
    before = len(mirror.requests)
    assert "already in" in fetch_data("snli", "--dest", str(dest))
    assert len(mirror.requests) == before


def test_a_wrong_checksum_is_refused_with_both_hashes(mirror, monkeypatch, tmp_path):
    good = davidson_csv()
    tampered = good.replace(b"lovely", b"LOVELY")
    url = f"{mirror.base}/t-davidson/labeled_data.csv"
    mirror.files["/t-davidson/labeled_data.csv"] = tampered
    monkeypatch.setitem(CATALOGUE, "davidson", pinned("davidson", url, good))
    dest = tmp_path / "data"

    with pytest.raises(CommandError) as refused:
        fetch_data("davidson", "--dest", str(dest), "--retries", "0")

    message = str(refused.value)
    assert hashlib.sha256(good).hexdigest() in message and hashlib.sha256(tampered).hexdigest() in message
    assert "refused" in message
    assert not (dest / "davidson/labeled_data.csv").exists()
    assert not (dest / MANIFESTS / "davidson.json").exists()


def test_a_dropped_connection_is_retried(mirror, monkeypatch, tmp_path):
    body = davidson_csv() * 2000  # large enough that half of it is a real partial read
    path = "/t-davidson/labeled_data.csv"
    mirror.files[path] = body
    mirror.drop[path] = 1  # the first response is cut off half-way
    monkeypatch.setitem(CATALOGUE, "davidson", pinned("davidson", mirror.base + path, body))
    dest = tmp_path / "data"

    fetch_data("davidson", "--dest", str(dest), "--retries", "1")

    assert mirror.requests.count(path) == 2
    assert sha256_of(dest / "davidson/labeled_data.csv") == hashlib.sha256(body).hexdigest()

    # when every attempt drops, it says so and writes nothing
    mirror.drop[path] = 5
    with pytest.raises(CommandError, match=r"failed after 2 attempts"):
        fetch_data("davidson", "--dest", str(tmp_path / "other"), "--retries", "1")
    assert not (tmp_path / "other" / "davidson/labeled_data.csv").exists()


def test_an_offline_mirror_folder_laid_out_like_the_upstream(monkeypatch, tmp_path):
    body = snli_archive()
    entry = pinned("snli", "https://nlp.stanford.edu/projects/snli/snli_1.0.zip", body)
    monkeypatch.setitem(CATALOGUE, "snli", entry)
    mirror = tmp_path / "mirror"
    (mirror / "nlp.stanford.edu/projects/snli").mkdir(parents=True)
    dest = tmp_path / "data"

    with pytest.raises(CommandError, match=r"nlp.stanford.edu/projects/snli/snli_1.0.zip not found"):
        fetch_data("snli", "--dest", str(dest), "--from", str(mirror))

    (mirror / "nlp.stanford.edu/projects/snli/snli_1.0.zip").write_bytes(body)
    out = fetch_data("snli", "--dest", str(dest), "--from", str(mirror))
    assert "1 fetched" in out and (dest / "nli/snli/dev.jsonl").is_file()
    assert json.loads((dest / MANIFESTS / "snli.json").read_text())["source"] == str(mirror)

    # a mirror's copy that is not the pinned file is refused like a download
    (mirror / "nlp.stanford.edu/projects/snli/snli_1.0.zip").write_bytes(body + b"x")
    with pytest.raises(CommandError, match="does not match the pinned"):
        fetch_data("snli", "--dest", str(tmp_path / "again"), "--from", str(mirror))


def test_a_non_commercial_licence_needs_an_explicit_yes(mirror, monkeypatch, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member in ANLI_MEMBERS:  # the archive's members that it extracts
            archive.writestr(member, '{"uid": "x"}\n')
    body = buffer.getvalue()
    mirror.files["/anli/anli_v1.0.zip"] = body
    monkeypatch.setitem(CATALOGUE, "anli", pinned("anli", f"{mirror.base}/anli/anli_v1.0.zip", body))
    dest = tmp_path / "data"

    with pytest.raises(CommandError, match=r"CC BY-NC 4.0.*") as refused:
        fetch_data("anli", "--dest", str(dest))
    assert "--accept-licence anli" in str(refused.value)
    assert mirror.requests == []  # nothing downloaded before the yes

    out = fetch_data("anli", "--dest", str(dest), "--accept-licence", "anli")
    assert (dest / "anli/R3/test.jsonl").is_file() and (dest / "anli/README.txt").is_file()
    assert "1 fetched" in out


def test_unknown_names_and_the_list(tmp_path):
    with pytest.raises(CommandError, match="unknown data set.*nosuch.*known: anli"):
        fetch_data("nosuch", "--dest", str(tmp_path))
    out = fetch_data("--list", "--dest", str(tmp_path))
    assert all(name in out for name in CATALOGUE) and "absent" in out and "CC BY-NC 4.0" in out


@pytest.mark.parametrize("name", [name for name, data in CATALOGUE.items()  # dynahate: split by split
                                  if name != "dynahate" and all(d.url.endswith((".csv", ".json"))
                                                                for d in data.downloads)])
def test_the_pins_of_plain_files_match_the_copies_the_tests_read(name):
    """Files the platform installs as they are published: the pin is the hash of the copy in
    the tests' data folder (skips where that folder lacks it)."""
    data = CATALOGUE[name]
    base = Path(settings.DYNABENCH_DATA_DIR)
    for download, output in zip(data.downloads, data.outputs, strict=True):
        copy = base / output
        if not copy.is_file():
            pytest.skip(f"{copy} is absent")
        assert sha256_of(copy) == download.sha256, output


def test_dynahate_from_an_http_mirror_is_split_into_the_files_the_replay_reads(mirror, monkeypatch, tmp_path):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["", "acl.id", "X1", "text", "label", "type", "target", "level", "split", "round.base",
                     "annotator", "round", "acl.id.matched"])
    writer.writerow([1, "acl1", 1, "a train line", "nothate", "none", "none", "original", "train", 1, "a1", "1", ""])
    writer.writerow([2, "acl2", 2, "a dev line,\nover two lines", "hate", "derogation", "wom", "original", "dev",
                     1, "a1", "1", ""])
    writer.writerow([3, "acl3", 3, "a test line", "nothate", "none", "none", "perturbation", "test", 2, "a2",
                     "2b", "acl2"])
    body = out.getvalue().encode()
    entry = CATALOGUE["dynahate"]
    monkeypatch.setitem(CATALOGUE, "dynahate", pinned("dynahate", entry.downloads[0].url, body))
    # the mirror keeps it at <host>/<path>; over HTTP the path is quoted (spaces as %20)
    mirror.files["/raw.githubusercontent.com/bvidgen/Dynamically-Generated-Hate-Speech-Dataset/"
                 "03eb1c60af1f213ae19a16ff1d139d88229c2b7b/"
                 "Dynamically%20Generated%20Hate%20Dataset%20v0.2.3.csv"] = body
    dest = tmp_path / "data"

    fetch_data("dynahate", "--dest", str(dest), "--from", mirror.base)

    from datafiles.readers import read_dynahate

    dev = list(read_dynahate(dest / "dynahate/db_dev.csv"))
    test = list(read_dynahate(dest / "dynahate/db_test.csv"))
    assert [(r.external_uid, r.inputs["statement"], r.target["label"], r.split) for r in dev] == [
        ("acl2", "a dev line,\nover two lines", "hateful", "dev")]
    assert [(r.external_uid, r.round, r.metadata.get("matched_uid")) for r in test] == [("acl3", 2, "acl2")]
