"""The files of a release: one Parquet file per split, written a chunk at a time, and
their digests.

Parquet because ``datasets.load_dataset("parquet", data_files=...)`` (and pandas, and
every dataframe library) reads it without our code, with its column types: the Hub's
own format for data sets. The schema is fixed by the task's config (``rows.columns``),
so every split of a release, and every release of a task whose config kept its
fields, has the same columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from datafiles.fetching import sha256_of  # one file hash for the project (releases re-export it)

from .rows import Chunk, Column

ARROW_KINDS = ("text", "int", "float", "bool", "text_list")


def arrow_schema(cols: list[Column]):
    import pyarrow as pa

    kinds = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
             "text_list": pa.list_(pa.string())}
    return pa.schema([pa.field(c.name, kinds[c.kind], nullable=c.nullable,
                               metadata={"description": c.description}) for c in cols])


def write_split(path: Path, cols: list[Column], chunks: Iterable[Chunk],
                on_chunk: Callable[[Chunk], None] | None = None) -> int:
    """Write ``chunks`` to the Parquet file ``path`` (zstd), one row group per chunk;
    the rows written. ``on_chunk`` sees each chunk after it is written. A row whose
    value does not fit its column (a missing required value) stops the write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(cols)
    names = [c.name for c in cols]
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for chunk in chunks:
            if chunk.rows:
                table = pa.Table.from_pydict({name: [row[name] for row in chunk.rows] for name in names},
                                             schema=schema)
                writer.write_table(table)
                written += len(chunk.rows)
            if on_chunk is not None:
                on_chunk(chunk)
    return written


def describe(path: Path, **extra) -> dict:
    """A file's record in ``Release.files``: sha256 and bytes (and what ``extra`` adds)."""
    return {"sha256": sha256_of(path), "bytes": path.stat().st_size, **extra}
