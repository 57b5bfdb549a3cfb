"""The ``endpoint`` block of RESULTS.md, from ``bench/endpoint.py``'s JSON: an endpoint
target's hot path beside calling the endpoint directly and through the ``ml`` client, in
the same run, and the sentence that reads them, generated here."""

from __future__ import annotations

from .results import markdown_table

ORDER = [("direct", "the endpoint called directly (one POST)"),
         ("client", "`ml.endpoints` client (prompt, retries, strict parsing)"),
         ("hot path", "`POST /api/tasks/sentiment/examples/` with the endpoint as the target")]


def block(document: dict) -> str:
    summaries, args = document["summaries"], document["args"]
    direct = summaries["direct"]
    load = ", ".join(f"{value:.2f}" for value in document["load_average"])
    lines = [f"{args['requests']} requests each, alternating in blocks of {args['block']}; the endpoint is the "
             f"tests' protocol-level OpenAI-compatible fake answering after {args['delay_ms']:g} ms, so what is "
             f"measured is what the platform adds. {document['endpoint_calls']:,} endpoint calls in all; load "
             f"average at the end {load}."]
    rows = []
    for name, what in ORDER:
        row = summaries[name]
        rows.append([what, f"{row['n']}", f"{row['p50_ms']:.2f}", f"{row['p95_ms']:.2f}",
                     f"{row['p50_ms'] / direct['p50_ms']:.1f}×", f"{row['p50_ms'] - direct['p50_ms']:+.2f}"])
    lines.append(markdown_table(["measure", "n", "median ms", "p95 ms", "median ÷ direct", "median ms over direct"],
                                rows))
    hot, client = summaries["hot path"], summaries["client"]
    lines.append(f"The client's median differs from the direct call's by "
                 f"{client['p50_ms'] - direct['p50_ms']:+.2f} ms; "
                 f"the hot path, which also checks the input, finds the target, takes the endpoint's slot and "
                 f"budget, counts its usage, signs and stores the example in one transaction, takes "
                 f"{hot['p50_ms'] / direct['p50_ms']:.1f}× the direct call's median "
                 f"({hot['p50_ms'] - direct['p50_ms']:+.2f} ms).")
    return "\n\n".join(lines) + "\n"
