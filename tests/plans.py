"""Query plans of the hot paths: every statement a request runs is captured and
EXPLAINed on the database under test (SQLite or PostgreSQL), and a plan that reads a
big table whole, or runs a subquery over one once per row, is named.

- SQLite: ``EXPLAIN QUERY PLAN``. A ``SCAN`` of a big table (or of an alias of one) is a
  full read, with or without an index (``SCAN t USING INDEX i`` walks all of ``i``),
  except an index walked in order under a ``LIMIT`` with no sort (a page of a list in
  its index's order); a ``CORRELATED`` subquery over a big table runs once per outer row.
- PostgreSQL: ``EXPLAIN (FORMAT JSON)`` with sequential scans priced out
  (``enable_seqscan = off``), so a ``Seq Scan`` of a big table is left only where no
  index can serve the query. An index scan with no index condition reads the whole
  index, which is a full read too unless a ``Limit`` above it stops the walk. A
  ``SubPlan`` that is not hashed runs once per outer row (an ``InitPlan`` or a hashed
  one runs once).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import contextmanager

from django.db import connection, transaction

BIG_TABLES = ("annotation_example", "annotation_validation")


@contextmanager
def captured():
    """Collect ``(sql, params)`` of every statement run on the default connection."""
    statements: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


def _aliases(sql: str) -> dict[str, str]:
    """Table aliases in Django's SQL (``"annotation_example" U0``) to their tables."""
    found = {table: table for table in BIG_TABLES}
    for table, alias in re.findall(r'"(\w+)"\s+(?:AS\s+)?"?([A-Z]\d+)"?', sql):
        found[alias] = table
    return found


def _sqlite_problems(sql: str, params: tuple, sorts: bool) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        rows = cursor.fetchall()
    aliases = _aliases(sql)
    nodes = {row[0]: (row[1], row[3]) for row in rows}
    sorted_by_temp_tree = any("TEMP B-TREE FOR ORDER BY" in detail for _, detail in nodes.values())
    limited = re.search(r"\bLIMIT\s+\d+", sql, re.IGNORECASE) is not None
    problems = [f"sorted, not walked in order: {detail}" for _, detail in nodes.values()
                if not sorts and "TEMP B-TREE FOR ORDER BY" in detail]
    for node_id, (_parent, detail) in nodes.items():
        scan = re.match(r"SCAN (\S+)", detail)
        if scan and aliases.get(scan.group(1)) in BIG_TABLES:
            ordered_walk = " INDEX " in detail and limited and not sorted_by_temp_tree
            if not ordered_walk:
                problems.append(f"full scan: {detail}")
        if "CORRELATED" in detail:
            below = _sqlite_subtree(nodes, node_id)
            if any(aliases.get(m) in BIG_TABLES for d in below for m in re.findall(r"(?:SCAN|SEARCH) (\S+)", d)):
                problems.append(f"subquery once per row: {detail} ({'; '.join(below)})")
    return problems


def _sqlite_subtree(nodes: dict, root: int) -> list[str]:
    out, todo = [], [root]
    while todo:
        current = todo.pop()
        for node_id, (parent, detail) in nodes.items():
            if parent == current:
                out.append(detail)
                todo.append(node_id)
    return out


def _pg_problems(sql: str, params: tuple, sorts: bool) -> list[str]:
    import json

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        if not sorts:  # price sorts out too: a Sort left is one no index order can replace
            for setting in ("enable_sort", "enable_incremental_sort", "enable_bitmapscan"):
                cursor.execute(f"SET LOCAL {setting} = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    problems: list[str] = []

    def tables(node) -> set[str]:
        found = {node["Relation Name"]} if "Relation Name" in node else set()
        for child in node.get("Plans", []):
            found |= tables(child)
        return found

    def walk(node, limited=False):
        big = node.get("Relation Name") in BIG_TABLES
        kind = node.get("Node Type", "")
        if kind in ("Sort", "Incremental Sort") and not sorts:
            problems.append(f"sorted, not walked in order: {kind} by {node.get('Sort Key')}")
        if kind == "Seq Scan" and big:
            problems.append(f"full scan: Seq Scan on {node['Relation Name']}")
        if kind in ("Index Scan", "Index Only Scan") and big and "Index Cond" not in node and not limited:
            problems.append(f"full scan: {kind} using {node.get('Index Name')} on {node['Relation Name']}, "
                            "no index condition and no limit")
        if node.get("Parent Relationship") == "SubPlan" and not node.get("Subplan Name", "").startswith("hashed"):
            touched = tables(node) & set(BIG_TABLES)
            if touched:
                problems.append(f"subquery once per row: {node.get('Subplan Name')} over {sorted(touched)}")
        for child in node.get("Plans", []):
            # A Limit bounds the walk below it, through nodes that stream rows in order.
            walk(child, limited=(kind == "Limit" or (limited and kind in ("Nested Loop", "Index Scan",
                                                                            "Index Only Scan"))))

    walk(plan[0]["Plan"])
    return problems


def problems_of(sql: str, params: tuple = (), *, sorts: bool = True) -> list[str]:
    """What is wrong with one statement's plan ([] when nothing is). ``sorts=False``: a
    sort is wrong too (a statement that should walk an index in its order)."""
    if not sql.lstrip().upper().startswith("SELECT"):
        return []
    if connection.vendor == "postgresql":
        return _pg_problems(sql, params, sorts)
    return _sqlite_problems(sql, params, sorts)


def plan_problems(run: Callable[[], object], *, sorts: bool = True) -> list[str]:
    """Run ``run`` (a request, a service call), EXPLAIN every SELECT it ran, and list
    each problem with the statement it was found in."""
    with captured() as statements:
        run()
    found = []
    for sql, params in statements:
        for problem in problems_of(sql, params, sorts=sorts):
            found.append(f"{problem}\n    in: {sql[:400]}")
    return found
