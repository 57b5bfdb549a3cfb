from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """``?page=N&page_size=M``: pages from 1, sizes from 1 to 200. A page past the end
    is 404; a page size that is not a whole number in range is 400 (never silently
    replaced by the default)."""

    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        values = request.query_params.getlist(self.page_size_query_param)
        if not values:
            return self.page_size
        value = values[-1]
        if len(values) > 1 or not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= self.max_page_size:
            raise ValidationError({self.page_size_query_param: [
                f"Must be one whole number from 1 to {self.max_page_size}."]})
        return int(value)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update({"minimum": 1, "maximum": self.max_page_size})
            if parameter["name"] == self.page_query_param:
                parameter["schema"].update({"minimum": 1})
        return parameters
