"""The API's JSON parser, with limits on size and nesting."""

import codecs
import json

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from .exceptions import PayloadTooLarge

MAX_JSON_DEPTH = 32


def json_depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects deeper than ``limit``.

    Cheap for ordinary bodies: only a body with more than ``limit`` opening brackets
    in all is scanned (strings skipped)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with limits: a body over ``API_MAX_BODY_BYTES`` gets 413
    before it is read, JSON nested deeper than ``MAX_JSON_DEPTH`` gets 400, and
    so do NaN and Infinity."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = settings.API_MAX_BODY_BYTES
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {limit}.")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.")
        if json_depth_exceeds(raw, MAX_JSON_DEPTH):
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted.")
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(raw, encoding)
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise exceptions.ParseError(f"JSON parse error: {exc}") from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
