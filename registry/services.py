"""The model registry: registering model versions, and the references the inference
code passes around (the rounds' target models, read as such: ``tasks.targets``).

A ``task`` passed in is a ``tasks.Task``: this app sits below the task catalogue, so
it uses what the row offers (``slug``, ``parsed_config``) without importing it.

A ``TargetModel`` is what an inference call needs to know about a model version
(id, name, artifact path, sha256): the web process reads it with the round's
target models in one query and sends it along, so neither the inference thread
nor a worker queries the database to answer; the artifact is still checked
against its sha256 when it is loaded. ``ml`` is imported inside functions, so a
web process never imports torch before a fork.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

import ml
from core.errors import Conflict, InvalidInput
from jobs.models import Job

from . import artifacts
from .models import ModelVersion, endpoint_of, resolve_artifact_path


@dataclass(frozen=True)
class TargetModel:
    """A registered model version, as inference calls see it."""

    id: int
    name: str
    path: str  # as stored: a relative one is under each process's DYNABENCH_MODELS_DIR
    sha256: str
    # The version's ``Endpoint`` id when it is served behind an endpoint (no artifact:
    # ``registry.endpoints`` asks it), else None.
    endpoint_id: int | None = None

    def message(self) -> dict:
        """The JSON-safe form sent to a worker."""
        return asdict(self)

    def ref(self):
        """The ``ml.ModelRef`` in this process (its own models directory or cache),
        without fetching it."""
        return ml.ModelRef(str(resolve_artifact_path(self.path)), self.sha256)

    def fetch(self):
        """``ref()``, once the artifact is on this machine (downloaded from object
        storage if need be: ``registry.artifacts.ensure_local``)."""
        artifacts.ensure_local(self.path, self.sha256)
        return self.ref()

    @classmethod
    def from_message(cls, message: dict) -> TargetModel:
        endpoint_id = message.get("endpoint_id")
        return cls(int(message["id"]), str(message["name"]), str(message["path"]), str(message["sha256"]),
                   int(endpoint_id) if endpoint_id is not None else None)


def target_model(model_version: ModelVersion) -> TargetModel:
    endpoint = endpoint_of(model_version)
    return TargetModel(model_version.pk, model_version.name, model_version.artifact_path, model_version.sha256,
                       endpoint.pk if endpoint is not None else None)


def ref_for(model_version: ModelVersion):
    """The version's ``ml.ModelRef``, its artifact fetched to this machine first."""
    return target_model(model_version).fetch()


# --- artifacts and registration --------------------------------------------------------


MODEL_NAME_MAX = 100


def check_new_model_name(task, name) -> str:
    """``name`` (stripped) for a new model of ``task``, or the domain error that says
    why not: 1 to 100 characters, no NUL, not a model of the task already, and not the
    name a queued or running job (training, a submission's check) will register. The
    one check every way of making a model goes through."""
    if not isinstance(name, str) or not name.strip() or len(name) > MODEL_NAME_MAX or "\x00" in name:
        raise InvalidInput.field("name", f"Must be a model name of 1 to {MODEL_NAME_MAX} characters.")
    name = name.strip()
    if ModelVersion.objects.filter(task=task, name=name).exists():
        raise Conflict(f"Task {task.slug} already has a model named {name!r}.")
    pending = Job.objects.filter(task=task, kind__in=[Job.Kind.TRAIN_MODEL, Job.Kind.CHECK_SUBMISSION],
                                 status__in=Job.ACTIVE, params__name=name).first()
    if pending is not None:
        being = "trained" if pending.kind == Job.Kind.TRAIN_MODEL else "checked"
        raise Conflict(f"A model named {name!r} is being {being} for task {task.slug} already (job #{pending.pk}).")
    return name


def models_root() -> Path:
    root = Path(settings.DYNABENCH_MODELS_DIR)
    root.mkdir(parents=True, exist_ok=True)
    return root


def artifact_dir_for(task, name: str) -> Path:
    """A fresh directory name for a new artifact of ``task`` (not created)."""
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S-%f")
    return models_root() / task.slug / f"{slugify(name) or 'model'}-{stamp}"


@transaction.atomic
def register_model(task, info, *, name: str, parent: ModelVersion | None = None,
                   rounds: Iterable = (), user=None) -> ModelVersion:
    """Register a finished artifact (``ml.ArtifactInfo``), after verifying it once more
    on disk and checking that it was trained for this task's labels."""
    verified = ml.verify_artifact(info.path, info.sha256)
    spec = verified.metadata.get("task", {})
    expected = task.parsed_config.ml_spec_dict()
    if spec.get("kind") != expected["kind"] or list(spec.get("labels", [])) != expected["labels"]:
        raise ValidationError(
            f"The artifact was trained for {spec.get('kind')} {spec.get('labels')}, "
            f"not for task {task.slug} ({expected['kind']} {expected['labels']})."
        )
    path = Path(info.path)
    stored = artifacts.publish(path, verified.sha256)  # object storage: uploaded, registered by URL
    if stored is None:
        try:
            stored = str(path.relative_to(models_root()))
        except ValueError:
            stored = str(path)
    model = ModelVersion.objects.create(
        task=task, name=name, artifact_path=stored, sha256=verified.sha256,
        backbone=verified.metadata.get("backbone", ""), parent=parent,
        training_data=verified.metadata.get("training_data", {}),
        metrics=verified.metadata.get("metrics", {}), created_by=user,
    )
    model.trained_on_rounds.set(list(rounds))
    return model
