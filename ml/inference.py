"""Tokenisation and batched inference shared by train (dev evaluation), predict and
explain.  Works on anything with ``.model``, ``.tokenizer``, ``.spec``, ``.device``
and ``.tokenizer_lock`` (a :class:`ml.artifacts.LoadedModel`, or the model being
trained).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from .spec import TaskSpec
from .tracing import forward

#: Longest answer, in word pieces, that QA decoding considers.
MAX_ANSWER_TOKENS = 30
DEFAULT_BATCH_SIZE = 32


def qa_stride(spec: TaskSpec) -> int:
    """Overlap, in tokens, between consecutive passage windows."""
    return min(128, spec.max_tokens // 4)


def qa_question_limit(spec: TaskSpec) -> int:
    """Questions longer than this many word pieces are cut (leaves room for windows)."""
    return max(8, spec.max_tokens // 3)


def _lock(holder: Any):
    lock = getattr(holder, "tokenizer_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


# -- classification -------------------------------------------------------------------


def encode_classification(
    tokenizer: Any,
    spec: TaskSpec,
    rows: Sequence[dict[str, str]],
    *,
    padding: bool | str = "longest",
    return_tensors: str | None = "pt",
    return_offsets_mapping: bool = False,
):
    """Tokenise validated rows for a classification model (one or two segments)."""
    fields = spec.input_fields
    first = [row[fields[0]] for row in rows]
    second = [row[fields[1]] for row in rows] if len(fields) == 2 else None
    return tokenizer(
        first,
        second,
        truncation=True,
        max_length=spec.max_tokens,
        padding=padding,
        return_tensors=return_tensors,
        return_offsets_mapping=return_offsets_mapping,
    )


def _model_inputs(encoding, device) -> dict[str, torch.Tensor]:
    keys = ("input_ids", "attention_mask", "token_type_ids")
    return {k: encoding[k].to(device) for k in keys if k in encoding}


def classify(holder: Any, rows: Sequence[dict[str, str]], batch_size: int = DEFAULT_BATCH_SIZE):
    """Class probabilities for validated rows: ``[{"label", "probabilities"}]``.

    Rows are batched by length (less padding) and returned in the input order.
    """
    spec: TaskSpec = holder.spec
    order = sorted(range(len(rows)), key=lambda i: sum(len(rows[i][f]) for f in spec.input_fields))
    results: list[dict[str, Any] | None] = [None] * len(rows)
    for begin in range(0, len(order), batch_size):
        chunk = order[begin : begin + batch_size]
        with _lock(holder):
            encoding = encode_classification(holder.tokenizer, spec, [rows[i] for i in chunk])
        with torch.inference_mode():
            logits = forward(holder, _model_inputs(encoding, holder.device))["logits"]
            probs = torch.softmax(logits.float(), dim=-1).cpu().tolist()
        for i, row_probs in zip(chunk, probs, strict=True):
            best = max(range(len(row_probs)), key=row_probs.__getitem__)
            results[i] = {
                "label": spec.labels[best],
                "probabilities": dict(zip(spec.labels, row_probs, strict=True)),
            }
    return results


# -- extractive QA --------------------------------------------------------------------


def truncate_question(tokenizer: Any, spec: TaskSpec, question: str) -> str:
    """Cut a question to :func:`qa_question_limit` word pieces (on a piece boundary)."""
    limit = qa_question_limit(spec)
    enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    if len(offsets) <= limit:
        return question
    return question[: offsets[limit - 1][1]]


def encode_qa(tokenizer: Any, spec: TaskSpec, rows: Sequence[dict[str, str]]):
    """Windows over each passage: ``[CLS] question [SEP] passage-window [SEP]``.

    Returns the fast-tokenizer encoding (unpadded lists) with ``offset_mapping`` and
    ``overflow_to_sample_mapping``; only the passage is truncated, consecutive
    windows overlap by :func:`qa_stride` tokens.
    """
    questions = [truncate_question(tokenizer, spec, row["question"]) for row in rows]
    passages = [row["passage"] for row in rows]
    return tokenizer(
        questions,
        passages,
        truncation="only_second",
        max_length=spec.max_tokens,
        stride=qa_stride(spec),
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )


def context_range(encoding, index: int) -> tuple[int, int] | None:
    """First and last token index of the passage in window ``index`` (None if the
    passage produced no tokens, e.g. it holds only characters the tokenizer drops)."""
    seq_ids = encoding.sequence_ids(index)
    positions = [i for i, s in enumerate(seq_ids) if s == 1]
    return (positions[0], positions[-1]) if positions else None


def pad_batch(
    features: Sequence[dict[str, list[int]]], pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Dynamic padding: pad each list-valued key to the longest feature in the batch."""
    width = max(len(f["input_ids"]) for f in features)
    out: dict[str, torch.Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], list):
            fill = pad_token_id if key == "input_ids" else 0
            out[key] = torch.tensor(
                [v + [fill] * (width - len(v)) for v in values], dtype=torch.long
            )
        else:
            out[key] = torch.tensor(values, dtype=torch.long)
    return out


def best_span(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    length: int,
    ctx: tuple[int, int],
    max_answer_tokens: int = MAX_ANSWER_TOKENS,
) -> tuple[int, int, float]:
    """Best (start_token, end_token, probability) inside the passage tokens.

    Probabilities are softmaxes over the window's real (unpadded) tokens; the span
    score is ``p_start * p_end`` with ``start <= end < start + max_answer_tokens``.
    """
    p_start = torch.softmax(start_logits[:length].float(), dim=-1)
    p_end = torch.softmax(end_logits[:length].float(), dim=-1)
    c0, c1 = ctx
    scores = p_start[c0 : c1 + 1, None] * p_end[None, c0 : c1 + 1]
    band = torch.triu(torch.ones_like(scores, dtype=torch.bool))
    band &= ~torch.triu(torch.ones_like(scores, dtype=torch.bool), diagonal=max_answer_tokens)
    scores = scores.masked_fill(~band, -1.0)
    flat = int(torch.argmax(scores))
    width = scores.shape[1]
    i, j = divmod(flat, width)
    return c0 + i, c0 + j, float(scores[i, j])


def answer_questions(
    holder: Any, rows: Sequence[dict[str, str]], batch_size: int = DEFAULT_BATCH_SIZE
) -> list[dict[str, Any]]:
    """Best answer span per validated row: ``{"answer", "start", "end", "score"}``.

    ``start``/``end`` are character offsets into the row's passage (end exclusive), so
    ``passage[start:end] == answer``.  Long passages are read in overlapping windows
    and the best-scoring span over all windows wins.
    """
    spec: TaskSpec = holder.spec
    with _lock(holder):
        encoding = encode_qa(holder.tokenizer, spec, rows)
    n_windows = len(encoding["input_ids"])
    sample_of = encoding["overflow_to_sample_mapping"]
    best: list[dict[str, Any] | None] = [None] * len(rows)
    order = sorted(range(n_windows), key=lambda i: len(encoding["input_ids"][i]))
    pad_id = holder.tokenizer.pad_token_id or 0
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoding]
    for begin in range(0, n_windows, batch_size):
        chunk = order[begin : begin + batch_size]
        batch = pad_batch([{k: encoding[k][i] for k in keys} for i in chunk], pad_id)
        with torch.inference_mode():
            out = forward(holder, {k: v.to(holder.device) for k, v in batch.items()})
            starts, ends = out["start_logits"].float().cpu(), out["end_logits"].float().cpu()
        for row_in_batch, window in enumerate(chunk):
            ctx = context_range(encoding, window)
            if ctx is None:
                continue
            length = len(encoding["input_ids"][window])
            s, e, score = best_span(starts[row_in_batch], ends[row_in_batch], length, ctx)
            sample = sample_of[window]
            if best[sample] is None or score > best[sample]["score"]:
                offsets = encoding["offset_mapping"][window]
                start_char, end_char = offsets[s][0], offsets[e][1]
                passage = rows[sample]["passage"]
                best[sample] = {
                    "answer": passage[start_char:end_char],
                    "start": start_char,
                    "end": end_char,
                    "score": score,
                }
    return [b or {"answer": "", "start": 0, "end": 0, "score": 0.0} for b in best]
