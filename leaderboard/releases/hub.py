"""Pushing a release's folder to the Hugging Face Hub: the one module that talks to it.

``push(folder, repo_id)`` runs ``hub_upload.py`` in a child process (the platform's
own processes keep the Hub offline: see that file) with the token from ``HF_TOKEN``
and the Hub's address from ``HF_ENDPOINT``. What can go wrong is said in words:
no token configured, the Hub unreachable (no network here), or the Hub refusing
(a bad token, a repository that is not yours); the release's folder stays written
either way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
UPLOADER = Path(__file__).with_name("hub_upload.py")
PUSH_SECONDS = 3600


class NotPushed(Exception):
    """The release was not pushed; the message says why and where the folder is."""


@dataclass(frozen=True)
class Pushed:
    url: str
    commit: str


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.match(repo_id or "") or ".." in repo_id:
        raise ValueError(f"{repo_id!r} is not a Hub repository id: write it as OWNER/NAME "
                         "(letters, digits, '.', '_' and '-').")
    return repo_id


def push(folder: Path, repo_id: str, *, message: str, private: bool = False) -> Pushed:
    """Upload ``folder`` to the data set repository ``repo_id`` (made if missing)."""
    check_repo_id(repo_id)
    token = settings.HF_TOKEN
    if not token:
        raise NotPushed(f"Not pushed to the Hub: no HF_TOKEN is configured. The release is written to {folder}; "
                        f"set HF_TOKEN (a write token) and push again, or upload that folder yourself.")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_TOKEN=token, HF_ENDPOINT=settings.HF_ENDPOINT, HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1")
    command = [sys.executable, "-P", str(UPLOADER), str(folder), repo_id, message]
    if private:
        command.append("--private")
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=PUSH_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise NotPushed(f"Not pushed: the upload to {settings.HF_ENDPOINT} took over {PUSH_SECONDS} s and was "
                        f"stopped. The release is written to {folder}.") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if done.returncode == 0 and answer.get("url"):
        return Pushed(url=answer["url"], commit=answer.get("commit", ""))
    if answer.get("kind") == "unreachable":
        raise NotPushed(f"Not pushed: the Hub at {settings.HF_ENDPOINT} cannot be reached ({answer['error']}). "
                        f"The release is written to {folder}; push it again where there is a network.")
    reason = answer.get("error") or (done.stderr.strip().splitlines() or ["no answer"])[-1]
    raise NotPushed(f"Not pushed: the Hub at {settings.HF_ENDPOINT} refused the upload ({reason}). "
                    f"The release is written to {folder}.")
