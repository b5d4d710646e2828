"""Debian packages that some tests need (Slurm's daemons, Chromium and its driver), installed on first use.

CI runs as root on a Debian machine that reaches the package registry, so a
missing package is installed there, never skipped: `.ci/run` exports CI=1 and
a test that still lacks what it needs fails with the reason. Elsewhere (not
root, no apt-get) such a test is skipped, and the skip names the packages.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from typing import Iterable, List

APT_TIMEOUT_SECS = 900


def missing_packages(packages: Iterable[str]) -> List[str]:
    """The packages dpkg does not list as installed."""
    missing = []
    for package in packages:
        result = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
        if result.returncode != 0 or "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def _apt_install(packages: List[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *packages], capture_output=True,
                          text=True, env=env, timeout=APT_TIMEOUT_SECS)


def install_debian_packages(packages: Iterable[str]) -> str:
    """Installs what is missing of `packages`; returns '' on success, else why it could not.

    One install at a time on the machine: the e2e tier's two workers may both need packages at once, and a
    second apt-get would fail on dpkg's lock instead of waiting for it."""
    with open(__file__, "rb") as lock:  # this file is the lock: nothing to create, nothing left behind
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_missing(packages)


def _install_missing(packages: Iterable[str]) -> str:
    missing = missing_packages(packages) if shutil.which("dpkg-query") else list(packages)
    if not missing:
        return ""
    if not shutil.which("apt-get") or os.geteuid() != 0:
        return f"needs the Debian packages {' '.join(missing)} (apt-get as root installs them)"
    result = _apt_install(missing)
    if result.returncode != 0:  # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update"], capture_output=True, text=True, timeout=APT_TIMEOUT_SECS,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        result = _apt_install(missing)
    if result.returncode != 0:
        tail = " ".join(result.stderr.strip().splitlines()[-1:])
        return f"apt-get install {' '.join(missing)} failed ({result.returncode}): {tail}"
    return ""


def require_debian_packages(*packages: str) -> None:
    """Installs the packages if they are missing; skips the test where it cannot, and fails it in CI."""
    import pytest  # pylint: disable=import-outside-toplevel

    reason = install_debian_packages(packages)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; in CI this is a failure, not a skip")
        pytest.skip(reason)
