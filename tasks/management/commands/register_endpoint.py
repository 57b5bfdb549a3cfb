"""``manage.py register_endpoint``: register a model behind an endpoint as a model
version of a task (``registry.endpoints.register_endpoint``) and print its id. It runs
with the operator's rights (prices included); ``--secret-env`` takes a key's name from
the server's key map (``ENDPOINT_SECRETS``), nothing else."""

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError, InvalidInput
from ml.endpoints import PROTOCOLS
from registry.endpoints import register_endpoint
from tasks.models import Task

OPTIONS = {"secret_env": "--secret-env", "url": "--url", "model": "--model", "protocol": "--protocol",
           "timeout_s": "--timeout", "max_concurrency": "--concurrency", "rate_limit_per_minute": "--rate-limit",
           "name": "--name", "price_per_call": "--price-per-call",
           "price_per_1k_prompt_tokens": "--price-per-1k-prompt-tokens",
           "price_per_1k_completion_tokens": "--price-per-1k-completion-tokens"}


class Command(BaseCommand):
    help = (
        "Register a model served behind an endpoint (an OpenAI-compatible chat completions server, or an Open "
        "Inference Protocol v2 server) as a model version of a task, and print the new version's id. Nothing "
        "is called yet: evaluate it (POST /api/models/ID/evaluate/) and make it a target as any model. "
        "Example: register_endpoint --task nli --name llama-3-8b --protocol openai --url http://localhost:8000 "
        "--model meta-llama/Meta-Llama-3-8B-Instruct --secret-env llama (a key of ENDPOINT_SECRETS, bound to that host)"
    )

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True, help="The task's slug.")
        parser.add_argument("--name", required=True, help="The model's name on the platform.")
        parser.add_argument("--protocol", required=True, choices=PROTOCOLS,
                            help="openai: chat completions; v2: the Open Inference Protocol.")
        parser.add_argument("--url", required=True, help="The endpoint's base URL.")
        parser.add_argument("--model", default="", help="The model's name at the endpoint (required for v2).")
        parser.add_argument("--secret-env", default="", metavar="KEY",
                            help="The name of a key of the server's key map (ENDPOINT_SECRETS), which says which "
                                 "environment variable holds it and the hosts it may be sent to; the key itself is "
                                 "never stored. Empty: no key.")
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds one request may take (10).")
        parser.add_argument("--concurrency", type=int, default=4, help="Requests in flight at once (4).")
        parser.add_argument("--rate-limit", type=int, help="Requests per minute (default: no limit).")
        parser.add_argument("--price-per-call", help="Price of one request.")
        parser.add_argument("--price-per-1k-prompt-tokens", help="Price of 1000 prompt tokens.")
        parser.add_argument("--price-per-1k-completion-tokens", help="Price of 1000 completion tokens.")
        parser.add_argument("--private", action="store_true", help="Hide it from the public leaderboard.")

    def handle(self, *args, **options):
        task = Task.objects.filter(slug=options["task"]).first()
        if task is None:
            raise CommandError(f"No task {options['task']!r}.")
        try:
            version = register_endpoint(
                task, name=options["name"], protocol=options["protocol"], url=options["url"],
                model=options["model"], secret_env=options["secret_env"], timeout_s=options["timeout"],
                max_concurrency=options["concurrency"], rate_limit_per_minute=options["rate_limit"],
                price_per_call=options["price_per_call"],
                price_per_1k_prompt_tokens=options["price_per_1k_prompt_tokens"],
                price_per_1k_completion_tokens=options["price_per_1k_completion_tokens"],
                is_public=not options["private"])
        except InvalidInput as exc:
            raise CommandError("; ".join(f"{OPTIONS.get(field, field)}: {' '.join(problems)}"
                                         for field, problems in exc.errors.items())) from None
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(str(version.pk))
