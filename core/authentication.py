"""API token authentication that does not ignore what it cannot read."""

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header


class StrictTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``. DRF's class skips an Authorization header in any
    other form, so a request carrying garbage there could still pass on another
    credential; here any Authorization header must be a valid token (401 otherwise)."""

    def authenticate(self, request):
        header = get_authorization_header(request)
        present = "HTTP_AUTHORIZATION" in request.META
        if present and header.split()[:1] != [self.keyword.encode()]:
            raise exceptions.AuthenticationFailed(
                f"Unsupported Authorization header: send 'Authorization: {self.keyword} <key>' "
                "(keys come from POST /api/auth/token/).")
        return super().authenticate(request)
