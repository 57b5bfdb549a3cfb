"""Data releases: a task's verified data published the way the field publishes it.

A release (``leaderboard.models.Release``) is an immutable, versioned snapshot of
one task's verified examples from chosen closed rounds and splits, made by a job
(``service``): one Parquet file per split that ``datasets.load_dataset("parquet",
...)`` reads without our code (``rows``, ``files``), a data card (``card``: README.md
with the Hugging Face Hub's YAML header) and Croissant metadata (``croissant``),
kept in the artifact store. ``hub`` pushes a release's folder to the Hub;
``browse`` serves the public browser of closed rounds' verified examples.

Apps above this one add sections to the card (``contributions``): the crowd app
says how its annotators were recruited and paid, without this app importing it.
"""
