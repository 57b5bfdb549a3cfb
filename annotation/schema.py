"""OpenAPI description of the signed session token (drf-spectacular extension)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class SessionTokenScheme(OpenApiAuthenticationExtension):
    target_class = "annotation.tokens.SessionTokenAuthentication"
    name = "sessionToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "X-Dynabench-Token",
                "description": "Signed per-session token from POST /api/tasks/{slug}/sessions/ "
                               "(for pages in an MTurk iframe, where cookies are unavailable)."}
