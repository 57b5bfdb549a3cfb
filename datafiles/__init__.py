"""The public data sets' files, without Django: fetching them and reading them.

- ``datafiles.fetching``: the catalogue of public data sets (official URLs, sha256 pins,
  licences) and ``fetch``, which downloads, verifies and writes them into the data folder;
- ``datafiles.readers``: one reader per file format, each yielding ``Record`` (one
  example, in the shape the tasks use) or ``RowError`` (one bad row, with its line).

Like ``ml``, this package imports no Django and no app (an import-linter contract keeps
it so), so the benchmarks (``bench/``) and scripts read the same files as the platform
without a database. The apps build on it: ``annotation.datasets`` imports the records,
``tasks``' ``fetch_data`` command fetches them into ``settings.DYNABENCH_DATA_DIR``.

It is called ``datafiles`` and not ``datasets`` because ``datasets`` is the Hugging Face
library, which the releases load (``from datasets import load_dataset``): a top-level
package of that name would shadow it.
"""
