"""The OpenAPI pieces every endpoint shares: the error body and the error statuses."""

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, for people.")
    code = serializers.CharField(help_text="A stable machine-readable code, e.g. invalid, conflict.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False,
        help_text="400 only: messages by field (dotted paths into the request body).")


LINE_ERROR_SCHEMA = {
    "type": "object",
    "required": ["line", "message"],
    "properties": {
        "line": {"type": "integer", "minimum": 1, "description": "The line of the file the row starts on (1-based)."},
        "message": {"type": "string", "description": "What is wrong with the row."},
    },
}


@extend_schema_field({"oneOf": [
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}},
     "description": "Messages by field of the request (`file`, `format`)."},
    {"type": "array", "items": LINE_ERROR_SCHEMA,
     "description": "The file's problems, one entry each, with the line each row starts on."},
]})
class FieldOrLineErrorsField(serializers.JSONField):
    pass


class FileErrorSerializer(ErrorSerializer):
    """The error body of an endpoint that reads a file: ``errors`` is either the usual
    messages by field, or the file's problems by line."""

    errors = FieldOrLineErrorsField(
        required=False,
        help_text="400 only: messages by field, or for problems inside the file a list of "
                  "`{line, message}` (at most 100; `detail` gives the count).")


ERROR_DESCRIPTIONS = {
    400: "Bad input: `errors` names each field and what is wrong with it.",
    401: "Credentials are missing where needed, or were sent and are invalid or expired.",
    403: "The caller may not do this (not theirs, not a researcher, or a session token outside its task).",
    404: "No such resource, or not visible to the caller.",
    409: "The request conflicts with the current state.",
    413: "The request body is too large.",
    415: "The body is in a media type this endpoint does not read.",
    429: "Too many requests; `Retry-After` says when to retry.",
    503: ("A model, worker, the job queue or the database is unavailable, or a database query ran past the "
          "request's limit and was stopped (code `query_timeout`: try again, or narrow the request); "
          "`Retry-After` says when to retry."),
}


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's schema, plus the error statuses every endpoint can answer.

    Every operation documents 401, 403, 429 and 503 (authentication runs, permissions
    and throttles apply, and every query is under ``REQUEST_QUERY_TIMEOUT``, on every
    endpoint); 404 where the path names a resource or the list is paginated by page
    number; 400 where the list is paginated (a bad page, page size or cursor); 400, 413
    and 415 where a body is read. A view adds its own (409) with
    ``extend_schema(responses=...)`` or by number in ``error_statuses`` (a tuple, or a
    dict of tuples by method where one view answers several). All share the ``Error``
    body, unless the view documents its
    own body for a status (``FileError`` for 400s about a file's lines); 429 and 503
    carry ``Retry-After``. The session-token scheme is listed only where a session token
    is accepted (views with a ``token_scope``).
    """

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        parameters = {p.get("name") for p in operation.get("parameters", [])}
        declared = getattr(self.view, "error_statuses", ())
        if isinstance(declared, dict):  # by method, where one view answers several
            declared = declared.get(self.method, ())
        codes = {401, 403, 429, 503, *declared}
        if "{" in self.path or "page" in parameters:
            codes.add(404)
        if "page" in parameters or "cursor" in parameters:
            codes.add(400)
        if self.method in ("POST", "PUT", "PATCH"):
            codes |= {400, 413, 415}
        error_schema = self.resolve_serializer(ErrorSerializer, "response").ref
        responses = operation.setdefault("responses", {})
        for code in sorted(codes):
            responses.setdefault(str(code), {"description": ERROR_DESCRIPTIONS[code]})
        for code, response in responses.items():
            if code.isdigit() and int(code) >= 400:
                response.setdefault("content", {"application/json": {"schema": error_schema}})
                if int(code) in (429, 503):
                    response["headers"] = {"Retry-After": {
                        "schema": {"type": "integer"}, "description": "Seconds to wait before retrying."}}
        return operation

    def get_auth(self):
        auth = super().get_auth()
        if getattr(self.view, "token_scope", None) is None:
            auth = [entry for entry in auth if "sessionToken" not in entry]
        # Permissions that let anyone read (``anonymous_reads``) make reading public.
        reads_public = self.method in ("GET", "HEAD", "OPTIONS") and any(
            getattr(permission, "anonymous_reads", False) for permission in self.view.get_permissions())
        if reads_public and {} not in auth:
            auth.append({})
        return auth


NO_NUL = r"^[^\x00]+$"  # with allow_blank, drf-spectacular adds the empty string as its own option
NOT_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"


class StrictCharFieldExtension(OpenApiSerializerFieldExtension):
    """A strict text field's schema states what it refuses: NUL characters always, and
    text that is empty once trimmed where blank is not allowed."""

    target_class = "core.fields.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if "pattern" not in schema and "enum" not in schema:
            field = self.target
            schema["pattern"] = NOT_BLANK if field.trim_whitespace and not field.allow_blank else NO_NUL
        return schema
