"""Query plans in tests: ``assert_index_walk(queryset)`` fails when the database would
read a table whole or sort its rows to answer the query, on SQLite and on PostgreSQL.

A list that pages with a keyset (``WHERE <filters> AND id < ? ORDER BY id DESC LIMIT
n``) costs the same at any size only if an index hands the rows over in order: the
plan must reach the table through an index search bound by the query's filters (not
a scan of the table or of a whole index), and must have no sort. That is what this
checks, from the database's own EXPLAIN:

- SQLite (``EXPLAIN QUERY PLAN``): every step on the table is a ``SEARCH`` (never
  ``SCAN``), and no step is ``USE TEMP B-TREE`` (a sort, for ORDER BY, GROUP BY or
  DISTINCT);
- PostgreSQL (``EXPLAIN (FORMAT JSON)``, with sequential scans, bitmap scans and
  sorts priced out, so that the planner walks an index in order wherever one allows
  it, however few rows a test database has): every node on the table is an Index
  Scan or Index Only Scan with an ``Index Cond`` (not a Seq Scan, not a bitmap scan,
  not a walk of a whole index with a filter), and no Sort or Incremental Sort node is
  above it. Where no index serves the query, the plan keeps its scan or its sort, and
  the check fails. It runs no ANALYZE: the row counts that ANALYZE stores outlive the
  test's rollback and would change the plans of the tests after it.

``bound`` names columns that must be in the index condition (the filters the index
must serve, not filter afterwards). Queries with LIMIT are explained as they are run:
pass the sliced queryset.
"""

from __future__ import annotations

import json
import re

from django.db import connection

SORTS = ("Sort", "Incremental Sort")
# PostgreSQL's plans for it: what a test database's few rows make cheapest (a scan, or
# a sort of a handful of rows) is priced out, so the planner takes an ordered index
# walk wherever an index allows one; where none does, it keeps the scan or the sort.
PLANNER_OFF = ("enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_incremental_sort")
ORDERED_INDEX_SCANS = ("Index Scan", "Index Only Scan")


def plan(queryset) -> str:
    """The plan of ``queryset`` on the current database, as text (JSON on PostgreSQL)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for setting in PLANNER_OFF:
                cursor.execute(f"SET {setting} = off")
            try:
                return queryset.explain(format="json")
            finally:
                for setting in PLANNER_OFF:
                    cursor.execute(f"RESET {setting}")
    return queryset.explain()


def problems(queryset, *, table: str | None = None, bound: tuple[str, ...] = ()) -> list[str]:
    """What in ``queryset``'s plan is not an index walk of ``table`` (its model's by
    default) bound by the ``bound`` columns; empty when it is one."""
    table = table or queryset.model._meta.db_table
    text = plan(queryset)
    if connection.vendor == "postgresql":
        return _postgresql_problems(json.loads(text)[0]["Plan"], table, bound)
    if connection.vendor == "sqlite":
        return _sqlite_problems(text, table, bound, queryset.model._meta.pk.column)
    raise NotImplementedError(f"no plan reader for {connection.vendor}")


def assert_index_walk(queryset, *, table: str | None = None, bound: tuple[str, ...] = ()) -> None:
    found = problems(queryset, table=table, bound=bound)
    assert not found, f"not an index walk on {connection.vendor}: {found}\nplan:\n{plan(queryset)}"


def _sqlite_problems(text: str, table: str, bound: tuple[str, ...], pk: str) -> list[str]:
    found = []
    steps = [line.split(" ", 3)[-1] for line in text.splitlines() if line.strip()]
    on_table = re.compile(rf"^(SEARCH|SCAN) {re.escape(table)}\b")
    seen_table = False
    for step in steps:
        if "TEMP B-TREE" in step:
            found.append(f"sort: {step}")
        match = on_table.match(step)
        if not match:
            continue
        seen_table = True
        if match.group(1) == "SCAN":
            found.append(f"scan: {step}")
            continue
        condition = step[step.find("(") + 1:step.rfind(")")] if "(" in step else ""
        for column in bound:
            names = f"{re.escape(column)}|rowid" if column == pk else re.escape(column)  # the key is the rowid
            if not re.search(rf"\b(?:{names})[=<>]", condition):
                found.append(f"{column} is not in the index search: {step}")
    if not seen_table:
        found.append(f"{table} is not in the plan")
    return found


def _postgresql_problems(root: dict, table: str, bound: tuple[str, ...]) -> list[str]:
    found = []
    seen_table = False

    def visit(node: dict, sorts_above: list[str]) -> None:
        nonlocal seen_table
        kind = node["Node Type"]
        if node.get("Relation Name") == table:
            seen_table = True
            if sorts_above:
                found.append(f"sort above {table}: {', '.join(sorts_above)}")
            if kind not in ORDERED_INDEX_SCANS:
                found.append(f"{kind} on {table}")
            else:
                condition = node.get("Index Cond", "")
                if not condition:
                    found.append(f"{kind} on {table} using {node.get('Index Name')} walks the whole index "
                                 f"(filter: {node.get('Filter', '')})")
                for column in bound:
                    if not re.search(rf"\b{re.escape(column)}\b", condition):
                        found.append(f"{column} is not in the index condition of {node.get('Index Name')}: "
                                     f"{condition!r}")
        below = [*sorts_above, f"{kind} by {node.get('Sort Key')}"] if kind in SORTS else sorts_above
        for child in node.get("Plans", []):
            visit(child, below)

    visit(root, [])
    if not seen_table:
        found.append(f"{table} is not in the plan")
    return found
