import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
application = get_wsgi_application()


def _warm_up() -> None:
    """Embedded mode: load the open rounds' target models now, on the model thread,
    so the first example does not wait for a load. This runs where the application is
    imported: each gunicorn worker after its fork (never use --preload, which would
    load torch in the parent; see README: "Torch and fork"), and runserver's serving process."""
    from annotation.inference import embedded, warm_up_in_background

    if embedded() and os.environ.get("DYNABENCH_WARM_UP", "1") != "0":
        warm_up_in_background()


_warm_up()
