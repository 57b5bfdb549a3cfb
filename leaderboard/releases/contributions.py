"""What apps above the leaderboard add to a release's data card.

The crowd app sits above this one (crowd > leaderboard), so the card cannot read its
records by importing it. Instead an app registers a *section*: a function of the task
and the released rounds that returns ``CardSection`` (or None when it has nothing to
say about them), called while the release is made. The crowd app registers how its
workers were recruited and paid (``crowd.releases``) when Django starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CardSection:
    """A part of the data card: a heading, its paragraphs (Markdown, the app's own text
    and numbers; user text must come escaped) and facts for the release's record."""

    key: str
    heading: str
    paragraphs: list[str]
    facts: dict = field(default_factory=dict)


_sections: dict[str, Callable] = {}


def register_card_section(key: str, section: Callable) -> None:
    """Add ``section(task, rounds) -> CardSection | None`` to every release's card, under
    ``key`` (registering a key again replaces it: Django may run ``ready`` twice)."""
    _sections[key] = section


def card_sections(task, rounds) -> list[CardSection]:
    """The registered sections for ``task``'s ``rounds`` (Round rows), in key order."""
    found = []
    for key in sorted(_sections):
        section = _sections[key](task, rounds)
        if section is not None:
            found.append(section)
    return found
