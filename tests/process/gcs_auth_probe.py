"""google-auth's search for credentials in a process of its own (NO_GCE_CHECK is read once, when google-auth is
imported): `python -m tests.process.gcs_auth_probe` prints RESULT and what google.auth.default() gave or raised."""

from __future__ import annotations

import sys

import google.auth
from google.auth.exceptions import DefaultCredentialsError


def main() -> int:
    try:
        credentials, _ = google.auth.default()
        print(f"RESULT credentials {type(credentials).__name__}", flush=True)
    except DefaultCredentialsError as error:
        print(f"RESULT no credentials: {str(error)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
