"""The public browser of a task's verified examples: closed rounds only, a page at a time.

What is public is what a release could hold (``public.shown``: verified, not flagged,
retracted or provisional, no gold item in use, and a test split only once a researcher
released it on purpose) in a *closed* round: nothing from an open round (still being
written and validated, and its examples would help the next writers fool the model)
and nothing unverified. Hidden tasks are their researchers' alone (the caller passes
a task the visitor may see).

Every page is one round's keyset walk, newest example first: ``WHERE round = r AND
status = verified [AND split = s] AND id < before ORDER BY id DESC LIMIT n + 1``, served
by the examples' (round, [split,] status, id) indexes, whatever the round's size;
never an OFFSET, never a count of the rows. A text search is bounded the same way: it
walks at most ``PUBLIC_EXAMPLES_SEARCH_WINDOW`` rows from where the page starts,
keeps those whose text holds the words (case-insensitive, in the writer's inputs and
the context), and says where to go on when the window ran out before the page filled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count
from django.urls import reverse

from annotation.gold import in_use_q
from annotation.models import Example
from core.errors import InvalidInput, NotFound
from core.pagination import MAX_KEY, whole_number
from registry.models import ModelVersion
from tasks.config import text_problem
from tasks.models import Round, Task

from ..models import Release
from .public import TEST, shown, test_split_public_rounds, withheld
from .rows import usable

MAX_QUERY = 200
SCAN_CHUNK = 500


@dataclass
class PublicRound:
    number: int
    usable: int


@dataclass
class BrowsePage:
    rounds: list[PublicRound]
    round: int | None = None
    split: str = ""
    query: str = ""
    rows: list[dict] = field(default_factory=list)
    next_before: int | None = None  # where the next page starts (an example id)
    scanned: int = 0  # a search: rows read for this page
    window_ran_out: bool = False  # a search: the window ended before the page filled
    test_withheld: bool = False  # the round's test split asked for, and not public


def public_rounds(task: Task) -> list[PublicRound]:
    """The task's closed rounds and their public examples: the round counters' usable
    ones (no row read), less a test split not released on purpose and the gold items in
    use (one count over the task's few gold items)."""
    rows = (Round.objects.filter(task=task, status=Round.Status.CLOSED).order_by("number")
            .values_list("number", "counts__usable_train", "counts__usable_dev", "counts__usable_test"))
    public_test = test_split_public_rounds(task)
    gold = {(number, split): n for number, split, n in (
        usable(Example.objects.filter(in_use_q(), task=task, round__status=Round.Status.CLOSED))
        .order_by().values_list("round__number", "split").annotate(n=Count("pk")))}
    found = []
    for number, train, dev, test in rows:
        splits = {"train": train or 0, "dev": dev or 0}
        if number in public_test:
            splits[TEST] = test or 0
        found.append(PublicRound(number, sum(max(n - gold.get((number, split), 0), 0)
                                             for split, n in splits.items())))
    return found


def _parse(round_number, split, query, before):
    if round_number not in (None, ""):
        number = whole_number(str(round_number), 100_000) if str(round_number) != "0" else 0
        if number is None:
            raise InvalidInput.field("round", "Must be a round number.")
        round_number = number
    else:
        round_number = None
    split = split or ""
    if split and split not in Example.Split.values:
        raise InvalidInput.field("split", f"Must be one of {', '.join(Example.Split.values)}.")
    query = " ".join((query or "").split())
    if query:
        problem = text_problem(query, MAX_QUERY, required=True)
        if problem:
            raise InvalidInput.field("q", problem)
    if before not in (None, ""):
        before = whole_number(str(before), MAX_KEY)
        if before is None:
            raise InvalidInput.field("before", "Not a position this list gave: follow its links as they are.")
    else:
        before = None
    return round_number, split, query, before


def _matches(example: Example, words: list[str]) -> bool:
    texts = [v for v in (example.inputs or {}).values() if isinstance(v, str)]
    if example.context_id:
        texts += [v for v in example.context.fields.values() if isinstance(v, str)]
    haystack = " ".join(texts).casefold()
    return all(word in haystack for word in words)


def browse(task: Task, *, round_number=None, split=None, query=None, before=None, page_size: int | None = None,
           window: int | None = None) -> BrowsePage:
    """A page of ``task``'s public examples. ``round_number`` (default: the newest closed
    round with public examples) must be a closed round; ``split`` narrows; ``query``
    searches; ``before`` is where the page starts (from the last page's ``next_before``)."""
    page_size = page_size or settings.PUBLIC_EXAMPLES_PAGE
    window = window or settings.PUBLIC_EXAMPLES_SEARCH_WINDOW
    round_number, split, query, before = _parse(round_number, split, query, before)
    rounds = public_rounds(task)
    page = BrowsePage(rounds=rounds, split=split, query=query)
    if round_number is None:
        with_rows = [r for r in rounds if r.usable]
        chosen = (with_rows or rounds)[-1].number if rounds else None
    elif round_number in {r.number for r in rounds}:
        chosen = round_number
    else:
        raise NotFound(f"Task {task.slug} has no closed round {round_number}: only the verified examples of "
                       "closed rounds are public.")
    page.round = chosen
    if chosen is None:
        return page
    round_id = Round.objects.filter(task=task, number=chosen).values_list("pk", flat=True).get()
    test_public = chosen in test_split_public_rounds(task)
    if split == TEST and not test_public:
        page.test_withheld = True
        return page
    base = shown(Example.objects.filter(round_id=round_id), test_split_public=test_public)
    if split:
        base = base.filter(split=split)
    base = base.select_related("context")
    if not query:
        examples = list((base.filter(pk__lt=before) if before else base).order_by("-pk")[:page_size + 1])
        if len(examples) > page_size:
            examples = examples[:page_size]
            page.next_before = examples[-1].pk
    else:
        words = query.casefold().split()
        examples, last = [], before
        while page.scanned < window:
            take = min(SCAN_CHUNK, window - page.scanned)
            chunk = list((base.filter(pk__lt=last) if last else base).order_by("-pk")[:take])
            page.scanned += len(chunk)
            for example in chunk:
                if _matches(example, words):
                    examples.append(example)
                    if len(examples) == page_size:
                        break
            if len(examples) == page_size:
                page.next_before = examples[-1].pk
                break
            if len(chunk) < take:  # the round's end
                break
            last = chunk[-1].pk
        else:
            page.window_ran_out = True
            page.next_before = last
    page.rows = rows_for(task, examples)
    return page


def rows_for(task: Task, examples: list[Example]) -> list[dict]:
    """What the page shows of each example: the context, what was written, the writer's
    answer, the model's answer and whether it fooled the model (one query for the names
    of the models that answered)."""
    config = task.parsed_config
    kind = config.kind
    ids = {int(k) for e in examples for k in (e.model_predictions or {}) if str(k).isdigit()}
    names = dict(ModelVersion.objects.filter(task=task, pk__in=ids).values_list("pk", "name")) if ids else {}
    rows = []
    for e in examples:
        context = e.context.fields if e.context_id else {}
        prediction = e.prediction if isinstance(e.prediction, dict) else {}
        rows.append({
            "uid": str(e.uid), "split": e.split, "source": e.source,
            "context": [(f.get("label") or f["name"], context.get(f["name"], "")) for f in config.context_fields],
            "inputs": [(f.get("label") or f["name"], e.inputs.get(f["name"], "")) for f in config.input_fields],
            "answer": kind.shown_answer(e.target),
            "model_answer": prediction.get("label", prediction.get("answer", prediction.get("text"))),
            "fooled": e.fooled,
            "models": [names.get(int(k), f"model #{k}") for k in sorted(e.model_predictions or {}, key=str)
                       if str(k).isdigit()],
        })
    return rows


def releases_with_downloads(task: Task, limit: int = 10) -> list:
    """The task's newest releases, with their files' download addresses."""
    found = list(Release.objects.filter(task=task).order_by("-version")[:limit])
    for release in found:
        release.downloads = [(name, entry, reverse("release-file", args=[task.slug, release.version, name]))
                             for name, entry in release.files.items() if not withheld(release, name)]
    return found
