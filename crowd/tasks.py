"""Celery beat tasks of the crowd (see ``CELERY_BEAT_SCHEDULE``): thin wrappers
around services that are safe to run at any time, any number of times."""

from celery import shared_task

from core import celery_names

from . import bonuses
from . import sync as syncing


@shared_task(name=celery_names.CROWD_SYNC)
def sync() -> str:
    return str(syncing.sync())


@shared_task(name=celery_names.PAY_BONUSES)
def pay_bonuses() -> str:
    return str(bonuses.pay_bonuses())
