"""Fine-tune a backbone for a task and save it as a verified artifact.

A plain PyTorch loop: seeded, dynamic padding, AdamW with linear warm-up and decay,
dev evaluation after every epoch, and model selection (the best epoch's weights are
the ones saved).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import random
import time
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import metrics as M
from .artifacts import ArtifactInfo, model_class_for, save_artifact
from .backbones import (
    DEFAULT_BACKBONE,
    configure_torch_threads,
    get_device,
    import_transformers,
    quiet_transformers,
    resolve_backbone,
)
from .errors import ArtifactError, InputError
from .features import classification_features, qa_features, validate_rows
from .inference import answer_questions, classify, pad_batch
from .spec import TaskSpec

log = logging.getLogger(__name__)

Progress = Callable[[float, str], None]


# -- evaluation -----------------------------------------------------------------------------


def evaluate_rows(holder: Any, rows: list[dict]) -> dict[str, Any]:
    """Dev metrics for validated rows with the model in ``holder``."""
    spec: TaskSpec = holder.spec
    inputs = [r["inputs"] for r in rows]
    if spec.is_classification:
        predictions = classify(holder, inputs)
        gold = [spec.labels[r["label"]] for r in rows]
        pred = [p["label"] for p in predictions]
        report = M.classification_report(gold, pred, spec.labels)
        return {"accuracy": report["accuracy"], "macro_f1": report["macro_f1"], "report": report}
    predictions = answer_questions(holder, inputs)
    golds = [[text for text, _ in r["answers"]] for r in rows]
    scores = M.squad_scores([p["answer"] for p in predictions], golds)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}


def _selection_key(spec: TaskSpec, dev: dict[str, Any]) -> tuple[float, float]:
    if spec.is_classification:
        return (dev["accuracy"], dev["macro_f1"])
    return (dev["f1"], dev["exact_match"])


# -- training --------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "norm" in name.lower() else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr)


def _linear_schedule(optimizer, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(
    spec: TaskSpec,
    train_rows: Sequence[Mapping[str, Any]],
    dev_rows: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike,
    *,
    backbone: str = DEFAULT_BACKBONE,
    epochs: int = 3,
    batch_size: int = 16,
    lr: float = 5e-5,
    seed: int = 0,
    max_steps: int | None = None,
    training_data: dict[str, Any] | None = None,
    progress: Progress | None = None,
    weight_decay: float = 0.01,
    warmup_ratio: float = 0.1,
    device: Any = None,
    freeze_encoder: bool = False,
    max_minutes: float | None = None,
    snapshot_minutes: Sequence[float] = (),
) -> ArtifactInfo:
    """Fine-tune ``backbone`` on ``train_rows``; save the best epoch to ``out_dir``.

    Rows: classification ``{"inputs": {field: text}, "label": "entailment"}``;
    extractive QA ``{"inputs": {"passage", "question"}, "answer": {"text", "start"}}``
    (``"answers": [...]`` with several gold answers also works; training uses the
    first, dev scoring takes the best match).

    ``max_steps`` caps the number of optimizer steps (training stops at whichever of
    ``epochs`` or ``max_steps`` comes first).  After each epoch (and when stopping at
    ``max_steps``) the model is scored on ``dev_rows``; the best-scoring epoch
    (accuracy then macro-F1; QA: F1 then exact match) is saved.  With no dev rows the
    last weights are saved.

    ``max_minutes`` is a time budget: training stops after the step that reaches that
    many minutes of training (dev scoring and saving are not counted), is scored on
    ``dev_rows`` there like a ``max_steps`` stop, and saved. The learning-rate schedule
    depends on the step alone (it is laid out for ``epochs`` and ``max_steps``), so a
    run's weights at minute t are what a run with a budget of t minutes would keep.
    ``snapshot_minutes`` saves those weights as they are at each of these minutes of
    training (no dev scoring) beside ``out_dir``, as ``<out_dir>-at-<m>min``: a
    training curve in one run (``bench/qa_training.py``).

    ``progress(percent, message)`` is called at the start, about every 1% of the
    steps, after each evaluation and at the end; raising from it aborts training
    (nothing is written).

    ``backbone`` may be a saved artifact of the same task (its directory): training
    then starts from its weights, head included (fine-tuning a parent model).
    ``freeze_encoder`` trains only the task head (the classifier or the span head) on
    top of a fixed encoder: much faster, and usually less accurate than full
    fine-tuning.
    """
    started = time.perf_counter()
    if not isinstance(spec, TaskSpec):
        raise TypeError("spec must be a TaskSpec")
    if epochs < 1 or batch_size < 1 or lr <= 0 or (max_steps is not None and max_steps < 1):
        raise ValueError("epochs, batch_size, lr and max_steps must be positive")
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError("max_minutes must be positive")
    snapshots = sorted(float(m) for m in snapshot_minutes)
    if any(not m > 0 for m in snapshots):
        raise ValueError("snapshot_minutes must be positive")
    if Path(out_dir).exists():
        raise ArtifactError(f"artifact directory {out_dir} already exists")
    train_clean = validate_rows(spec, train_rows, "train")
    dev_clean = validate_rows(spec, dev_rows, "dev")
    if not train_clean:
        raise InputError("train_rows", "no training rows")

    def report(percent: float, message: str) -> None:
        log.info("train %5.1f%% %s", percent, message)
        if progress is not None:
            progress(round(min(100.0, max(0.0, percent)), 2), message)


    quiet_transformers()
    configure_torch_threads()
    seed_everything(seed)
    device = get_device() if device is None else torch.device(device)
    backbone_path = resolve_backbone(backbone)
    report(0.0, f"loading backbone {backbone} on {device}")
    tokenizer = import_transformers().AutoTokenizer.from_pretrained(backbone_path, local_files_only=True)
    extra = {}
    if spec.is_classification:
        extra = {
            "num_labels": len(spec.labels),
            "id2label": dict(enumerate(spec.labels)),
            "label2id": spec.label_map,
        }
    model = model_class_for(spec).from_pretrained(
        backbone_path, use_safetensors=True, local_files_only=True, **extra
    )
    if freeze_encoder:
        for param in model.base_model.parameters():
            param.requires_grad = False
    model.to(device)
    holder = types.SimpleNamespace(
        model=model, tokenizer=tokenizer, spec=spec, device=device, tokenizer_lock=None
    )

    if spec.is_classification:
        features = classification_features(tokenizer, spec, train_clean)
    else:
        features = qa_features(tokenizer, spec, train_clean)
    steps_per_epoch = math.ceil(len(features) / batch_size)
    total_steps = epochs * steps_per_epoch
    if max_steps is not None:
        total_steps = min(total_steps, max_steps)
    warmup_steps = int(warmup_ratio * total_steps)
    optimizer = _optimizer(model, lr, weight_decay)
    scheduler = _linear_schedule(optimizer, warmup_steps, total_steps)
    generator = torch.Generator().manual_seed(seed)
    pad_id = tokenizer.pad_token_id or 0
    report_every = max(1, total_steps // 100)
    report(
        1.0,
        f"training on {len(train_clean)} rows ({len(features)} features), "
        f"{total_steps} steps, dev {len(dev_clean)} rows",
    )

    history: list[dict[str, Any]] = []
    best_key: tuple[float, float] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    best_epoch = 0
    best_dev: dict[str, Any] | None = None
    train_seconds = 0.0
    budget_seconds = None if max_minutes is None else 60.0 * max_minutes

    def done(step: int, seconds: float) -> float:
        """The share of the run behind us: of its steps, or of its time budget if that ends it first."""
        share = step / total_steps
        return min(1.0, max(share, seconds / budget_seconds)) if budget_seconds else share

    out_of_time = False
    snapshots_saved: list[dict[str, Any]] = []
    step = 0
    epoch = 0
    while epoch < epochs and step < total_steps and not out_of_time:
        epoch += 1
        model.train()
        order = torch.randperm(len(features), generator=generator).tolist()
        loss_sum, loss_count = 0.0, 0
        epoch_started = time.perf_counter()
        for begin in range(0, len(order), batch_size):
            if step >= total_steps or out_of_time:
                break
            batch = pad_batch([features[i] for i in order[begin : begin + batch_size]], pad_id)
            out = model(**{k: v.to(device) for k, v in batch.items()})
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            loss_sum += float(out.loss.detach())
            loss_count += 1
            clock = train_seconds + time.perf_counter() - epoch_started
            while snapshots and clock >= 60.0 * snapshots[0]:
                minute = snapshots.pop(0)
                paused = time.perf_counter()
                model.eval()
                snapshot = Path(f"{os.fspath(out_dir)}-at-{minute:g}min")
                save_artifact(copy.deepcopy(model).to("cpu"), tokenizer, spec, snapshot, backbone=str(backbone),
                              training_data={"train_count": len(train_clean), **(training_data or {})},
                              metrics={"kind": spec.kind, "steps": step, "epoch": epoch,
                                       "train_seconds": round(clock, 3), "snapshot_minutes": minute})
                snapshots_saved.append({"minutes": minute, "step": step, "path": str(snapshot)})
                model.train()
                epoch_started += time.perf_counter() - paused  # saving is not training time
            if budget_seconds is not None and clock >= budget_seconds:
                out_of_time = True
            if step % report_every == 0 or step == total_steps or out_of_time:
                report(
                    1.0 + 94.0 * done(step, clock),
                    f"epoch {epoch}/{epochs} step {step}/{total_steps} "
                    f"loss {loss_sum / loss_count:.4f}"
                    + (f", {clock / 60:.1f} of {max_minutes:g} minutes" if max_minutes is not None else "")
                    + (": the time budget is spent" if out_of_time else ""),
                )
        train_seconds += time.perf_counter() - epoch_started
        entry: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            "train_loss": loss_sum / max(1, loss_count),
        }
        if dev_clean:
            model.eval()
            dev = evaluate_rows(holder, dev_clean)
            entry.update({f"dev_{k}": v for k, v in dev.items() if k != "report"})
            key = _selection_key(spec, dev)
            improved = best_key is None or key > best_key
            if improved:
                best_key, best_epoch = key, epoch
                best_state = {
                    k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
                }
                best_dev = dev
            scores = ", ".join(f"{k} {v:.4f}" for k, v in dev.items() if k != "report")
            report(
                1.0 + 94.0 * done(step, train_seconds),
                f"epoch {epoch} dev {scores}" + (" (best so far)" if improved else ""),
            )
        history.append(entry)

    if dev_clean and best_epoch != epoch and best_state is not None:
        model.load_state_dict(best_state)
    elif not dev_clean:
        best_epoch = epoch
    model.eval()

    seconds = time.perf_counter() - started
    examples_seen = min(step * batch_size, len(features) * epoch)
    metrics: dict[str, Any] = {
        "kind": spec.kind,
        "train_count": len(train_clean),
        "train_features": len(features),
        "dev_count": len(dev_clean),
        "steps": step,
        "epochs_run": epoch,
        "best_epoch": best_epoch,
        "seconds": round(seconds, 3),
        "train_seconds": round(train_seconds, 3),
        "train_examples_per_second": round(examples_seen / max(train_seconds, 1e-9), 2),
        "history": history,
        **({"stopped_by_time_budget": out_of_time} if max_minutes is not None else {}),
        **({"snapshots": snapshots_saved} if snapshot_minutes else {}),
        "hyperparameters": {
            "epochs": epochs,
            "batch_size": batch_size,
            "lr": lr,
            "seed": seed,
            "max_steps": max_steps,
            "weight_decay": weight_decay,
            "warmup_ratio": warmup_ratio,
            "max_tokens": spec.max_tokens,
            "freeze_encoder": freeze_encoder,
            "max_minutes": max_minutes,
        },
        "device": str(device),
    }
    if spec.is_classification:
        metrics["dev_accuracy"] = best_dev["accuracy"] if best_dev else None
        metrics["dev_macro_f1"] = best_dev["macro_f1"] if best_dev else None
        metrics["dev_report"] = best_dev["report"] if best_dev else None
    else:
        metrics["dev_exact_match"] = best_dev["exact_match"] if best_dev else None
        metrics["dev_f1"] = best_dev["f1"] if best_dev else None

    report(96.0, f"saving artifact to {out_dir}")
    summary = {"train_count": len(train_clean), "dev_count": len(dev_clean)}
    summary.update(training_data or {})
    info = save_artifact(
        model.to("cpu"),
        tokenizer,
        spec,
        out_dir,
        backbone=str(backbone),
        training_data=summary,
        metrics=metrics,
    )
    report(100.0, f"saved artifact {info.sha256[:12]} (best epoch {best_epoch})")
    return info
