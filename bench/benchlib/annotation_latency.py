"""The latency phase of ``bench/annotation.py`` (its docstring says what and why):
one annotator's requests, one at a time, in blocks that alternate with bare passes
of the same model on the same pairs, then explanations next to ``ml.explain``."""

from __future__ import annotations

import time

from . import stack
from .bare import BareModel
from .client import Client
from .results import log
from .stack import CONTEXTS_NEXT, EXAMPLES
from .stats import summary_ms


def latency_phase(
    port: int,
    session_token: str,
    bares: dict[str, BareModel],
    hyps: list[str],
    n: int,
    n_explain: int,
    n_warm: int,
    block: int = 10,
    settle: float = 0.05,
) -> dict:
    """One annotator, one request at a time, in blocks alternating with the bare
    passes on the same pairs (see the docstring of bench/annotation.py)."""
    client = Client(port, {"X-Dynabench-Token": session_token})
    create_t, next_t, server_ms, statuses = [], [], [], {}
    bare_t: dict[str, list[float]] = {name: [] for name in bares}
    back_to_back_t: list[float] = []
    created = []  # (id, premise, hypothesis, predicted label)
    failures = []

    previous_post = [None]  # (start, seconds the server's model call took)

    def http_one(i: int, measure: bool):
        status, ctx, t_next = client.request("GET", CONTEXTS_NEXT)
        if status != 200:
            raise RuntimeError(f"contexts/next answered {status}: {ctx}")
        premise, hypothesis = ctx["fields"]["premise"], hyps[i % len(hyps)]
        before_post = time.perf_counter()
        # How long the model sat idle before this request's pass: from the previous
        # pass's end to this one's start, i.e. one request cycle minus the previous
        # model call (its web work before and after the pass included, as the model
        # is idle then too). The server's model call includes the queue round trip
        # in service mode, so this errs short: toward a faster bare reference.
        idle = 0.0
        if previous_post[0] is not None:
            idle = max(0.0, before_post - previous_post[0][0] - previous_post[0][1])
        status, data, t_create = client.request(
            "POST", EXAMPLES, stack.example_body(ctx, hypothesis, i)
        )
        model_s = (data or {}).get("latency_ms", 0) / 1000 if status == 201 else 0.0
        previous_post[0] = (before_post, model_s)
        if measure:
            statuses[status] = statuses.get(status, 0) + 1
            next_t.append(t_next)
            if status == 201:
                create_t.append(t_create)
                server_ms.append(data["latency_ms"] / 1000)
                created.append((data["id"], premise, hypothesis, data["prediction"]))
            else:
                failures.append({"status": status, "body": data})
        return premise, hypothesis, min(idle, 1.0)

    for i in range(n_warm):  # model load, caches, connection
        premise, hypothesis, _ = http_one(i, measure=False)
        for bare in bares.values():
            bare.forward(premise, hypothesis)
    for bare in bares.values():
        bare.explain("A warm-up premise.", "A warm-up hypothesis.", "neutral")
    reference_bare = next(iter(bares.values()))
    done = 0
    while done < n:
        previous_post[0] = None  # the first request of a block follows the settle pause
        block_rows = [
            http_one(n_warm + done + k, measure=True) for k in range(min(block, n - done))
        ]
        done += len(block_rows)
        for name, bare in bares.items():
            time.sleep(settle)
            bare_t[name].extend(bare.forward(p, h, idle=idle) for p, h, idle in block_rows)
        time.sleep(settle)
        back_to_back_t.extend(reference_bare.forward(p, h) for p, h, _ in block_rows)
        time.sleep(settle)

    explain_t, explain_status = [], {}
    bare_explain_t: dict[str, list[float]] = {name: [] for name in bares}
    if created:  # one untimed explanation warms Captum in the server
        client.request("POST", f"/api/examples/{created[0][0]}/explanation/", {})
    for example_id, premise, hypothesis, predicted in created[1 : 1 + n_explain]:  # fresh
        for name, bare in bares.items():
            bare_explain_t[name].append(bare.explain(premise, hypothesis, predicted))
        status, data, elapsed = client.request(
            "POST", f"/api/examples/{example_id}/explanation/", {}
        )
        explain_status[status] = explain_status.get(status, 0) + 1
        if status == 200 and data.get("n_steps") == 10:
            explain_t.append(elapsed)
        else:
            failures.append({"status": status, "body": data, "endpoint": "explanation"})
    client.close()
    variants = {name: summary_ms(samples) for name, samples in bare_t.items()}
    reference = min(variants, key=lambda name: variants[name]["p50_ms"] or float("inf"))
    return {
        "create_example": summary_ms(create_t),
        "bare_forward": {**variants[reference], "variant": reference},
        "bare_forward_variants": variants,
        "bare_forward_back_to_back": {**summary_ms(back_to_back_t), "variant": reference_bare.name},
        "server_predict_latency": summary_ms(server_ms),
        "contexts_next": summary_ms(next_t),
        "explanation": summary_ms(explain_t),
        "bare_explain_n10": summary_ms(bare_explain_t[reference]),
        "bare_explain_n10_variants": {name: summary_ms(v) for name, v in bare_explain_t.items()},
        "statuses": {str(k): v for k, v in statuses.items()},
        "explanation_statuses": {str(k): v for k, v in explain_status.items()},
        "failures": failures[:5],
        "warm_up_requests": n_warm,
    }


def judge_latency(latency: dict, target: float) -> None:
    """The ratios to the bare pass, and whether the p50 ratio meets ``target``, added
    to ``latency``."""
    base = latency["bare_forward"]["p50_ms"]
    p50 = latency["create_example"]["p50_ms"]
    ratio = round(p50 / base, 2) if p50 and base else None
    latency["ratio_p50_to_bare"] = ratio
    latency["ratio_p95_to_bare_p95"] = (
        round(latency["create_example"]["p95_ms"] / latency["bare_forward"]["p95_ms"], 2)
        if latency["create_example"]["p95_ms"]
        else None
    )
    b2b = latency.get("bare_forward_back_to_back", {}).get("p50_ms")
    latency["ratio_p50_to_bare_back_to_back"] = round(p50 / b2b, 2) if p50 and b2b else None
    latency["target_ratio"] = target
    latency["target_pass"] = bool(ratio is not None and ratio <= target and not latency["failures"])
    log(f"create-example p50 {p50} ms vs bare {base} ms: x{ratio} (target x{target})")
