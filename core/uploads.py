"""Uploads bounded while they are read: an oversized body gets 413 before it fills a disk.

Django stores an uploaded file as it reads the request: in memory up to
``FILE_UPLOAD_MAX_MEMORY_SIZE``, then in a temporary file, however large, and the
view sees its size only once all of it is on disk. ``BoundedUploadHandler`` goes
first in a request's upload handlers and counts the bytes of its files as they
arrive. The handlers after it, the ones that store, are passed at most ``limit``
bytes; at the first byte over, the file being stored is closed (a temporary file
is deleted), reading stops and ``TooLarge`` (413) is raised. A body whose
Content-Length is already over the limit plus the form's framing is refused
before a byte of it is read.

Handlers must be in place before anything reads the body, and CSRF protection
reads it (``request.POST``) before the view runs:

- an API view (DRF) takes ``BoundedUploads``: the handler is installed in
  ``initial``, before authentication (whose CSRF check reads the body);
- a page takes ``@bounded_uploads(...)``, which exempts the view from the CSRF
  middleware, installs the handler and then applies the same CSRF check itself
  (Django's documented way of changing upload handlers in a view).

Under WSGI a body is never longer than its Content-Length (Django reads no more);
without one it is empty. Under ASGI Django reads the whole body into a spooled
temporary file before any view runs, so the limit is enforced only after that:
serve uploads through WSGI (as the production shape does), or bound the body in
the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.core.files.uploadhandler import FileUploadHandler
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from .errors import TooLarge

# Room for the multipart framing and the form's other fields around the file.
MULTIPART_OVERHEAD_BYTES = 64 * 1024


class BoundedUploadHandler(FileUploadHandler):
    """Passes on at most ``limit`` bytes of a request's uploaded files (all of them
    together), then stops the request with ``TooLarge``."""

    def __init__(self, request, limit: int, overhead: int = MULTIPART_OVERHEAD_BYTES):
        super().__init__(request)
        self.limit = int(limit)
        self.overhead = int(overhead)
        self.received = 0

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        if content_length and content_length > self.limit + self.overhead:
            self._refuse(f"The request body is {content_length:,} bytes; a file may be at most "
                         f"{self.limit:,} bytes.")
        return None  # the usual parsing goes on

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.limit:
            self._refuse(f"The file is over the limit of {self.limit:,} bytes; nothing was kept.")
        return raw_data

    def file_complete(self, file_size):
        return None  # the handlers after this one make the file

    def _refuse(self, message: str):
        # Close what the storing handlers hold open (Django's parser only closes finished
        # files on an error): a temporary file is deleted when it is closed.
        for handler in self.request.upload_handlers:
            held = getattr(handler, "file", None) if handler is not self else None
            if held is not None:
                held.close()
        # The body is half read: whoever reads request.POST or FILES again gets them
        # empty rather than a second parse (Django does the same after a parse error).
        mark = getattr(self.request, "_mark_post_parse_error", None)
        if mark is not None:
            mark()
        raise TooLarge(message)


def bound_uploads(request, limit: int) -> None:
    """Put a ``BoundedUploadHandler`` first in ``request``'s upload handlers (a Django
    ``HttpRequest``). The body must not have been read yet."""
    if hasattr(request, "_files"):
        raise RuntimeError("The request body was read before its upload limit was set.")
    request.upload_handlers.insert(0, BoundedUploadHandler(request, limit))


class BoundedUploads:
    """DRF view mixin: the files of a POST, PUT or PATCH are bounded by
    ``max_upload_file_bytes()`` while they are read (413 above)."""

    def max_upload_file_bytes(self) -> int:
        raise NotImplementedError

    def initial(self, request, *args, **kwargs):
        if request.method in ("POST", "PUT", "PATCH"):
            bound_uploads(request._request, self.max_upload_file_bytes())
        super().initial(request, *args, **kwargs)


def bounded_uploads(limit: Callable[[], int], refused: Callable[..., object]):
    """Decorator for a page that takes files: ``limit()`` bytes at most (for all its
    files), enforced while the body is read. ``refused(request, exc, *args, **kwargs)``
    answers (413) a body over it that the CSRF check came upon; ``exc`` is the
    ``TooLarge``. Where the view reads the body itself it gets the ``TooLarge``. The
    view keeps its CSRF protection."""

    def decorator(view):
        protected = csrf_protect(view)

        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method == "POST":
                bound_uploads(request, limit())
            try:
                return protected(request, *args, **kwargs)
            except TooLarge as exc:  # raised while the CSRF check read the body
                return refused(request, exc, *args, **kwargs)

        return csrf_exempt(wrapped)

    return decorator
