"""Model submissions: a signed-in user uploads a zip of a Hugging Face model for a
task; it is checked (``ml.submissions``: size, zip bombs, paths, no pickles, an
architecture we load, the task's labels, a model that runs), stored as an
artifact, registered, and queued for evaluation on every dataset of the task.

- Per user and task, at most ``SUBMISSIONS_PER_DAY`` attempts a day (refused ones
  count too: checking costs a model load); the task's researchers are exempt.
- A submission is public or private. A private one shows only to its owner and
  the task's researchers (``visible_models``), on the board, the API and exports.
- Nothing is written outside the task's submissions folder, and a refused
  archive leaves nothing behind.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from core.errors import Conflict, InvalidInput, TooLarge, TooMany
from core.ratelimit import Limiter
from tasks.models import Job, ModelVersion, Task
from tasks.registry import models_root, register_model
from tasks.roles import is_researcher

from .services import ml_spec, start_evaluation

DAY = 24 * 3600


def limiter() -> Limiter:
    return Limiter("model-submissions", settings.SUBMISSIONS_PER_DAY, DAY)


def visible_models(task: Task, user):
    """The task's models ``user`` may see on the board: public ones, their own, and
    every one for the task's researchers."""
    models = ModelVersion.objects.filter(task=task)
    if is_researcher(user, task):
        return models
    if user is not None and user.is_authenticated:
        return models.filter(Q(is_public=True) | Q(created_by=user))
    return models.filter(is_public=True)


def _check_name(task: Task, name) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or "\x00" in name:
        raise InvalidInput.field("name", "Must be a model name of 1 to 100 characters.")
    name = name.strip()
    if ModelVersion.objects.filter(task=task, name=name).exists():
        raise Conflict(f"Task {task.slug} already has a model named {name!r}.")
    return name


def submit_model(task: Task, user, upload, *, name, public: bool = True) -> tuple[ModelVersion, Job]:
    """Check and register an uploaded model; returns it and its evaluation job."""
    from ml.submissions import SubmissionRejected, unpack_submission

    name = _check_name(task, name)
    if upload is None:
        raise InvalidInput.field("file", "Upload the model as a .zip file in the 'file' field.")
    if upload.size > settings.SUBMISSION_MAX_BYTES:
        raise TooLarge(f"The archive is {upload.size:,} bytes; the limit is {settings.SUBMISSION_MAX_BYTES:,}.")
    key = f"{user.pk}:{task.pk}"
    if not is_researcher(user, task):
        wait = limiter().take(key)  # counted and checked at once: parallel uploads cannot slip past
        if wait:
            raise TooMany(f"At most {settings.SUBMISSIONS_PER_DAY} submissions per task per day; "
                          f"try again in {wait} s.", retry_after=wait)
    folder = models_root() / task.slug / "submissions"
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / uuid.uuid4().hex
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        archive = Path(scratch) / "upload.zip"
        with open(archive, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        try:
            info = unpack_submission(archive, dest, ml_spec(task))
        except SubmissionRejected as exc:
            raise InvalidInput.field("file", str(exc)) from None
    try:
        with transaction.atomic():
            model = register_model(task, info, name=name, user=user)
            model.is_public, model.submitted = bool(public), True
            model.save(update_fields=["is_public", "submitted"])
            job = start_evaluation(model, user=user)
    except IntegrityError:
        shutil.rmtree(dest, ignore_errors=True)
        raise Conflict(f"Task {task.slug} already has a model named {name!r}.") from None
    except Exception:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return model, job
