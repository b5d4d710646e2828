#!/usr/bin/env bash
# Run the test suite (unit tests and a real two-worker cluster on loopback).
#   ./run_tests.sh              # everything
#   ./run_tests.sh -m 'not cluster'   # skip the multi-process tests
# Sets up .venv with the dev extra on first use; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
ensure_venv dev

set +e
python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
