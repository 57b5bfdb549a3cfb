"""What the public may see of a task's examples: the browser and releases read only this.

- **Usable** examples of closed rounds (``rows.usable``: verified, not flagged,
  retracted or provisional).
- **No gold item in use** (``annotation.gold``): its verdict is the answer key that
  validators are checked against. A researcher retires a gold item to make it public;
  once retired it is never served as one again, and an example that may have been
  public already never becomes one (``gold.may_have_been_public``).
- **No test split unless released on purpose.** A round's test split (round 0's
  static test data, each round's own) is the leaderboard's test data: it stays out of
  the browser, and a release holds it only when its researcher asks for it explicitly
  (``release_test_split``, recorded on the ``Release``). From then on that round's test
  split is public, in the browser too. A release made before this rule, whose test split
  nobody released on purpose, keeps its other files public and withholds that one
  (``withheld``).
"""

from __future__ import annotations

from annotation.gold import not_in_use
from annotation.models import Example
from tasks.models import Task

from ..models import Release
from .rows import usable

TEST = Example.Split.TEST
TEST_FILE = f"data/{TEST}.parquet"


def test_split_public_rounds(task: Task) -> set[int]:
    """The round numbers whose test split a researcher of ``task`` released on purpose
    (one query over the task's releases, a handful of rows)."""
    public = set()
    for rounds, splits in Release.objects.filter(task=task, test_split_released=True).values_list("rounds",
                                                                                                   "splits"):
        if TEST in splits:
            public.update(rounds)
    return public


def shown(queryset, *, test_split_public: bool):
    """``queryset`` (one round's examples) as the public may see it: usable, no gold
    item in use, and the test split only where it was released on purpose."""
    queryset = not_in_use(usable(queryset))
    return queryset if test_split_public else queryset.exclude(split=TEST)


def withheld(release: Release, path: str) -> bool:
    """Whether ``path`` of ``release`` is kept from the public: the test split of a
    release whose researcher did not release it on purpose."""
    return path == TEST_FILE and not release.test_split_released
