"""Tests that check a model inside bubblewrap need it installed and able to create its
namespaces here: elsewhere they skip with the reason (a newcomer's machine), except
under CI (``CI=true``, where ``.ci/run`` installs it), where they run and fail."""

import os

import pytest

from ml.sandbox import sandbox_problem

#: Why a check cannot run in its sandbox on this machine, or None.
PROBLEM = sandbox_problem()

requires_bwrap = pytest.mark.skipif(
    PROBLEM is not None and os.environ.get("CI") != "true",
    reason=f"needs bubblewrap (Debian or Ubuntu: apt-get install bubblewrap): {PROBLEM}",
)
