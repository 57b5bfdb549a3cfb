from base64 import b64decode
from binascii import Error as Base64Error
from urllib import parse

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor, CursorPagination, PageNumberPagination


def whole_number(text: str, maximum: int) -> int | None:
    """``text`` as a whole number from 1 to ``maximum`` (decimal digits only), else None."""
    digits = text.lstrip("0") if text.isascii() and text.isdigit() else ""
    if not digits or len(digits) > len(str(maximum)) or int(digits) > maximum:
        return None
    return int(digits)


def strict_page_size(request, param: str, default: int, maximum: int) -> int:
    """``param`` from the query string as one whole number from 1 to ``maximum`` (400
    otherwise, never silently replaced), or ``default`` when it is absent."""
    values = request.query_params.getlist(param)
    if not values:
        return default
    number = whole_number(values[0], maximum) if len(values) == 1 else None
    if number is None:
        raise ValidationError({param: [f"Must be one whole number from 1 to {maximum}."]})
    return number


class Pagination(PageNumberPagination):
    """``?page=N&page_size=M``: pages from 1, sizes from 1 to 200. A page past the end
    is 404; a page size that is not a whole number in range is 400 (never silently
    replaced by the default)."""

    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        return strict_page_size(request, self.page_size_query_param, self.page_size, self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update({"minimum": 1, "maximum": self.max_page_size})
            if parameter["name"] == self.page_query_param:
                parameter["schema"].update({"minimum": 1})
        return parameters


MAX_KEY = 2**63 - 1  # the largest primary key the databases store
CURSOR_PATTERN = r"^[A-Za-z0-9+/]*={0,2}$"  # base64, as DRF writes its cursors


class KeysetPagination(CursorPagination):
    """``?cursor=C&page_size=M``: pages in a fixed order on a unique key (newest ``pk``
    first), each read as ``WHERE pk < <the last one seen> ORDER BY pk DESC LIMIT M+1``:
    an index walk that costs the same on the first page as deep into a million rows,
    never an OFFSET, and that neither repeats nor skips a row when rows are added
    between pages (new rows sort before the first page).

    DRF's ``CursorPagination`` with three changes. Its cursors may carry an offset, for
    orderings on keys that are not unique; on a unique key it never makes one, and here
    a cursor with one is refused, so no request can ask for an OFFSET. A cursor that
    is not one this list gave (unreadable, or a position that is no key) is 400, where
    DRF answers 404 "Invalid cursor", or a 500 from the database for a position of
    the wrong type. A page size that is not a whole number from 1 to ``max_page_size``
    is 400, where DRF silently uses the default.
    """

    ordering = "-pk"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
    cursor_query_description = ("Where the page starts: take it from the `next` or `previous` link of the "
                                "page before; leave it out for the first page.")
    invalid_cursor = ("Not a cursor this list gave: follow the `next` and `previous` links as they are, "
                      "or leave the cursor out for the first page.")

    def get_page_size(self, request):
        return strict_page_size(request, self.page_size_query_param, self.page_size, self.max_page_size)

    def decode_cursor(self, request):
        values = request.query_params.getlist(self.cursor_query_param)
        if not values:
            return None
        try:
            if len(values) > 1:
                raise ValueError("more than one cursor")
            text = b64decode(values[0].encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(text, keep_blank_values=True, strict_parsing=True, max_num_fields=3)
        except (UnicodeError, ValueError, Base64Error):
            raise ValidationError({self.cursor_query_param: [self.invalid_cursor]}) from None
        if (set(tokens) - {"r", "p"} or any(len(v) != 1 for v in tokens.values())
                or tokens.get("r", ["1"])[0] != "1"):
            raise ValidationError({self.cursor_query_param: [self.invalid_cursor]})
        position = tokens.get("p", [None])[0]
        if position is not None:
            position = self.position_value(position)
        return Cursor(offset=0, reverse="r" in tokens, position=position)

    def position_value(self, text: str):
        """The key a cursor's position names, checked (400 otherwise): here a primary key."""
        key = whole_number(text, MAX_KEY)
        if key is None:
            raise ValidationError({self.cursor_query_param: [self.invalid_cursor]})
        return str(key)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = f"Rows a page (default {self.page_size})."
                parameter["schema"].update({"minimum": 1, "maximum": self.max_page_size})
            if parameter["name"] == self.cursor_query_param:
                parameter["schema"].update({"pattern": CURSOR_PATTERN})
        return parameters
