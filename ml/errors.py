"""Exceptions raised by the ML core.

Callers (Django views, Celery tasks) catch :class:`MLError` to turn any ML failure
into a clean response; :class:`InputError` carries the offending field so forms can
attach the message to the right input.
"""

from __future__ import annotations


class MLError(Exception):
    """Base class for every error the ``ml`` package raises on purpose."""


class InputError(MLError, ValueError):
    """Bad input from a user or caller: empty text, text too long, unknown label,
    missing field.  ``field`` names the input (``"premise"``, ``"label"``, ...)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class ArtifactError(MLError):
    """A model artifact (or backbone) is missing, incomplete, corrupted, or its
    sha256 does not match what was expected."""
