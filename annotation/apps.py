from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Examples and validations"

    def ready(self):
        from django.contrib.auth.signals import user_logged_out

        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)

        user_logged_out.connect(end_sessions_of_this_sign_in, dispatch_uid="annotation.end_sessions_on_logout")


def end_sessions_of_this_sign_in(sender, request, user, **kwargs):
    """Signing out ends the annotation sessions opened in that sign-in: their tokens stop working."""
    if user is None or request is None:
        return
    from .services.sessions import login_key, revoke_sessions

    revoke_sessions(user, login_key=login_key(request.session.session_key))
