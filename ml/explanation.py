"""Word-level explanations with Captum's layer integrated gradients.

Attribution is taken at the output of the word-embedding lookup (before position and
segment embeddings are added), from a baseline where every word piece is replaced by
[PAD] while [CLS]/[SEP] are kept.  Per-piece scores are the sum over the embedding
dimension; word scores are the sum of their pieces.

Targets:
  * classification: the logit of ``target`` (default: the predicted label).
    Logits rather than probabilities: they do not saturate, so the attributions
    converge with few steps.  Both segments of a pair are explained.
  * extractive QA: the SUM of the start logit at the predicted start token and the
    end logit at the predicted end token (one integration instead of two; the
    answer's evidence for both ends in one map).  If the passage needed several
    windows, the window holding the predicted span is explained; words outside it
    get 0.

Words are cut from the ORIGINAL text of each field, independent of the tokenizer:
whitespace separates words; every punctuation or symbol grapheme (``!``, ``'``,
an emoji with its modifiers/joiners) is a word of its own; each CJK ideograph is a
word of its own (as BERT tokenises it); letters, digits and combining marks run
together.  So ``text[start:end] == word`` always holds, and a piece the vocabulary
cannot represent ([UNK], e.g. an emoji) still lands on its characters through the
tokenizer's offset mapping.  A piece overlapping several words (e.g. one [UNK] for
"love😍") splits its attribution evenly among them.

Thread safety: the integration hooks a private embedding lookup created per call,
never the model's own modules, so concurrent predictions on the same model in other
threads are unaffected.
"""

from __future__ import annotations

import bisect
import os
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

import regex
import torch

from .errors import InputError
from .inference import best_span, context_range, encode_classification, encode_qa
from .prediction import ModelCache, ModelRef, load_model
from .tracing import forward as inference_pass

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
_GRAPHEME = regex.compile(r"\X")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def split_words(text: str) -> list[tuple[int, int]]:
    """``[(start, end)]`` of the words of ``text`` (see the module docstring)."""
    words: list[tuple[int, int]] = []
    current: list[int] | None = None

    def close() -> None:
        nonlocal current
        if current is not None:
            words.append((current[0], current[1]))
            current = None

    for match in _GRAPHEME.finditer(text):
        grapheme = match.group()
        start, end = match.span()
        first = grapheme[0]
        category = unicodedata.category(first)
        if grapheme.isspace() or category == "Cc":
            close()
        elif category[0] in "PS" or _is_cjk(first):
            close()
            words.append((start, end))
        elif current is None:
            current = [start, end]
        else:
            current[1] = end
    close()
    return words


class _EmbeddingLookup(torch.nn.Module):
    """A private view of the model's word-embedding table for Captum to hook."""

    def __init__(self, embedding: torch.nn.Embedding):
        super().__init__()
        self.weight = embedding.weight
        self.padding_idx = embedding.padding_idx

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(input_ids, self.weight, self.padding_idx)


def _integrate(model, encoding, device, score_fn, n_steps: int, internal_batch_size, before_pass=None):
    from captum.attr import LayerIntegratedGradients

    lookup = _EmbeddingLookup(model.get_input_embeddings())
    input_ids = encoding["input_ids"].to(device)
    attention_mask = encoding["attention_mask"].to(device)
    token_type_ids = encoding["token_type_ids"].to(device) if "token_type_ids" in encoding else None
    special = torch.tensor(encoding["special_tokens_mask"], dtype=torch.bool, device=device)
    pad_id = lookup.padding_idx if lookup.padding_idx is not None else 0
    baseline = torch.where(special, input_ids, torch.full_like(input_ids, pad_id))

    def forward(ids, mask, types=None):
        # Captum also runs this without gradients: the embedding layer's values at the
        # input and the baseline, and the convergence delta's two scores (batch 1
        # each). Only the integration's gradient passes give way first.
        if before_pass is not None and torch.is_grad_enabled():
            before_pass()
        kwargs = {"inputs_embeds": lookup(ids), "attention_mask": mask}
        if types is not None:
            kwargs["token_type_ids"] = types
        return score_fn(model(**kwargs))

    extra = (attention_mask,) if token_type_ids is None else (attention_mask, token_type_ids)
    lig = LayerIntegratedGradients(forward, lookup)
    attributions, delta = lig.attribute(
        inputs=input_ids,
        baselines=baseline,
        additional_forward_args=extra,
        n_steps=n_steps,
        internal_batch_size=internal_batch_size,
        return_convergence_delta=True,
    )
    per_piece = attributions.sum(dim=-1)[0].detach().float().cpu().tolist()
    return per_piece, float(delta.reshape(-1)[0])


def _words(
    texts: dict[str, str],
    order: list[str],
    piece_fields: list[str | None],
    offsets: list[tuple[int, int]],
    per_piece: list[float],
) -> tuple[list[dict[str, Any]], bool]:
    spans = {name: split_words(texts[name]) for name in order}
    starts = {name: [s for s, _ in spans[name]] for name in order}
    scores = {name: [0.0] * len(spans[name]) for name in order}
    seen = {name: [False] * len(spans[name]) for name in order}
    for name, (s, e), value in zip(piece_fields, offsets, per_piece, strict=True):
        if name is None or e <= s:
            continue
        word_spans = spans[name]
        hits = []
        k = max(0, bisect.bisect_right(starts[name], s) - 1)
        while k < len(word_spans) and word_spans[k][0] < e:
            if word_spans[k][1] > s:
                hits.append(k)
            k += 1
        for k in hits:
            scores[name][k] += value / len(hits)
            seen[name][k] = True
    biggest = max((abs(v) for name in order for v in scores[name]), default=0.0)
    words = []
    for name in order:
        for (s, e), value in zip(spans[name], scores[name], strict=True):
            words.append(
                {
                    "field": name,
                    "text": texts[name][s:e],
                    "start": s,
                    "end": e,
                    "attribution": value,
                    "heat": value / biggest if biggest > 0 else 0.0,
                }
            )
    # Truncated: a word after the last word that received a piece got none itself.
    truncated = False
    for name in order:
        last_seen = max((k for k, flag in enumerate(seen[name]) if flag), default=-1)
        if last_seen < len(spans[name]) - 1:
            truncated = True
    return words, truncated


def explain(
    ref: ModelRef | str | os.PathLike,
    inputs: Mapping[str, Any],
    target: str | None = None,
    n_steps: int = 10,
    *,
    internal_batch_size: int | None = None,
    cache: ModelCache | None = None,
    before_pass: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Explain one example's prediction word by word.

    Returns::

        {"target": label | {"answer", "start", "end", "score"},
         "prediction": the predict() result for these inputs,
         "convergence_delta": float,     # sum(attributions) - (F(input) - F(baseline))
         "attribution_sum": float, "n_steps": int,
         "truncated": bool,              # some words were outside the model's input
         "words": [{"field", "text", "start", "end", "attribution", "heat"}],
         "passage_window": [start, end]}  # QA only: the passage characters explained

    ``heat`` is the attribution divided by the largest absolute word attribution
    (in [-1, 1]); ``text == inputs[field][start:end]``.

    ``internal_batch_size`` splits the integration into passes of that many steps;
    ``before_pass()`` is called before each of them and once before the prediction
    (``ceil(n_steps / internal_batch_size) + 1`` calls), so a caller can make the
    explanation give way to other work on the model.
    """
    if not isinstance(n_steps, int) or not 1 <= n_steps <= 1000:
        raise InputError("n_steps", "must be an integer between 1 and 1000")
    loaded = load_model(ref, cache)
    spec = loaded.spec
    texts = spec.validate_inputs(inputs)
    model, tokenizer, device = loaded.model, loaded.tokenizer, loaded.device
    extra: dict[str, Any] = {}

    if spec.is_classification:
        if target is not None:
            target_index = spec.label_index(target)
        with loaded.tokenizer_lock:
            encoding = encode_classification(
                tokenizer, spec, [texts], return_offsets_mapping=True, padding=False
            )
            encoding["special_tokens_mask"] = [
                [1 if s is None else 0 for s in encoding.sequence_ids(0)]
            ]
        if before_pass is not None:
            before_pass()
        with torch.inference_mode():
            logits = inference_pass(
                loaded,
                {
                    k: encoding[k].to(device)
                    for k in ("input_ids", "attention_mask", "token_type_ids")
                    if k in encoding
                },
            )["logits"][0]
        probs = torch.softmax(logits.float(), dim=-1).tolist()
        predicted = max(range(len(probs)), key=probs.__getitem__)
        if target is None:
            target_index = predicted
        prediction = {
            "label": spec.labels[predicted],
            "probabilities": dict(zip(spec.labels, probs, strict=True)),
        }
        per_piece, delta = _integrate(
            model,
            encoding,
            device,
            lambda out: out.logits[:, target_index],
            n_steps,
            internal_batch_size,
            before_pass,
        )
        sequence_ids = encoding.sequence_ids(0)
        piece_fields = [None if s is None else spec.input_fields[s] for s in sequence_ids]
        offsets = [tuple(o) for o in encoding["offset_mapping"][0].tolist()]
        target_out: Any = spec.labels[target_index]
    else:
        if target is not None:
            raise InputError("target", "extractive QA explains the predicted answer; no target")
        with loaded.tokenizer_lock:
            windows = encode_qa(tokenizer, spec, [texts])
        best = None
        if before_pass is not None:  # once for the windows' prediction passes
            before_pass()
        for w in range(len(windows["input_ids"])):
            ctx = context_range(windows, w)
            if ctx is None:
                continue
            ids = torch.tensor([windows["input_ids"][w]], device=device)
            kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            if "token_type_ids" in windows:
                kwargs["token_type_ids"] = torch.tensor(
                    [windows["token_type_ids"][w]], device=device
                )
            with torch.inference_mode():
                out = inference_pass(loaded, kwargs)
            s, e, score = best_span(
                out["start_logits"][0].cpu(), out["end_logits"][0].cpu(), ids.shape[1], ctx
            )
            if best is None or score > best[3]:
                best = (w, s, e, score)
        if best is None:
            raise InputError("passage", "the passage has no readable text")
        w, s_tok, e_tok, score = best
        offsets = [tuple(o) for o in windows["offset_mapping"][w]]
        passage = texts["passage"]
        start_char, end_char = offsets[s_tok][0], offsets[e_tok][1]
        prediction = {
            "answer": passage[start_char:end_char],
            "start": start_char,
            "end": end_char,
            "score": score,
        }
        sequence_ids = windows.sequence_ids(w)
        encoding = {
            "input_ids": torch.tensor([windows["input_ids"][w]]),
            "attention_mask": torch.tensor([windows["attention_mask"][w]]),
            "special_tokens_mask": [[1 if x is None else 0 for x in sequence_ids]],
        }
        if "token_type_ids" in windows:
            encoding["token_type_ids"] = torch.tensor([windows["token_type_ids"][w]])
        per_piece, delta = _integrate(
            model,
            encoding,
            device,
            lambda out: out.start_logits[:, s_tok] + out.end_logits[:, e_tok],
            n_steps,
            internal_batch_size,
            before_pass,
        )
        piece_fields = [{0: "question", 1: "passage"}.get(x) for x in sequence_ids]
        target_out = dict(prediction)
        c0, c1 = context_range(windows, w)
        extra["passage_window"] = [offsets[c0][0], offsets[c1][1]]

    words, truncated = _words(texts, spec.input_fields, piece_fields, offsets, per_piece)
    return {
        "target": target_out,
        "prediction": prediction,
        "convergence_delta": delta,
        "attribution_sum": float(sum(per_piece)),
        "n_steps": n_steps,
        "truncated": truncated,
        "words": words,
        **extra,
    }
