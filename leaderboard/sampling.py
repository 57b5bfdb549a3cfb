"""Deterministic splits, groups and caps for data sets: the same on every run and
machine, whatever the file order. The replay's plans and round 0's imports both draw
with these."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable

from datafiles.readers import Record


def stable_hash(seed: int, purpose: str, key: str) -> int:
    """A 64-bit number from the seed, a purpose and a key; the same on every run and machine."""
    digest = hashlib.sha256(f"{seed}\x1f{purpose}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def group_keys(records: list[Record]) -> list[str]:
    """One key per record; records with the same key always land in the same split.

    Records that share a context (an NLI premise) are one group, and so are the
    two sides of a contrastive pair (``matched_uid``, in either direction);
    anything else is a group by itself. A group's key is the smallest name in it.
    """
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def union(a: str, b: str) -> None:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)

    nodes = []
    for record in records:
        node = "uid:" + record.external_uid
        find(node)
        if record.context and record.context.get("external_id"):
            union(node, "ctx:" + record.context["external_id"])
        matched = record.metadata.get("matched_uid") if isinstance(record.metadata, dict) else None
        if matched:
            union(node, "uid:" + str(matched))
        nodes.append(node)
    return [find(node) for node in nodes]


def cap_records(records: list[Record], cap: int | None, seed: int,
                key: Callable[[Record], str]) -> list[Record]:
    """At most ``cap`` records, stratified by ``key``, chosen by hash; in their original order."""
    if cap is None or len(records) <= cap:
        return list(records)
    strata: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        strata[key(record)].append(record)
    total = len(records)
    exact = {name: cap * len(members) / total for name, members in strata.items()}
    quota = {name: int(value) for name, value in exact.items()}
    # Largest remainder; ties by the larger stratum, then by name.
    order = sorted(strata, key=lambda n: (-(exact[n] - quota[n]), -len(strata[n]), n))
    for name in order[: cap - sum(quota.values())]:
        quota[name] += 1
    chosen: set[int] = set()
    for name, members in strata.items():
        ranked = sorted(members, key=lambda r: (stable_hash(seed, "limit", r.external_uid),
                                                r.external_uid))
        chosen.update(id(r) for r in ranked[: quota[name]])
    return [r for r in records if id(r) in chosen]
