"""Celery beat tasks of the crowd (see ``CELERY_BEAT_SCHEDULE``): thin wrappers
around services that are safe to run at any time, any number of times."""

from celery import shared_task

from core import celery_names


@shared_task(name=celery_names.CROWD_SYNC)
def sync() -> str:
    from .sync import sync as run

    return str(run())


@shared_task(name=celery_names.PAY_BONUSES)
def pay_bonuses() -> str:
    from .bonuses import pay_bonuses as run

    return str(run())
