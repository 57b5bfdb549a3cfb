"""The licences a task's data may be released under, and the languages it is in.

A task config's ``license`` (``tasks.config``) names one of ``LICENSES``: a Hugging Face
Hub licence id, which a release's data card carries as is, with the licence's address for
its Croissant metadata (``leaderboard.releases``). "unspecified" (the default) says that
nobody chose one yet: a release then says so plainly, and the Hub reads it as "unknown".
"""

LICENSES = {
    "unspecified": None,
    "cc0-1.0": "https://creativecommons.org/publicdomain/zero/1.0/",
    "cc-by-4.0": "https://creativecommons.org/licenses/by/4.0/",
    "cc-by-sa-4.0": "https://creativecommons.org/licenses/by-sa/4.0/",
    "cc-by-nc-4.0": "https://creativecommons.org/licenses/by-nc/4.0/",
    "cc-by-nc-sa-4.0": "https://creativecommons.org/licenses/by-nc-sa/4.0/",
    "odc-by": "https://opendatacommons.org/licenses/by/1-0/",
    "odbl": "https://opendatacommons.org/licenses/odbl/1-0/",
    "pddl": "https://opendatacommons.org/licenses/pddl/1-0/",
    "cdla-permissive-2.0": "https://cdla.dev/permissive-2-0/",
    "cdla-sharing-1.0": "https://cdla.dev/sharing-1-0/",
    "mit": "https://spdx.org/licenses/MIT.html",
    "apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0",
    "other": None,
}
DEFAULT_LICENSE = "unspecified"
DEFAULT_LANGUAGES = ["en"]
