"""Fakes of external services, reachable by the real client libraries."""
