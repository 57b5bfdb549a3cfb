"""The API's parsers: JSON with limits on size, nesting and character encodings;
multipart (file uploads) with a limit on size."""

import codecs
import json

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser, MultiPartParser

from .http_exceptions import PayloadTooLarge
from .rows import MAX_JSON_DEPTH, json_depth_exceeds

# JSON is Unicode text (RFC 8259). Any other codec Python knows would be accepted
# by name from the Content-Type's charset, including compressors (bz2, zlib) that
# would inflate a small body past the size limit after it was checked.
JSON_ENCODINGS = {"utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"}


def json_encoding(name: str) -> str:
    """The codec for a Content-Type charset, if it is one JSON may be written in; else 415."""
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        codec = None
    if codec not in JSON_ENCODINGS:
        raise exceptions.UnsupportedMediaType(
            f"application/json; charset={name}", detail=f"JSON must be UTF-8, UTF-16 or UTF-32, not {name!r}.")
    return codec


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with limits: a body over ``API_MAX_BODY_BYTES`` gets 413
    before it is read (and is never inflated after: only Unicode charsets are read,
    415 otherwise); undecodable bytes, JSON nested deeper than ``MAX_JSON_DEPTH``, NaN
    and Infinity get 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = settings.API_MAX_BODY_BYTES
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {limit}.")
        encoding = json_encoding(parser_context.get("encoding", settings.DEFAULT_CHARSET))
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"The request body is over the limit of {limit} bytes.")
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"The body is not valid {encoding}: {exc.reason}.") from None
        if json_depth_exceeds(text, MAX_JSON_DEPTH):
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted.")
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise exceptions.ParseError(f"JSON parse error: {exc}") from None


class BoundedMultiPartParser(MultiPartParser):
    """multipart/form-data, for the endpoints that take a file. A body declared over
    the view's ``max_upload_bytes`` (``API_MAX_BODY_BYTES`` if it names none) gets 413
    before any of it is read; the service then bounds the file itself. Without a
    Content-Length a WSGI server hands the view an empty body."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        view = parser_context.get("view")
        limit = getattr(view, "max_upload_bytes", None) or settings.API_MAX_BODY_BYTES
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"The request body is {declared} bytes; the limit is {limit}.")
        return super().parse(stream, media_type, parser_context)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
