from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Examples and validations"

    def ready(self):
        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)
