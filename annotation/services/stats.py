"""Round statistics, always counted from the examples themselves.

There is one source for the platform's headline number, the verified model error
rate (verified model-fooling examples / examples collected): these counts. No
counter is kept beside them to drift. Collected means written on the platform
(``source="annotation"``) and not retracted; imported data is not collected, and
neither is what an MTurk assignment wrote before MTurk confirmed it (a provisional
session: a worker id typed into a URL moves no public number).
"""

from __future__ import annotations

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from tasks.models import Round

from ..exporting import anonymise
from ..models import Example, Validation

VERIFIED = Example.ValidationStatus.VERIFIED


def rate(num: int, den: int) -> float | None:
    return num / den if den else None


def with_counts(rounds: QuerySet) -> QuerySet:
    """``rounds`` annotated with ``n_collected``, ``n_fooled``, ``n_verified``,
    ``n_verified_fooled`` and ``n_validations`` (decisions on collected examples): one query."""
    collected = (Q(examples__source=Example.Source.ANNOTATION, examples__retracted=False)
                 & ~Q(examples__session__provisional=True))
    decided = (Validation.objects.filter(example__round=OuterRef("pk"), example__source=Example.Source.ANNOTATION,
                                         example__retracted=False)
               .exclude(example__session__provisional=True).exclude(label="")
               .order_by().values("example__round").annotate(n=Count("pk")).values("n"))
    return rounds.annotate(
        n_collected=Count("examples", filter=collected),
        n_fooled=Count("examples", filter=collected & Q(examples__fooled=True)),
        n_verified=Count("examples", filter=collected & Q(examples__validation_status=VERIFIED)),
        n_verified_fooled=Count("examples", filter=collected & Q(examples__fooled=True,
                                                                  examples__validation_status=VERIFIED)),
        n_validations=Coalesce(Subquery(decided, output_field=IntegerField()), Value(0)),
    )


def summary(rnd: Round) -> dict:
    """The counts and rates of a round annotated by ``with_counts``."""
    return {
        "collected": rnd.n_collected,
        "fooled": rnd.n_fooled,
        "verified": rnd.n_verified,
        "verified_fooled": rnd.n_verified_fooled,
        "validations": rnd.n_validations,
        "model_error_rate": rate(rnd.n_fooled, rnd.n_collected),
        "verified_model_error_rate": rate(rnd.n_verified_fooled, rnd.n_collected),
    }


def round_stats(rnd: Round, *, identify: bool = False) -> dict:
    """A round's counts and rates, per annotator too, and how often blind validators
    agreed with the writers' answers. ``identify`` (researchers' pages only) adds
    each annotator's username next to the pseudonym."""
    counted = with_counts(Round.objects.filter(pk=rnd.pk)).get()
    base = (Example.objects.filter(round=rnd, retracted=False, source=Example.Source.ANNOTATION)
            .exclude(session__provisional=True))
    verified_fooled = Q(fooled=True, validation_status=VERIFIED)
    per_annotator = list(
        base.values("annotator_id")
        .annotate(n_collected=Count("pk"), n_fooled=Count("pk", filter=Q(fooled=True)),
                  n_verified_fooled=Count("pk", filter=verified_fooled))
        .order_by("-n_verified_fooled", "-n_fooled", "annotator_id")
    )
    blind = Validation.objects.filter(example__in=base, blind_answer__isnull=False)
    blind_total = blind.aggregate(n=Count("pk"), agree=Count("pk", filter=Q(blind_agrees=True)))
    blind_by_writer = {
        row["example__annotator_id"]: row for row in
        blind.values("example__annotator_id").annotate(n=Count("pk"), agree=Count("pk", filter=Q(blind_agrees=True)))
        .order_by()
    }
    target_models = list(rnd.target_models.order_by("pk").values_list("name", flat=True))
    usernames = {}
    if identify:
        from django.contrib.auth import get_user_model

        ids = [row["annotator_id"] for row in per_annotator]
        usernames = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))

    def annotator_row(row):
        blind_row = blind_by_writer.get(row["annotator_id"], {"n": 0, "agree": 0})
        return {
            "annotator": anonymise(row["annotator_id"]), "collected": row["n_collected"],
            "fooled": row["n_fooled"], "verified_fooled": row["n_verified_fooled"],
            "model_error_rate": rate(row["n_fooled"], row["n_collected"]),
            "verified_model_error_rate": rate(row["n_verified_fooled"], row["n_collected"]),
            "blind_answers": blind_row["n"], "blind_agreement": rate(blind_row["agree"], blind_row["n"]),
            **({"username": usernames.get(row["annotator_id"], "")} if identify else {}),
        }

    return {
        "task": rnd.task.slug,
        "round": rnd.number,
        "status": rnd.status,
        **summary(counted),
        "blind_answers": blind_total["n"],
        "blind_agreement": rate(blind_total["agree"], blind_total["n"]),
        "target_models": target_models,
        "annotators": [annotator_row(row) for row in per_annotator],
    }
