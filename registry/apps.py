from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "registry"
    verbose_name = "Model registry"

    def ready(self):
        from .artifacts import configured

        configured()  # a malformed DYNABENCH_ARTIFACTS_URL stops the process at start, saying why
