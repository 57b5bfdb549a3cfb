"""The public data sets the platform imports, and ``fetch``, which puts them in the data folder
(``manage.py fetch_data`` calls it with the folder from the settings). No Django here.

Each data set comes from its official location, pinned by sha256, and is written into
the data folder (``DYNABENCH_DATA_DIR``, default ``var/data``) in the layout the importers,
``train_model``, ``bootstrap_demo --real-data``, ``replay`` and the benches read:

    anli/R{1,2,3}/{train,dev,test}.jsonl     nli/{mnli,snli}/dev.jsonl
    sst2/{train_full,dev}.tsv                 squad/dev-v1.1.json
    dynahate/db_{dev,test}.csv                davidson/labeled_data.csv
    hatemoji/HatemojiBuild/{train,validation,test}.csv
    hatemoji/HatemojiCheck/test.csv           hatecheck/test_suite_cases.csv

Downloads go through pooch (streamed to a temporary file, hashed, retried when the
connection drops). A file whose sha256 differs from the pin is refused, naming both
hashes. Where the upstream file is an archive or a different shape (the NLI corpora's
``sentence1``/``sentence2``/``gold_label``), this module extracts and converts it; the
pin is on what was downloaded. Each pin's provenance is in ``Download.pinned``:
"published" when the same hash is published by other projects that download the file,
"tested" when it is the hash of the copy the project's tests have read (the upstream
file at the URL named, unchanged).

A mirror (``--from``) is laid out like the upstream: each file at ``<mirror>/<host>/<path
of its URL>``, the layout ``wget --mirror`` writes. It may be a folder or an http(s) URL.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

MANIFESTS = ".fetched"  # under the data folder, <name>.json per data set: what was fetched, from where, which pins
RETRIES = 3  # a dropped connection is retried this many times (pooch waits 1 s, 2 s, 3 s between)
TIMEOUT_SECONDS = 60  # per connection attempt and between two reads


class FetchError(Exception):
    """A data set could not be fetched: the message says why and what to do."""


@dataclass(frozen=True)
class Download:
    """One upstream file: where it is and its pinned sha256."""

    url: str
    sha256: str
    size: int  # bytes, for the progress line before the first byte arrives
    pinned: str = "published"  # or "tested": see the module docstring

    @property
    def mirror_path(self) -> str:
        """Where a mirror keeps it: ``<host>/<path>``, the path decoded (``%20`` is a space)."""
        parts = urlsplit(self.url)
        return f"{parts.netloc}{unquote(parts.path)}"

    @property
    def filename(self) -> str:
        return Path(unquote(urlsplit(self.url).path)).name.replace(" ", "_")


@dataclass(frozen=True)
class DataSet:
    name: str
    title: str
    licence: str
    downloads: tuple[Download, ...]
    # (the downloaded files, in the order of ``downloads``; the destination root) -> files written
    install: Callable[[list[Path], Path], list[str]]
    outputs: tuple[str, ...]  # files under the data folder that it provides
    non_commercial: bool = False
    note: str = ""


# --- installers: from the upstream shape to the layout the importers read ------------------


def _copy_to(*targets: str) -> Callable[[list[Path], Path], list[str]]:
    def install(files: list[Path], dest: Path) -> list[str]:
        for source, target in zip(files, targets, strict=True):
            _write_bytes(dest / target, source.read_bytes())
        return list(targets)

    return install


def _extract(members: dict[str, str]) -> Callable[[list[Path], Path], list[str]]:
    """Archive members (their path inside the zip) to files under the data folder."""

    def install(files: list[Path], dest: Path) -> list[str]:
        with zipfile.ZipFile(files[0]) as archive:
            names = set(archive.namelist())
            missing = sorted(set(members) - names)
            if missing:
                raise FetchError(f"{files[0].name} lacks {', '.join(missing)}: not the archive this pin names")
            for member, target in members.items():
                _write_bytes(dest / target, archive.read(member))
        return list(members.values())

    return install


def _nli_from_zip(member: str, target: str) -> Callable[[list[Path], Path], list[str]]:
    """SNLI/MultiNLI jsonl (``sentence1``, ``sentence2``, ``gold_label``) to the platform's
    NLI jsonl (``premise``, ``hypothesis``, ``label``). Pairs without a gold label (``-``:
    the annotators did not agree) are left out, as the corpora's own papers do."""

    def install(files: list[Path], dest: Path) -> list[str]:
        with zipfile.ZipFile(files[0]) as archive:
            if member not in archive.namelist():
                raise FetchError(f"{files[0].name} lacks {member}: not the archive this pin names")
            lines = []
            for raw in archive.read(member).decode("utf-8").splitlines():
                if not raw.strip():
                    continue
                row = json.loads(raw)
                if row.get("gold_label") not in ("entailment", "neutral", "contradiction"):
                    continue
                lines.append(json.dumps({"premise": row["sentence1"], "hypothesis": row["sentence2"],
                                         "label": row["gold_label"]}, ensure_ascii=False))
        _write_bytes(dest / target, ("\n".join(lines) + "\n").encode("utf-8"))
        return [target]

    return install


def _dynahate_by_split(files: list[Path], dest: Path) -> list[str]:
    """The DynaHate release (one csv, every split) to one file per split the platform reads:
    dev (the replay trains on it, as the test split stays held out) and test."""
    text = files[0].read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    if "split" not in header or "text" not in header:
        raise FetchError(f"{files[0].name} has no 'split' or 'text' column: not the DynaHate release")
    column = header.index("split")
    written = []
    for split in ("dev", "test"):
        out = io.StringIO(newline="")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(row for row in csv.reader(io.StringIO(text, newline=""))
                         if len(row) == len(header) and row[column] == split)
        target = f"dynahate/db_{split}.csv"
        _write_bytes(dest / target, out.getvalue().encode("utf-8"))
        written.append(target)
    return written


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)  # a reader never sees half a file


# --- the catalogue -----------------------------------------------------------------------

ANLI_MEMBERS = {f"anli_v1.0/R{r}/{split}.jsonl": f"anli/R{r}/{split}.jsonl"
                 for r in (1, 2, 3) for split in ("train", "dev", "test")}
ANLI_MEMBERS["anli_v1.0/README.txt"] = "anli/README.txt"
_HATEMOJI = "https://raw.githubusercontent.com/HannahKirk/Hatemoji/main"

CATALOGUE: dict[str, DataSet] = {data.name: data for data in (
    DataSet("anli", "Adversarial NLI v1.0, rounds 1-3 (Nie et al. 2020)", "CC BY-NC 4.0 (non-commercial)",
            (Download("https://dl.fbaipublicfiles.com/anli/anli_v1.0.zip",
                      "e5c058f2bb4e6190b0651badca2c590e45db95248f8b28cde674615ee40820bf", 18708061),),
            _extract(ANLI_MEMBERS), tuple(ANLI_MEMBERS.values()), non_commercial=True,
            note="the replay trains on dev and measures on test; never tune on test"),
    DataSet("snli", "SNLI 1.0 (Bowman et al. 2015), dev split", "CC BY-SA 4.0",
            (Download("https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
                      "afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e", 94550081),),
            _nli_from_zip("snli_1.0/snli_1.0_dev.jsonl", "nli/snli/dev.jsonl"), ("nli/snli/dev.jsonl",)),
    DataSet("mnli", "MultiNLI 1.0 (Williams et al. 2018), dev-matched split",
            "OANC licence; the fiction genre CC BY-SA 3.0",
            (Download("https://cims.nyu.edu/~sbowman/multinli/multinli_1.0.zip",
                      "049f507b9e36b1fcb756cfd5aeb3b7a0cfcb84bf023793652987f7e7e0957822", 226850426),),
            _nli_from_zip("multinli_1.0/multinli_1.0_dev_matched.jsonl", "nli/mnli/dev.jsonl"),
            ("nli/mnli/dev.jsonl",), note="a 227 MB archive, of which one 11 MB file is kept"),
    DataSet("sst2", "SST-2 as in GLUE (Socher et al. 2013): train and dev", "none stated upstream (research use)",
            (Download("https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
                      "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa", 7439277),),
            _extract({"SST-2/train.tsv": "sst2/train_full.tsv", "SST-2/dev.tsv": "sst2/dev.tsv"}),
            ("sst2/train_full.tsv", "sst2/dev.tsv"),
            note="GLUE's test split has no labels: the demo halves dev into dev and test"),
    DataSet("squad", "SQuAD v1.1 (Rajpurkar et al. 2016), dev split", "CC BY-SA 4.0",
            (Download("https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",
                      "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9", 4854279),),
            _copy_to("squad/dev-v1.1.json"), ("squad/dev-v1.1.json",)),
    DataSet("dynahate", "DynaHate v0.2.3, rounds 1-4 (Vidgen et al. 2021)", "none stated upstream",
            (Download("https://raw.githubusercontent.com/bvidgen/Dynamically-Generated-Hate-Speech-Dataset/"
                      "03eb1c60af1f213ae19a16ff1d139d88229c2b7b/Dynamically%20Generated%20Hate%20Dataset%20v0.2.3.csv",
                      "6e0aa7e598ab5b648cb1f0b48626a3e5f2e39a5abbd9fee998efa5a0b6cab4ca", 0),),
            _dynahate_by_split, ("dynahate/db_dev.csv", "dynahate/db_test.csv")),
    DataSet("hatemoji", "HatemojiBuild (rounds 5-7) and HatemojiCheck (Kirk et al. 2022)", "CC BY 4.0",
            (Download(f"{_HATEMOJI}/HatemojiBuild/train.csv",
                      "2255818a5b10153876320068451be582ed876a2eefb22a250bd2f6478d1815e5", 692090, "tested"),
             Download(f"{_HATEMOJI}/HatemojiBuild/validation.csv",
                      "721094d44fceb923a0b3897935126a654bbb1f092b1fed6a74d80e4a845c6f43", 83297, "tested"),
             Download(f"{_HATEMOJI}/HatemojiBuild/test.csv",
                      "4b067b445c6445dbd4036d7c75dde21f72928bfd31db63d1c53d66226c53be99", 86451, "tested"),
             Download(f"{_HATEMOJI}/HatemojiCheck/test.csv",
                      "9aa6bf78370a87b56b7e117593e7c5e798a933083fe4cfd9bf1b26baf785a7da", 349034, "tested")),
            _copy_to("hatemoji/HatemojiBuild/train.csv", "hatemoji/HatemojiBuild/validation.csv",
                     "hatemoji/HatemojiBuild/test.csv", "hatemoji/HatemojiCheck/test.csv"),
            ("hatemoji/HatemojiBuild/train.csv", "hatemoji/HatemojiBuild/validation.csv",
             "hatemoji/HatemojiBuild/test.csv", "hatemoji/HatemojiCheck/test.csv")),
    DataSet("hatecheck", "HateCheck functional tests (Röttger et al. 2021)", "CC BY 4.0",
            (Download("https://raw.githubusercontent.com/paul-rottger/hatecheck-data/main/test_suite_cases.csv",
                      "ecf0dc1e93fccc90b6f880e632b19e635c0f0a68b3157915a9e20b6938f121cf", 664630, "tested"),),
            _copy_to("hatecheck/test_suite_cases.csv"), ("hatecheck/test_suite_cases.csv",)),
    DataSet("davidson", "Davidson et al. 2017 tweets (hate, offensive, neither)", "MIT",
            (Download("https://github.com/t-davidson/hate-speech-and-offensive-language/raw/master/data/"
                      "labeled_data.csv",
                      "fcb8bc7c68120ae4af04a5b9acd58585513ede11e1548ebf36a5c2040b6f6281", 2546446),),
            _copy_to("davidson/labeled_data.csv"), ("davidson/labeled_data.csv",)),
)}


# --- fetching ----------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Progress:
    """What pooch's downloader reports to (``total``, ``update``, ``reset``, ``close``), said
    as a line every tenth of the file: a download of 200 MB shows it is moving."""

    say: Callable[[str], None]
    label: str
    total: int = 0
    done: int = 0
    _shown: int = field(default=-1, repr=False)

    def update(self, n: int) -> None:
        self.done += n
        if self.total:
            tenth = min(10, self.done * 10 // self.total)
            if tenth != self._shown:
                self._shown = tenth
                self.say(f"  {self.label}: {tenth * 10}% of {self.total / 1e6:.1f} MB")

    def reset(self) -> None:
        self.done = 0

    def close(self) -> None:
        pass


def is_installed(data: DataSet, dest: Path) -> bool:
    """Its files are all there, from a fetch of the same pins (the manifest says which)."""
    manifest = dest / MANIFESTS / f"{data.name}.json"
    if not manifest.is_file() or not all((dest / name).is_file() for name in data.outputs):
        return False
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    return recorded.get("sha256") == [d.sha256 for d in data.downloads]


def _download(download: Download, folder: Path, source: str | None, say: Callable[[str], None],
              retries: int) -> Path:
    """The upstream file in ``folder``, from its URL or from a mirror, checked against its pin."""
    import pooch  # noqa: PLC0415 - only a download needs it
    import requests  # noqa: PLC0415 - only a download needs it

    target = folder / download.filename
    if source and not source.startswith(("http://", "https://")):  # a mirror folder
        where = Path(source) / download.mirror_path
        if not where.is_file():
            raise FetchError(f"{where} not found: a mirror keeps each file at <mirror>/<host>/<path of its URL>")
        shutil.copyfile(where, target)
    else:
        where = f"{source.rstrip('/')}/{quote(download.mirror_path)}" if source else download.url
        # pooch streams and retries a dropped connection; the pin is checked below, for every source alike
        fetcher = pooch.create(path=folder, base_url="", registry={download.filename: None},
                               urls={download.filename: where}, retry_if_failed=retries)
        try:
            fetcher.fetch(download.filename, downloader=pooch.HTTPDownloader(
                progressbar=Progress(say, download.filename, total=download.size), timeout=TIMEOUT_SECONDS))
        except requests.exceptions.RequestException as exc:
            attempts = f"{retries + 1} attempt{'s' if retries else ''}"
            raise FetchError(f"{where}: the download failed after {attempts}: {exc}. Without a network, --from "
                             "reads a mirror (a folder or URL laid out like the upstream).") from None
    got = sha256_of(target)
    if got != download.sha256:
        target.unlink()
        raise FetchError(f"{where}: sha256 {got} does not match the pinned {download.sha256}; the file was refused")
    return target


def fetch(names: Iterable[str], dest: Path, *, source: str | None = None, accepted: Iterable[str] = (),
          force: bool = False, retries: int = RETRIES, say: Callable[[str], None] = print) -> dict[str, str]:
    """Fetch each named data set into ``dest``. Returns each name's outcome
    ("fetched", "already there"); raises ``FetchError`` on the first that fails, after the
    ones before it are installed."""
    names = list(names)
    unknown = [name for name in names if name not in CATALOGUE]
    if unknown:
        raise FetchError(f"unknown data set(s) {', '.join(unknown)}; known: {', '.join(CATALOGUE)}")
    accepted = set(accepted)
    refused = [name for name in names if CATALOGUE[name].non_commercial and name not in accepted]
    if refused:
        lines = [f"{name}: {CATALOGUE[name].licence}" for name in refused]
        raise FetchError("these data sets have a non-commercial licence; read it, then pass "
                         + " ".join(f"--accept-licence {name}" for name in refused) + ":\n  " + "\n  ".join(lines))
    dest.mkdir(parents=True, exist_ok=True)
    outcome = {}
    for name in names:
        data = CATALOGUE[name]
        say(f"{name}: {data.title}. Licence: {data.licence}" + (f" ({data.note})" if data.note else ""))
        if not force and is_installed(data, dest):
            say(f"{name}: already in {dest} (pass --force to fetch again)")
            outcome[name] = "already there"
            continue
        with tempfile.TemporaryDirectory(dir=dest, prefix=f".{name}-") as scratch:
            files = [_download(download, Path(scratch), source, say, retries) for download in data.downloads]
            try:
                written = data.install(files, dest)
            except (zipfile.BadZipFile, UnicodeDecodeError, ValueError, KeyError) as exc:
                raise FetchError(f"{name}: the downloaded file could not be read: {exc}") from None
        manifest = {"name": name, "sha256": [d.sha256 for d in data.downloads],
                    "source": source or "upstream", "files": written}
        _write_bytes(dest / MANIFESTS / f"{name}.json", json.dumps(manifest, indent=1).encode())
        say(f"{name}: wrote {', '.join(written)}")
        outcome[name] = "fetched"
    return outcome
