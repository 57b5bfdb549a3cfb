"""The WSGI application. Wiring only: what a web process does when it starts (the torch
threads, the models' warm-up, the jobs left queued) is ``annotation.startup``."""

import os

from django.core.wsgi import get_wsgi_application

from annotation.startup import start_web_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
application = get_wsgi_application()
start_web_process()
