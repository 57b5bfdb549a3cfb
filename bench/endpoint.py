"""The hot path with a model behind an endpoint as the target, against calling the
endpoint directly, in the same run.

    .venv/bin/python bench/endpoint.py [--requests 200] [--block 10] [--delay-ms 0] [--out PATH]

Django runs in this process on a scratch SQLite database (embedded mode, under
var/bench/endpoint/). The endpoint is the protocol-level OpenAI-compatible fake the
tests use (``tests/fake_openai.py``), a real HTTP server on a local port whose answer
takes ``--delay-ms`` (0: as fast as it can): what is measured is what the platform
adds, not a model. The demo sentiment task gets the endpoint registered as its open
round's target (``registry.endpoints.register_endpoint``), and an annotator writes
examples through ``POST /api/tasks/sentiment/examples/`` (Django's test client, in
this process: validation, the target's lookup, the endpoint's slot, rate and budget
checks, the call, usage counting, the example's signature and its transaction), with
the per-account throttles lifted (one writer sends every request).

Measured, alternating in blocks of ``--block`` so drifting load hits both:

* direct:    the same chat request body POSTed to the endpoint with ``requests``;
* client:    ``ml.endpoints.predict`` (prompt, retries, strict parsing), no Django;
* hot path:  the API call that stores an example.

Prints a table with each one's median, p95 and its overhead over the direct call,
and writes bench/results/endpoint.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import time

from benchlib import RESULTS, ROOT
from benchlib.results import fixed_table, log, utc_now, write_json
from benchlib.stats import summary_ms

COLUMNS = [("measure", "<10"), ("n", ">5"), ("median ms", ">10.2f"), ("p95 ms", ">9.2f"),
           ("+ms over direct", ">16.2f")]
TEXTS = ["a gripping, beautifully acted story", "the plot is a mess and the jokes fall flat",
         "one of the warmest films of the year", "tedious, overlong and oddly joyless"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="Requests of each kind (200).")
    parser.add_argument("--block", type=int, default=10, help="Requests of one kind in a row (10).")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="The endpoint's own answer time (0).")
    parser.add_argument("--folder", default=str(ROOT / "var" / "bench" / "endpoint"),
                        help="The scratch folder (its SQLite file): on a tmpfs, commits cost no fsync.")
    parser.add_argument("--out", default=str(RESULTS / "endpoint.json"))
    args = parser.parse_args(argv)

    from pathlib import Path

    folder = Path(args.folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    from benchlib.djangoside import setup_scratch

    # One writer sends every request: the per-account throttles (60 examples a minute)
    # would measure the throttle, not the path.
    os.environ["THROTTLE_EXAMPLES"] = os.environ["THROTTLE_USER"] = "1000000/min"
    os.environ["ENDPOINT_ALLOWED_HOSTS"] = "127.0.0.1"  # the fake endpoint's address, allowed by name
    setup_scratch(folder)
    import io

    import requests
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    import ml
    from ml import endpoints as remote
    from ml.endpoints import openai_chat
    from registry.endpoints import register_endpoint
    from tasks.models import Task
    from tests.fake_openai import FakeOpenAI

    call_command("bootstrap_demo", no_models=True, stdout=io.StringIO())
    task = Task.objects.get(slug="sentiment")

    def answer(text):
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)
        return "negative" if "mess" in text or "tedious" in text else "positive"

    timings: dict[str, list[float]] = {"direct": [], "client": [], "hot path": []}
    with FakeOpenAI(answer=answer) as fake:
        model = register_endpoint(task, name="bench-endpoint", protocol="openai", url=fake.url, model="fake-chat",
                                  max_concurrency=8)
        task.open_round().target_models.add(model)
        user = get_user_model().objects.create_user("bench-annotator", password="x" * 20)
        client = Client()
        client.force_login(user)
        spec = ml.TaskSpec.from_dict(task.parsed_config.ml_spec_dict())
        endpoint = remote.Endpoint(protocol="openai", url=fake.url, model="fake-chat",
                                   network=remote.NetworkPolicy(allowed_hosts=("127.0.0.1",)),
                                   label_descriptions={label["name"]: label.get("description", "")
                                                       for label in task.parsed_config.labels})
        session = requests.Session()

        def direct(i):
            body = openai_chat.request_body(spec, {"statement": TEXTS[i % len(TEXTS)]}, model="fake-chat",
                                            template=None, descriptions=endpoint.label_descriptions)
            response = session.post(fake.url + "/v1/chat/completions", json=body, timeout=10)
            response.raise_for_status()
            response.json()

        def through_client(i):
            remote.predict(endpoint, spec, [{"statement": TEXTS[i % len(TEXTS)]}], budget=10)

        def hot_path(i):
            context = client.get("/api/tasks/sentiment/contexts/next/").json()
            started = time.perf_counter()
            response = client.post("/api/tasks/sentiment/examples/", {
                "context": context["id"], "inputs": {"statement": f"{TEXTS[i % len(TEXTS)]} ({i})"},
                "target": {"label": "positive"}}, content_type="application/json")
            elapsed = time.perf_counter() - started
            if response.status_code != 201:
                raise SystemExit(f"the hot path answered {response.status_code}: {response.content[:300]!r}")
            return elapsed

        for warm in range(3):  # connections, imports, the first queries
            direct(warm), through_client(warm), hot_path(warm)
        done = 0
        while done < args.requests:
            block = min(args.block, args.requests - done)
            for name, run in (("direct", direct), ("client", through_client), ("hot path", hot_path)):
                for i in range(done, done + block):
                    started = time.perf_counter()
                    measured = run(i)
                    timings[name].append(measured if measured is not None else time.perf_counter() - started)
            done += block
            log(f"{done}/{args.requests}")
        calls = len(fake.requests)

    summaries = {name: summary_ms(values) for name, values in timings.items()}
    base = summaries["direct"]["p50_ms"]
    rows = [[name, s["n"], s["p50_ms"], s["p95_ms"], s["p50_ms"] - base] for name, s in summaries.items()]
    print(fixed_table(COLUMNS, rows))
    document = {"benchmark": "endpoint", "created": utc_now(), "machine": platform.machine(),
                "load_average": list(os.getloadavg()), "args": vars(args), "endpoint_calls": calls,
                "summaries": summaries,
                "overhead_ms": {name: round(s["p50_ms"] - base, 2) for name, s in summaries.items()}}
    log(f"wrote {write_json(args.out, document)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
