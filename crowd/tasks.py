"""Celery beat tasks of the crowd (see ``CELERY_BEAT_SCHEDULE``): thin wrappers
around services that are safe to run at any time, any number of times."""

from celery import shared_task

from core import celery_names

from . import bonuses, onboarding
from . import sync as syncing


@shared_task(name=celery_names.CROWD_SYNC)
def sync() -> str:
    """The batches' sync, then the onboarding's qualifications given again where a call failed."""
    return f"{syncing.sync()}; {onboarding.resync()}"


@shared_task(name=celery_names.PAY_BONUSES)
def pay_bonuses() -> str:
    return str(bonuses.pay_bonuses())
