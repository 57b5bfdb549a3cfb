"""The demo a new user gets from ``make run``: idempotent, safe to rerun."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from tasks import services

from .services import ensure_demo_models

DEMO_ADMIN_USERNAME = "admin"


@dataclass
class DemoReport:
    tasks_created: list[str] = field(default_factory=list)
    rounds_created: list[str] = field(default_factory=list)
    contexts_created: dict[str, int] = field(default_factory=dict)
    models_trained: list[str] = field(default_factory=list)
    admin_password: str | None = None  # set only when the admin was created now

    @property
    def created_anything(self) -> bool:
        return bool(self.tasks_created or self.rounds_created or any(self.contexts_created.values())
                    or self.models_trained or self.admin_password)


def ensure_admin(report: DemoReport) -> None:
    User = get_user_model()
    if User.objects.filter(username=DEMO_ADMIN_USERNAME).exists():
        return
    password = os.environ.get("DJANGO_SUPERUSER_PASSWORD") or secrets.token_urlsafe(12)
    User.objects.create_superuser(DEMO_ADMIN_USERNAME, email="", password=password)
    report.admin_password = password if not os.environ.get("DJANGO_SUPERUSER_PASSWORD") else "(from DJANGO_SUPERUSER_PASSWORD)"


def bootstrap_demo(*, slugs=None, with_models: bool = True, progress=None,
                   train_options: dict | None = None) -> DemoReport:
    report = DemoReport()
    with transaction.atomic():
        ensure_admin(report)
        for slug in slugs or services.DEFAULT_TASK_SLUGS:
            task, created = services.create_task(services.load_definition(slug))
            if created:
                report.tasks_created.append(slug)
            _round, round_created = services.ensure_first_round(task)
            if round_created:
                report.rounds_created.append(f"{slug} round 1")
            created_contexts, _ = services.add_contexts(task, services.read_seed_contexts(slug))
            report.contexts_created[slug] = created_contexts
    if with_models:
        report.models_trained = ensure_demo_models(
            slugs or services.DEFAULT_TASK_SLUGS, progress=progress, **(train_options or {}))
    return report
