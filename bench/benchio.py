"""What the benchmarks share: writing their JSON results (atomically) and naming
paths relative to the repository. The scripts run as ``python bench/<name>.py``,
so this directory is on ``sys.path``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the project's apps, ahead of this folder's scripts


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


def setup_django(folder: Path) -> None:
    """Django on a scratch SQLite database in ``folder`` (embedded mode), migrated."""
    os.environ.update(DEBUG="true", DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
                      DYNABENCH_VAR_DIR=str(folder), DYNABENCH_MODELS_DIR=str(folder / "models"),
                      DJANGO_SETTINGS_MODULE="dynabench.settings", ALLOWED_HOSTS="testserver")
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
