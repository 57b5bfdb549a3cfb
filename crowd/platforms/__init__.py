"""The crowd platforms behind one interface (``crowd.platform.Platform``): pick one
by a batch's ``platform`` (``for_batch``) or by name (``by_name``)."""

from __future__ import annotations

from ..platform import Listed, Platform, PlatformError
from .mturk import MTurkPlatform
from .prolific import ProlificPlatform

__all__ = ["PLATFORMS", "Listed", "Platform", "PlatformError", "by_name", "for_batch", "for_identity"]

PLATFORMS: dict[str, Platform] = {platform.name: platform for platform in (MTurkPlatform(), ProlificPlatform())}


def by_name(name: str) -> Platform:
    try:
        return PLATFORMS[name]
    except KeyError:
        raise ValueError(f"No crowd platform {name!r}; there are {sorted(PLATFORMS)}.") from None


def for_batch(batch) -> Platform:
    return by_name(batch.platform)


def for_identity(identity) -> Platform:
    return by_name(identity.platform)
