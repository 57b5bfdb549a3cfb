"""What the benchmarks share: writing their JSON results (atomically) and naming
paths relative to the repository. The scripts run as ``python bench/<name>.py``,
so this directory is on ``sys.path``."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def display_path(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_json(path: Path, document: dict) -> str:
    """Write ``document`` as indented JSON; the path as it should be printed."""
    write_atomic(path, json.dumps(document, indent=2) + "\n")
    return display_path(path)
