from django.apps import AppConfig


class CrowdConfig(AppConfig):
    name = "crowd"
    verbose_name = "Crowd work (Mechanical Turk)"

    def ready(self):
        from leaderboard.releases.contributions import register_card_section

        from . import releases

        # The leaderboard's data releases say how this app's workers were recruited and
        # paid: it sits below this app and cannot read these records itself.
        register_card_section("recruitment", releases.recruitment_section)

        # MTurk qualifications follow the onboarding records (crowd.onboarding).
        from annotation.onboarding import onboarding_blocked, onboarding_passed, onboarding_reset

        from . import onboarding

        onboarding_passed.connect(onboarding.on_passed, dispatch_uid="crowd-onboarding-passed")
        onboarding_blocked.connect(onboarding.on_blocked, dispatch_uid="crowd-onboarding-blocked")
        onboarding_reset.connect(onboarding.on_reset, dispatch_uid="crowd-onboarding-reset")
