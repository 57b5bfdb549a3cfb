"""A release's Croissant metadata: valid by MLCommons' own validator (mlcroissant), and
the records it reads are the rows of the Parquet files."""

import json

import pytest

from leaderboard.releases import service
from leaderboard.releases.files import sha256_of


@pytest.fixture
def copied(released, tmp_path):
    """The release of ``released`` (tests/conftest.py) copied out to a folder, as a user downloads it."""
    service.copy_release(released, tmp_path / "release")
    return released, tmp_path / "release"


# mlcroissant builds its graph with rdflib's ConjunctiveGraph and calls pandas' reset_index(inplace=True),
# which those libraries deprecate: their warnings, not ours.
@pytest.mark.filterwarnings("ignore:ConjunctiveGraph is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.reset_index is deprecated")
def test_mlcroissant_finds_no_error_or_warning_and_reads_every_row(copied):
    import mlcroissant
    import pyarrow.parquet as pq

    release, folder = copied
    dataset = mlcroissant.Dataset(jsonld=str(folder / "croissant.json"))
    issues = dataset.metadata.ctx.issues
    assert not issues.errors and not issues.warnings, (issues.errors, issues.warnings)
    assert [rs.name for rs in dataset.metadata.record_sets] == release.splits
    for split in release.splits:
        records = list(dataset.records(record_set=split))
        table = pq.read_table(folder / "data" / f"{split}.parquet").to_pylist()
        assert [r[f"{split}/uid"].decode() for r in records] == [row["uid"] for row in table]
        for record, row in zip(records, table, strict=True):
            assert record[f"{split}/label"].decode() == row["label"]
            assert record[f"{split}/round"] == row["round"]
            assert [m.decode() for m in record[f"{split}/target_models"]] == row["target_models"]


def test_the_croissant_file_names_each_data_file_with_its_digest(copied):
    release, folder = copied
    document = json.loads((folder / "croissant.json").read_text())
    assert document["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    assert document["version"] == "1.0.0" and document["name"] == "dynabench-nli-v1"
    files = {entry["contentUrl"]: entry["sha256"] for entry in document["distribution"]}
    assert files == {name: release.files[name]["sha256"] for name in release.data_files}
    assert all(sha256_of(folder / name) == digest for name, digest in files.items())
    assert "dynabench_nli_v1" in document["citeAs"]
