"""Pages: a task's public page, and the annotation pages (write, validate).

The annotation pages' script authenticates API calls with the signed session
token in a header, so no third-party cookie is needed: the MTurk HIT page
(``crowd.views``) renders these same templates inside MTurk's frame, and only it
may be framed (``frameable_by_mturk``); these pages keep ``X-Frame-Options:
DENY``. A page may be opened with ``?token=...`` instead of a sign-in.
A signed-in user's page reuses their session from the same sign-in; the pages
are never cached (they carry a token).
"""

import functools

from csp.constants import SELF
from csp.decorators import csp_replace
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db.models import Exists, OuterRef, Prefetch
from django.http import Http404
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.clickjacking import xframe_options_exempt

from core.ratelimit import client_ip
from tasks.charts import error_rate_chart
from tasks.models import Round, Task
from tasks.roles import is_researcher

from . import examples, onboarding, serving, sessions, stats, trust
from .serializers import ValidationItemSerializer
from .tokens import InvalidToken, make_token, session_from_token
from .trust import record_address


def frameable_by_mturk(**directives):
    """Let the MTurk worker sites (``MTURK_FRAME_ANCESTORS``, read per request) frame
    the page; ``directives`` replace further CSP directives of that page."""

    def decorator(view):
        @functools.wraps(view)
        def wrapped(request, *args, **kwargs):
            policy = {"frame-ancestors": [SELF, *settings.MTURK_FRAME_ANCESTORS], **directives}
            return csp_replace(policy)(view)(request, *args, **kwargs)

        return xframe_options_exempt(wrapped)

    return decorator




def home(request):
    """The public tasks, each with its open round's counts (collected, fooled, verified),
    or, while the round has no target model (nothing can be written), that it waits for one."""
    has_target = Exists(Round.target_models.through.objects.filter(round=OuterRef("pk")))
    open_rounds = (stats.with_counts(Round.objects.filter(status=Round.Status.OPEN).order_by("number"))
                   .annotate(has_target=has_target))
    tasks = (Task.objects.public().prefetch_related(Prefetch("rounds", queryset=open_rounds, to_attr="open_rounds"))
             .order_by("name"))
    return render(request, "tasks/home.html", {"tasks": tasks})


def task_page_context(request, slug) -> dict:
    """What a task's public page shows: its rounds, their targets and counts, the chart."""
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    rounds = list(stats.with_counts(Round.objects.filter(task=task)).prefetch_related("target_models")
                  .order_by("number"))
    for r in rounds:
        r.stats = stats.summary(r)
        r.target_names = [m.name for m in r.target_models.all()]
    open_round = next((r for r in rounds if r.status == Round.Status.OPEN), None)
    chart = error_rate_chart([(r.number, r.stats["model_error_rate"], r.stats["verified_model_error_rate"])
                              for r in rounds])
    return {
        "task": task, "rounds": rounds, "open_round": open_round, "config": task.parsed_config,
        "chart": mark_safe(chart),  # built from numbers only, see tasks/charts.py
        # A fresh demo's seed models train for minutes: say so rather than show a bare dash.
        "waiting_for_target": (examples.waiting_for_target(task)
                               if open_round is not None and not open_round.target_names else ""),
    }


def task_detail(request, slug):
    """A task's public page: its rounds, their counts and the error-rate chart."""
    return render(request, "annotation/task_detail.html", task_page_context(request, slug))


def _refuse(request, message, task=None, status=403):
    return render(request, "annotation/error.html", {"message": message, "task": task}, status=status)


def _page(request, slug, work):
    """(task, session, None) when the caller may do ``work`` on the task; else (None, None, response)."""
    token = request.GET.get("token")
    if token:
        try:
            session = session_from_token(token)
        except InvalidToken as exc:
            return None, None, _refuse(request, exc.message)
        problem = sessions.mode_problem(session, work)
        if problem:
            return None, None, _refuse(request, problem)
        task = session.task
        if task.slug != slug:
            return None, None, _refuse(request, "This link's token is for another task.")
        if not (task.is_public or is_researcher(session.user, task)):
            return None, None, _refuse(request, "This task is not open to this session.", status=404)
        return task, session, None
    if not request.user.is_authenticated:
        return None, None, redirect_to_login(request.get_full_path())
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise Http404(f"No task {slug!r}.")
    session = sessions.session_for_page(request.user, task, sessions.login_key(request.session.session_key))
    return task, session, None


def _page_context(request, task, session):
    foreign = request.user.is_authenticated and request.user.pk != session.user_id
    return {
        "task": task, "config": task.parsed_config, "session": session, "token": make_token(session),
        "round": task.open_round(),
        # A signed-in user who opened someone else's link sees whose session this is.
        "session_owner": session.user.get_username() if foreign else None,
    }


def onboarding_context(task, user) -> dict | None:
    """What a work page shows instead of the work while ``user`` has not passed the
    task's onboarding (``services.onboarding``): the quiz, or why the work is closed."""
    state = onboarding.standing(task, user)
    if state.open:
        return None
    config = task.parsed_config.onboarding
    return {"standing": state, "items": onboarding.shown_items(task, user),
            "introduction": config.get("introduction", ""),
            "blocked_message": onboarding.blocked_message(task) if state.blocked else ""}


def work_page_context(request, task, session, work) -> dict:
    """What the write ("create") or validate page shows for ``session``: the onboarding
    first, while the worker has not passed it ("onboarding": an onboarding-only HIT)."""
    context = _page_context(request, task, session)
    record_address(session.user, client_ip(request))  # an MTurk worker's too: accounts at one address are one person
    context["onboarding"] = onboarding_context(task, session.user)
    if work == "onboarding" or context["onboarding"]:
        context["passed_onboarding"] = onboarding.standing(task, session.user).passed
        return context
    if work == "create":
        context["closed"] = context["round"] is None
        if not context["closed"] and not context["round"].target_models.exists():
            context["waiting_for_target"] = examples.waiting_for_target(task)
    else:
        example = serving.next_for(task, session.user)
        context["item"] = ValidationItemSerializer(example, context={"user": session.user}).data if example else None
        # Said before the first vote: a new account's decisions wait (the trust rule's own setting).
        context["votes_count_from"] = trust.votes_count_from(task, session.user, session)
        context["min_account_age"] = trust.min_account_age_text()
        # ... and an unconfirmed e-mail address's never count (the same rule's order: not a researcher's).
        context["email_unconfirmed"] = (not is_researcher(session.user, task) and not session.mturk_assignment_id
                                        and trust.email_unverified(session.user))
    return context


WORK_TEMPLATES = {"create": "annotation/create.html", "validate": "annotation/validate.html"}


@never_cache
def create_page(request, slug):
    task, session, response = _page(request, slug, "create")
    if response:
        return response
    return render(request, WORK_TEMPLATES["create"], work_page_context(request, task, session, "create"))


@never_cache
def validate_page(request, slug):
    task, session, response = _page(request, slug, "validate")
    if response:
        return response
    return render(request, WORK_TEMPLATES["validate"], work_page_context(request, task, session, "validate"))
