from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Examples and validations"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_in, user_logged_out
        from django.db.models.signals import pre_save

        from core.authentication import revoke_tokens_on_new_password

        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)

        user_logged_out.connect(end_sessions_of_this_sign_in, dispatch_uid="annotation.end_sessions_on_logout")
        user_logged_in.connect(remember_the_address, dispatch_uid="annotation.remember_sign_in_address")
        # A new password (a reset above all) revokes the account's API tokens; annotation
        # session tokens end by their own rule (sessions.session_problem).
        pre_save.connect(revoke_tokens_on_new_password, sender=get_user_model(),
                         dispatch_uid="annotation.revoke_api_tokens_on_new_password")


def remember_the_address(sender, request, user, **kwargs):
    """A sign-in (and a sign-up, which signs in) records the account's address
    (``trust``: accounts at one address count as one person)."""
    if request is None or user is None:
        return
    from core.ratelimit import client_ip

    from .trust import record_address

    record_address(user, client_ip(request))


def end_sessions_of_this_sign_in(sender, request, user, **kwargs):
    """Signing out ends the annotation sessions opened in that sign-in: their tokens stop working."""
    if user is None or request is None:
        return
    from .sessions import login_key, revoke_sessions

    revoke_sessions(user, login_key=login_key(request.session.session_key))
