"""`make run HOST=0.0.0.0` with DEBUG on would serve tracebacks, settings and code to
anyone who reaches the address: the serving targets refuse it before they install,
migrate or write anything (`make -n` shows what they would run without running it)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def dry_run(*args, **env_vars):
    # Run as a make of its own, not a sub-make of `make test` (which would print its
    # "Entering directory" lines).
    env = {k: v for k, v in os.environ.items()
           if k not in {"DEBUG", "HOST", "ALLOW_PUBLIC_DEBUG", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}}
    env.update(env_vars)
    return subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args", [("run", "HOST=0.0.0.0"), ("HOST=0.0.0.0",), ("serve", "HOST=192.0.2.10"),
                                  ("services", "HOST=::"), ("run", "HOST=0.0.0.0", "DEBUG=yes")])
def test_debug_pages_on_a_public_address_are_refused(args):
    refused = dry_run(*args)
    assert refused.returncode != 0
    assert "Refusing to serve DEBUG pages on the public address" in refused.stderr
    assert "ALLOW_PUBLIC_DEBUG=1" in refused.stderr
    assert refused.stdout == ""  # nothing would have run: not the install, not the migrations


def test_loopback_debug_an_explicit_override_and_debug_off_are_served():
    for args in [("run",), ("serve", "HOST=[::1]"), ("run", "HOST=0.0.0.0", "ALLOW_PUBLIC_DEBUG=1"),
                 ("serve", "HOST=0.0.0.0", "DEBUG=false"), ("test", "HOST=0.0.0.0")]:
        result = dry_run(*args)
        assert result.returncode == 0, (args, result.stderr)
    assert "runserver 0.0.0.0:8000" in dry_run("serve", "HOST=0.0.0.0", "ALLOW_PUBLIC_DEBUG=1").stdout


def test_debug_from_the_environment_counts_too():
    assert dry_run("run", HOST="0.0.0.0", DEBUG="1").returncode != 0
