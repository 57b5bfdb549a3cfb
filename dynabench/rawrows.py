"""Whole model rows through a plain cursor, for the few hot-path queries.

Django compiles every ORM query anew: on the 2-core benchmark machine that is
0.3-0.6 ms per query (select_related over three tables, default orderings),
while the same SELECT through the cursor costs 0.02-0.05 ms. The create-example
call makes a handful of them, next to a model pass of about 12 ms
(bench/annotation.py), so its reads use this module; everything else uses the ORM.

Nothing is hand-maintained: column lists come from the models' ``_meta``, and
values go through the same backend and field converters the ORM applies (JSON,
UUIDs, SQLite datetimes), so the instances equal what the ORM would build
(``tests/annotation/test_hot_path.py`` checks that).
"""

from __future__ import annotations

from functools import lru_cache

from django.db import connections


def columns(model, alias: str, using: str = "default") -> str:
    """``"alias"."col", ...`` for every concrete field of ``model``, in ``_meta`` order."""
    q = connections[using].ops.quote_name
    return ", ".join(f"{q(alias)}.{q(f.column)}" for f in model._meta.concrete_fields)


def _plan(model, connection):
    """(attnames, {index: (converters, expression)}) for ``model``'s concrete fields.

    Kept on the connection object: backend converters are bound to it, each thread
    has its own, and the plans go away with it (a module-level cache keyed by
    connection would keep every thread's connection open, e.g. under runserver,
    which starts a thread per request).
    """
    plans = connection.__dict__.setdefault("_dynabench_rawrows_plans", {})
    plan = plans.get(model)
    if plan is None:
        fields = model._meta.concrete_fields
        compiler = model._base_manager.none().query.get_compiler(connection=connection)
        converters = compiler.get_converters([f.get_col(model._meta.db_table) for f in fields])
        plan = plans[model] = ([f.attname for f in fields], converters)
    return plan


def build(model, values, using: str = "default"):
    """A ``model`` instance from one row's values (in :func:`columns` order)."""
    connection = connections[using]
    attnames, converters = _plan(model, connection)
    values = list(values)
    for i, (funcs, expression) in converters.items():
        value = values[i]
        for convert in funcs:
            value = convert(value, expression, connection)
        values[i] = value
    return model.from_db(using, attnames, values)


def width(model) -> int:
    return len(model._meta.concrete_fields)


def fetch(sql: str, params, using: str = "default") -> list[tuple]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@lru_cache(maxsize=64)
def _insert_plan(model, vendor: str, using: str):
    connection = connections[using]
    q = connection.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and f.db_returning)]
    pk = model._meta.pk
    sql = (
        f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {q(pk.column)}"
    )
    return fields, sql


def insert_statement(obj, using: str = "default") -> tuple[str, list]:
    """``(sql, params)`` saving the new ``obj`` as ``Model.save()`` would (field
    defaults, ``auto_now``, JSON and UUID preparation all come from the fields), as
    one ``INSERT ... RETURNING`` built once per model, to run in :func:`run_many`:
    its row holds the new primary key. No signals are sent: only for models with no
    save signal receivers and no ``save()`` override."""
    connection = connections[using]
    fields, sql = _insert_plan(type(obj), connection.vendor, using)
    return sql, [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]


def run_many(statements: list[tuple[str, list]], using: str = "default") -> list[tuple[int, list | None]]:
    """Run ``statements`` in order; ``(rowcount, rows or None)`` for each.

    On PostgreSQL (psycopg 3) they go out in one pipeline: one network round trip
    for the lot instead of one each, which inside a transaction of five writes
    saves ~0.3 ms a statement on the benchmark machine. Errors surface as Django's
    database exceptions, and the statements are logged like any other query (so
    ``CaptureQueriesContext`` and ``DEBUG`` see them). Elsewhere they run one by one.
    Callers that need a statement's effect before sending the next one (a check
    whose failure must stop the rest) cannot use this: check afterwards and raise
    inside the transaction to roll it all back.
    """
    import time

    connection = connections[using]
    raw = None
    if connection.vendor == "postgresql":
        connection.ensure_connection()
        raw = connection.connection if hasattr(connection.connection, "pipeline") else None
    if raw is None:
        out = []
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
                out.append((cursor.rowcount, cursor.fetchall() if cursor.description else None))
        return out
    started = time.monotonic()
    with connection.wrap_database_errors:
        cursors = []
        with raw.pipeline():
            for sql, params in statements:
                cursor = raw.cursor()
                cursor.execute(sql, params)
                cursors.append(cursor)
        out = [(c.rowcount, c.fetchall() if c.description else None) for c in cursors]
        for c in cursors:
            c.close()
    if connection.queries_logged:
        each = f"{(time.monotonic() - started) / max(1, len(statements)):.3f}"
        for sql, params in statements:
            connection.queries_log.append({"sql": f"{sql} -- pipelined; params {params!r}"[:4000], "time": each})
    return out
