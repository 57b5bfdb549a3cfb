"""``GET /api/me/``: the caller's own page as JSON (``crowd.me``), for a signed-in
session, an API token, or the session token of an MTurk assignment (``X-Dynabench-Token``).
Nobody reads anyone else's: the user is the caller, and no parameter names another; an
assignment the platform has not confirmed as the worker's reads its own work only."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from . import me


class PageSerializer(serializers.Serializer):
    page = serializers.IntegerField(source="number")
    has_next = serializers.BooleanField()
    has_previous = serializers.BooleanField()


class PagesSerializer(serializers.Serializer):
    examples = PageSerializer()
    validations = PageSerializer()
    assignments = PageSerializer()


class MyExampleRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.CharField()
    task_name = serializers.CharField()
    round = serializers.IntegerField()
    text = serializers.CharField(help_text="What you wrote (shortened).")
    status = serializers.ChoiceField(["pending", "verified", "rejected", "flagged", "retracted"])
    fooled_model = serializers.BooleanField(allow_null=True, help_text="Null: no model answered.")
    provisional = serializers.BooleanField(help_text="Written in an MTurk assignment MTurk has not confirmed yet.")
    votes_correct = serializers.IntegerField()
    votes_incorrect = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class MyValidationRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    example = serializers.IntegerField()
    task = serializers.CharField()
    task_name = serializers.CharField()
    decision = serializers.CharField(allow_null=True, help_text="correct, incorrect, flagged; null: not decided.")
    counted = serializers.BooleanField(help_text="Whether it counted towards the example's outcome.")
    not_counted_because = serializers.CharField(
        allow_null=True, help_text="new_account, untrusted, provisional, unverified, failed_gold, same_person "
                                   "or undecided; null when it counted.")
    explanation = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class MyAssignmentRowSerializer(serializers.Serializer):
    assignment_id = serializers.CharField()
    task = serializers.CharField()
    task_name = serializers.CharField()
    round = serializers.IntegerField()
    mode = serializers.CharField()
    sandbox = serializers.BooleanField()
    status = serializers.CharField()
    currency = serializers.ChoiceField(["USD", "GBP"], help_text="Of the amounts below: the batch's (MTurk: USD).")
    reward = serializers.DecimalField(max_digits=9, decimal_places=2, help_text="Base pay (in ``currency``).")
    reward_status = serializers.ChoiceField(["due", "paid", "rejected", "returned"])
    bonus_per_example = serializers.DecimalField(max_digits=9, decimal_places=2)
    bonus_due = serializers.DecimalField(max_digits=9, decimal_places=2,
                                         help_text="In the ledger, not paid yet (in ``currency``).")
    bonus_paid = serializers.DecimalField(max_digits=9, decimal_places=2, help_text="Paid (in ``currency``).")
    bonus_settled = serializers.BooleanField(help_text="Whether the bonus was worked out (the ledger has a row).")
    bonus_held = serializers.BooleanField(
        help_text="Not worked out yet because an example of it waits for a researcher's decision (flagged or "
                  "escalated): no deadline settles it meanwhile.")
    accepted_at = serializers.DateTimeField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    feedback = serializers.CharField(allow_blank=True)


class TaskStandingSerializer(serializers.Serializer):
    task = serializers.CharField()
    task_name = serializers.CharField()
    onboarding = serializers.BooleanField(
        allow_null=True,
        help_text="Whether you passed the task's onboarding; null: the task asks for none, or you are its researcher.")
    examples_decided = serializers.IntegerField()
    examples_verified = serializers.IntegerField()
    quality = serializers.FloatField(allow_null=True, help_text="Share of your decided examples verified.")
    quality_judged = serializers.BooleanField(help_text="Enough decided examples for quality blocks to apply.")
    votes_count = serializers.BooleanField()
    votes = serializers.CharField()
    blocked = serializers.BooleanField()
    blocked_because = serializers.CharField(allow_blank=True)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    mturk_worker = serializers.BooleanField()
    unconfirmed = serializers.BooleanField(
        help_text="Inside an assignment the platform has not confirmed as the worker's yet: the page is that "
                  "assignment's own work only, and it joins the worker's account once confirmed.")
    email_verified = serializers.BooleanField()
    examples = MyExampleRowSerializer(many=True, source="examples.rows", help_text="This page of them, newest first.")
    validations = MyValidationRowSerializer(many=True, source="validations.rows")
    assignments = MyAssignmentRowSerializer(many=True, source="assignments.rows")
    standing = TaskStandingSerializer(many=True)
    pages = PagesSerializer(source="*", help_text="Which page of each list this is, and whether more follow.")


def pages_from(params) -> dict:
    return {section: me.page_number(params.get(f"{section}_page"), section) for section in me.SECTIONS}


class Me(APIView):
    """Your own ``examples``, ``validations``, ``assignments`` (each with its ``reward``,
    ``bonus_due`` and ``bonus_paid``, from the ledger) and ``standing`` per task. The
    three lists are one page each, newest first, 20 to a page: ``examples_page``,
    ``validations_page`` and ``assignments_page`` choose the page, and ``pages`` says
    which it is and whether more follow."""

    permission_classes = [permissions.IsAuthenticated]
    token_scope = "task"  # an MTurk assignment's token reads its own worker's page

    @extend_schema(
        tags=["me"],
        parameters=[OpenApiParameter(f"{section}_page", {"type": "integer", "minimum": 1, "maximum": me.MAX_PAGE},
                                     required=False, description="The page of that list, from 1.")
                    for section in me.SECTIONS],
        responses={200: MeSerializer, 400: OpenApiResponse(description="A page that is not a whole number."),
                   401: OpenApiResponse(description="Not signed in."),
                   403: OpenApiResponse(description="Not signed in (a session token that does not work here).")})
    def get(self, request):
        return Response(MeSerializer(me.worker_page(request.user, pages_from(request.query_params))).data)
