"""The admin's building blocks for large, task-scoped lists.

``LargeListAdmin`` keeps a list page's cost fixed however many rows the table
holds (no full count past a cap, filter choices from small tables, exact and
full-text search); ``TaskScopedAdmin`` shows a researcher who is not a
superuser only the rows of the tasks they own. Every app's admin builds on these.
"""

from urllib.parse import parse_qsl, urlencode

from django.contrib import admin, messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Q
from django.template.response import TemplateResponse
from django.utils.functional import cached_property
from django.utils.text import smart_split, unescape_string_literal
from django.utils.translation import gettext as _

from core.errors import DomainError
from registry.models import ModelVersion

from .models import Context, Round, Task


class Extensible:
    """An admin that higher apps extend without registering it again: ``extend(actions=...,
    panels=...)`` adds actions to its list and read-only panels (callables with a
    ``short_description``) to each object's page. The leaderboard adds its training,
    evaluation and promotion actions to the task and model pages this way. Only the
    class that was extended shows them, not its subclasses."""

    @classmethod
    def extend(cls, *, actions=(), panels=()) -> None:
        own = cls.__dict__.get("extensions") or {"actions": [], "panels": []}
        own["actions"].extend(actions)
        for panel in panels:  # a read-only field is named after an attribute of the admin
            setattr(cls, panel.__name__, staticmethod(panel))
            own["panels"].append(panel.__name__)
        cls.extensions = own

    def _extensions(self, kind: str) -> list:
        return list((type(self).__dict__.get("extensions") or {}).get(kind, ()))

    def get_actions(self, request):
        actions = super().get_actions(request)
        for func in self._extensions("actions"):
            action = self.get_action(func)
            if action is not None:
                actions[action[1]] = action
        return actions

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), *self._extensions("panels")]


class BoundedPaginator(Paginator):
    """Counts at most ``limit`` rows: ``count`` reads ``limit + 1`` rows at most (a
    COUNT over a sliced query), and a list with more says so (``capped``) and offers
    only the pages within the bound. Rows beyond it are reached by filters, the
    search or the export, not by paging: a deep page would walk every row it skips."""

    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True, *, limit: int):
        super().__init__(object_list, per_page, orphans, allow_empty_first_page)
        self.limit = limit
        self.capped = False

    @cached_property
    def count(self) -> int:
        # Ids only: the annotations a list shows (per-row subqueries) are left out of the count.
        counted = self.object_list.order_by().values("pk")[: self.limit + 1].count()
        self.capped = counted > self.limit
        return min(counted, self.limit)


def _search_terms(search_term: str, most: int) -> list[str]:
    """The words of a search, as the admin splits them (quoted phrases stay whole)."""
    terms = []
    for bit in smart_split(search_term):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1]:
            bit = unescape_string_literal(bit)
        if bit and bit not in terms:
            terms.append(bit)
    return terms[:most]


def exact_search(model, paths, terms) -> Q | None:
    """Rows of ``model`` where a field named by ``paths`` (a field, or a relation then a
    field of the related model, e.g. ``annotator__username``) equals one of ``terms``;
    None when nothing can match. A term that is no valid value of a field (text for a
    UUID) is left out for that field. A relation is read first (one query, on the
    related model's index) and compared by id, so that every alternative is a plain
    column test on ``model`` and the databases combine their indexes."""
    alternatives = []
    for lookup in paths:
        name, _, rest = lookup.partition("__")
        target = _last_field(model, lookup)  # its type decides which terms are valid values
        values = []
        for term in terms:
            try:
                values.append(target.to_python(term))
            except ValidationError:
                continue
        if not values:
            continue
        if rest:
            related = model._meta.get_field(name).related_model
            ids = list(related._default_manager.filter(**{f"{rest}__in": values}).values_list("pk", flat=True))
            if ids:
                alternatives.append(Q(**{f"{name}__in": ids}))
        else:
            alternatives.append(Q(**{f"{name}__in": values}))
    return Q.create(alternatives, connector=Q.OR) if alternatives else None


def _last_field(model, path: str):
    for name in path.split("__"):
        field = model._meta.get_field(name)
        model = field.related_model or model
    return field


class FilterRefused(Exception):
    """A list's filter names a row that the user cannot filter by (another researcher's
    task, a round of another task, an id that is no id): the list answers 400 with this
    message instead of the admin's silent redirect or its 400 debug page."""


class LargeListAdmin(admin.ModelAdmin):
    """A list that costs the same at a million rows as at a thousand: it counts at
    most ``list_count_limit`` rows (``BoundedPaginator``; the page says "more than"
    beyond), never the whole table (no full count, no facet counts), and, when
    ``exact_search_fields`` is set, searches by exact values on indexed fields
    instead of ``icontains`` (which reads every row). ``text_search`` adds a search
    of words served by an index of the database in use, if it has one. Filters list
    choices from small tables (``ScopedRelatedFilter``), never distinct values of the list,
    and a value that is not one of their choices is answered 400 with what is wrong
    (``FilterRefused``)."""

    list_count_limit = 1000
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    exact_search_fields: tuple[str, ...] = ()
    most_search_terms = 20

    def lookup_allowed(self, lookup, value, request=None):
        """Also the lookups a filter takes besides its own field's (the round filter's number)."""
        for item in self.get_list_filter(request) if request is not None else self.list_filter:
            if isinstance(item, tuple) and lookup in getattr(item[1], "extra_lookups", lambda path: ())(item[0]):
                return True
        return super().lookup_allowed(lookup, value, request)

    def changelist_view(self, request, extra_context=None):
        try:
            return super().changelist_view(request, extra_context)
        except FilterRefused as exc:
            context = {**self.admin_site.each_context(request), "opts": self.opts, "message": str(exc),
                       "title": f"Cannot filter the {self.opts.verbose_name_plural} so",
                       "list_url": request.path}
            return TemplateResponse(request, "admin/filter_refused.html", context, status=400)

    def count_limit(self) -> int:
        """The most rows the list counts; above a page and above "Show all" (the admin
        lists a count within either without slicing)."""
        return max(self.list_count_limit, self.list_per_page + 1, self.list_max_show_all + 1)

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        limit = max(self.count_limit(), per_page + 1)
        return BoundedPaginator(queryset, per_page, orphans, allow_empty_first_page, limit=limit)

    def get_ordering(self, request):
        """Search results newest first by id: the page sorts the few ids found, where the
        list's own order (a date) could make the database walk that order's index past
        every other row. A column the user sorts by still wins."""
        if self.exact_search_fields and request.GET.get(SEARCH_VAR, "").strip():
            return ["-pk"]
        return super().get_ordering(request)

    def text_search(self, queryset, text: str):
        """``(queryset, Q)``: rows whose words match ``text``, through an index; ``Q`` is
        None where there is no such search (the default, and on SQLite)."""
        return queryset, None

    def get_search_results(self, request, queryset, search_term):
        if not self.exact_search_fields:
            return super().get_search_results(request, queryset, search_term)
        search_term = search_term.strip()
        if not search_term:
            return queryset, False
        limit = self.count_limit()
        exact = exact_search(self.model, self.exact_search_fields,
                             _search_terms(search_term, self.most_search_terms))
        alternatives = []
        if exact is not None:
            # The exact values first, through their own indexes and without the list's scope
            # (given a task scope too, SQLite may walk the task's rows and test each); only
            # their ids leave the database, and the scope applies to those below.
            most = 2 * (limit + 1)
            exact_ids = list(self.model._default_manager.filter(exact).order_by()
                             .values_list("pk", flat=True)[:most])
            alternatives.append(Q(pk__in=exact_ids) if len(exact_ids) < most else exact)
        with_words, words = self.text_search(queryset, search_term)
        if words is not None:
            # Rows with the words, as their index finds them, at most a list's count: no
            # index gives both the words and the list's order, and in its order the database
            # would compute the words of each row it walks past.
            found = list(with_words.filter(words).order_by().values_list("pk", flat=True)[: limit + 1])
            if len(found) > limit:
                self.message_user(
                    request, f"More than {limit} {self.opts.verbose_name_plural} have these words: the list holds "
                             f"{limit} of them, the first their index found (not the newest); add words to narrow "
                             "the search.", messages.WARNING)
            if found:
                alternatives.append(Q(pk__in=found))
        if not alternatives:
            return queryset.none(), False
        matching = queryset.filter(Q.create(alternatives, connector=Q.OR))
        # The matches are read first, unordered (each alternative through its index), and the
        # page sorts those ids. Only where the exact values alone match more than a list
        # counts (the words add at most that many) is the database asked for them in order
        # at once: its walk down the ids tests plain columns, and meets a match often.
        most = 2 * (limit + 1)
        matches = list(matching.order_by().values_list("pk", flat=True)[:most])
        if len(matches) < most:
            return queryset.filter(pk__in=matches), False
        return matching, False


def scoped_rows(model, user):
    """The rows of ``model`` (a Task, or a model with a ``task``) in the tasks ``user`` researches."""
    tasks = Task.objects.researched_by(user)
    if model is Task:
        return tasks
    return model._default_manager.all() if user.is_superuser else model._default_manager.filter(task__in=tasks)


def refuse_unknown(values, known, what: str, where: str) -> None:
    """FilterRefused for the first of ``values`` (the URL's) that is not in ``known`` (ids)."""
    known = {str(pk) for pk in known}
    for value in values or ():
        if not str(value).isdigit():
            raise FilterRefused(f"{value!r} is not the id of a {what}: choose one from the filter's list.")
        if str(value) not in known:
            raise FilterRefused(f"No {what} #{value} {where}: choose one from the filter's list.")


def refuse_unknown_round_numbers(values, known, where: str) -> None:
    """FilterRefused for the first of ``values`` that is not one of the round numbers ``known``."""
    known = set(known)
    for value in values:
        if not str(value).isdigit():
            raise FilterRefused(f"{value!r} is not a round number (0 or more).")
        if int(value) not in known:
            raise FilterRefused(f"No round {value} in {where}: choose one from the filter's list.")


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A filter on a relation whose choices are the related rows in the user's tasks
    (the Task table, or the batches of those tasks): a read of a small table, where
    ``RelatedOnlyFieldListFilter`` reads the distinct values over every listed row.
    A value that is not one of the choices is refused (``FilterRefused``)."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        meta = field.related_model._meta
        refuse_unknown(self.lookup_val, [pk for pk, _ in self.lookup_choices], meta.verbose_name,
                       f"among your {meta.verbose_name_plural}")

    def field_choices(self, field, request, model_admin):
        rows = scoped_rows(field.related_model, request.user)  # in the related model's own order
        return [(row.pk, str(row)) for row in rows]

    def choices(self, changelist):
        """Choosing another task drops the round filter, whose rounds were the last task's."""
        dependent = {key for key in changelist.params if key.startswith("round__")} \
            if self.field.related_model is Task else set()
        for choice in super().choices(changelist):
            if dependent:
                kept = [(k, v) for k, v in parse_qsl(choice["query_string"].lstrip("?"), keep_blank_values=True)
                        if k not in dependent]
                choice["query_string"] = "?" + urlencode(kept)
            yield choice


class TaskRoundFilter(admin.RelatedFieldListFilter):
    """The round filter: the rounds of the task the list is filtered by (all the user's
    tasks' rounds when none is), read from the Round table, never from the listed rows.
    Besides the round's id it takes its number (``round__number=1``: that round of the
    chosen task, or of every task). A round outside the user's tasks, or not of the chosen
    task, is refused (``FilterRefused``)."""

    @staticmethod
    def extra_lookups(field_path: str) -> set[str]:
        return {f"{field_path}__number"}

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.number_kwarg = f"{field_path}__number"
        self.tasks = self._chosen_tasks(request, model_admin)
        super().__init__(field, request, params, model, model_admin, field_path)
        where = f"task {self.tasks[0].name}" if len(self.tasks) == 1 else "your tasks"
        refuse_unknown(self.lookup_val, [pk for pk, _ in self.lookup_choices], "round", f"in {where}")
        self.numbers = [str(value) for value in self.used_parameters.get(self.number_kwarg) or ()]
        refuse_unknown_round_numbers(self.numbers, self.round_numbers.values(), where)

    @staticmethod
    def _chosen_tasks(request, model_admin) -> list:
        """The tasks the list is filtered by, among the user's (the task filter refuses others)."""
        path = getattr(model_admin, "task_path", "task")
        wanted = [v for v in request.GET.getlist(f"{path}__id__exact") if v.isdigit()]
        if not wanted:
            return []
        return list(scoped_rows(Task, request.user).filter(pk__in=wanted))

    def expected_parameters(self):
        return [*super().expected_parameters(), self.number_kwarg]

    def has_output(self):
        # A filter without output is not applied: a round asked for is, even if it is the only one.
        return bool(self.lookup_val or self.numbers) or super().has_output()

    def field_choices(self, field, request, model_admin):
        rounds = scoped_rows(Round, request.user)
        if self.tasks:
            rounds = rounds.filter(task__in=self.tasks)
        rounds = list(rounds.select_related("task").order_by("task__name", "number"))
        self.round_numbers = {r.pk: r.number for r in rounds}
        one_task = len(self.tasks) == 1
        return [(r.pk, f"Round {r.number}" if one_task else f"{r.task.name}, round {r.number}") for r in rounds]

    def choices(self, changelist):
        chosen = [str(v) for v in self.lookup_val or ()]
        yield {
            "selected": not chosen and not self.numbers,
            "query_string": changelist.get_query_string(
                remove=[self.lookup_kwarg, self.lookup_kwarg_isnull, self.number_kwarg]),
            "display": _("All"),
        }
        for pk, label in self.lookup_choices:
            yield {
                "selected": str(pk) in chosen or (not chosen and str(self.round_numbers[pk]) in self.numbers),
                "query_string": changelist.get_query_string(
                    {self.lookup_kwarg: pk}, [self.lookup_kwarg_isnull, self.number_kwarg]),
                "display": label,
            }


# The task filter lists the tasks the researcher owns (every task, for superusers).
TASK_FILTER = ("task", ScopedRelatedFilter)


class TaskScopedAdmin(LargeListAdmin):
    """Rows reached through ``task_path`` (a lookup to the row's Task); a
    non-superuser sees and edits only those of the tasks they own, and picks
    related rows (tasks, rounds, contexts, models) only from those tasks."""

    task_path = "task"

    def researched_tasks(self, request):
        return Task.objects.researched_by(request.user)

    def researched_task_ids(self, request) -> list[int]:
        """The ids of the tasks the user researches, read once per request: a list of
        their ids (usually one) lets the database walk a list's order index for the
        task, where ``IN (subquery)`` led SQLite to sort all of the task's rows."""
        ids = getattr(request, "_dynabench_researched_task_ids", None)
        if ids is None:
            ids = list(self.researched_tasks(request).values_list("pk", flat=True))
            request._dynabench_researched_task_ids = ids
        return ids

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.task_path}__in": self.researched_task_ids(request)})

    def _in_scope(self, request, obj) -> bool:
        return obj is None or request.user.is_superuser or self.get_queryset(request).filter(pk=obj.pk).exists()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._in_scope(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._in_scope(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._in_scope(request, obj)

    def _limit(self, request, field, kwargs):
        if request.user.is_superuser:
            return kwargs
        tasks = self.researched_tasks(request)
        model = field.related_model
        if model is Task:
            kwargs["queryset"] = tasks
        elif model in (Round, Context, ModelVersion):
            kwargs["queryset"] = model.objects.filter(task__in=tasks)
        return kwargs

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        return super().formfield_for_foreignkey(db_field, request, **self._limit(request, db_field, kwargs))

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "owners" and not request.user.is_superuser:
            # Co-owners are picked among researchers (staff), never among annotators or MTurk workers.
            kwargs["queryset"] = db_field.related_model.objects.filter(is_staff=True, is_active=True)
        return super().formfield_for_manytomany(db_field, request, **self._limit(request, db_field, kwargs))


def run_service_action(modeladmin, request, queryset, service, done: str):
    """Call ``service`` on each selected row; report each refusal by name (``str(exc)``:
    an ``InvalidInput`` names its fields, where its ``message`` says only "Invalid input.")."""
    changed = 0
    for obj in queryset:
        try:
            service(obj)
        except DomainError as exc:
            modeladmin.message_user(request, f"{obj}: {exc}", messages.ERROR)
        else:
            changed += 1
    if changed:
        modeladmin.message_user(request, f"{done}: {changed}.", messages.SUCCESS)
