"""Model versions: training, registration and evaluation (see issue 3)."""

from __future__ import annotations


def ensure_demo_models(slugs, progress=None) -> list[str]:
    """Train and register a round-0 target model for each task that lacks one."""
    return []
