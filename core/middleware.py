"""Request checks that must hold before any view reads a body."""

from django.http import HttpResponse, JsonResponse


def text_charset_only(get_response):
    """Refuse (415) a body whose Content-Type names a charset that is not a text
    encoding. Python's codec registry also knows transforms such as bz2, zlib and
    rot13; Django accepts any name the registry knows, and decoding a form or JSON
    body with one of those raises instead of failing cleanly (or inflates a small
    body past the size limits)."""

    def middleware(request):
        charset = request.content_params.get("charset") if request.content_params else None
        if charset:
            try:
                "x".encode(charset)  # a transform (bz2) or an unknown name raises LookupError
            except LookupError:
                message = f"The charset {charset!r} is not a text encoding; send UTF-8."
                if request.path.startswith("/api/"):
                    return JsonResponse({"detail": message, "code": "unsupported_media_type"}, status=415)
                return HttpResponse(message, status=415, content_type="text/plain; charset=utf-8")
        return get_response(request)

    return middleware
