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
