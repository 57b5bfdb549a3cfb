from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from datafiles.fetching import CATALOGUE, RETRIES, FetchError, fetch, is_installed


class Command(BaseCommand):
    help = ("Download the public data sets the platform imports, from their official locations, pinned by "
            "sha256, into the data folder (DYNABENCH_DATA_DIR, default var/data). With no name, all of them. "
            "Known: " + ", ".join(f"{name} ({data.licence})" for name, data in CATALOGUE.items()) + ".")

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="*", metavar="NAME", help="Data sets to fetch (default: all).")
        parser.add_argument("--dest", metavar="DIR", help="Where to write them (default: DYNABENCH_DATA_DIR).")
        parser.add_argument("--from", dest="source", metavar="DIR_OR_URL",
                            help="A mirror laid out like the upstream (<mirror>/<host>/<path of the URL>), "
                                 "a folder or an http(s) URL, instead of the official locations.")
        parser.add_argument("--accept-licence", action="append", default=[], metavar="NAME",
                            help="Accept a non-commercial licence (ANLI: CC BY-NC 4.0). Repeat for each.")
        parser.add_argument("--retries", type=int, default=RETRIES, metavar="N",
                            help=f"Retry a dropped or corrupted download N times (default {RETRIES}).")
        parser.add_argument("--force", action="store_true", help="Fetch again what is already there.")
        parser.add_argument("--list", action="store_true", help="List the data sets, their licences and "
                                                                 "whether they are there, and fetch nothing.")

    def handle(self, *args, **options):
        dest = Path(options["dest"] or settings.DYNABENCH_DATA_DIR)
        names = options["names"] or list(CATALOGUE)
        if options["list"]:
            for name, data in CATALOGUE.items():
                state = "there" if is_installed(data, dest) else "absent"
                self.stdout.write(f"{name:10} {state:7} {data.title}; licence: {data.licence}")
            return
        if not options["names"]:
            non_commercial = [n for n in names if CATALOGUE[n].non_commercial and n not in options["accept_licence"]]
            if non_commercial:  # all of them by default: skip what needs an explicit yes, and say so
                self.stdout.write(f"skipping {', '.join(non_commercial)}: a non-commercial licence; fetch it with "
                                  + " ".join(f"--accept-licence {n}" for n in non_commercial))
                names = [n for n in names if n not in non_commercial]
        try:
            outcome = fetch(names, dest, source=options["source"], accepted=options["accept_licence"],
                            force=options["force"], retries=max(0, options["retries"]),
                            say=self.stdout.write)
        except FetchError as exc:
            raise CommandError(str(exc)) from None
        fetched = [n for n, what in outcome.items() if what == "fetched"]
        self.stdout.write(self.style.SUCCESS(f"{len(fetched)} fetched, {len(outcome) - len(fetched)} already there, "
                                             f"in {dest}"))
