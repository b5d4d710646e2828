#!/usr/bin/env bash
# Run the test suite, fastest tier first, stopping at the first tier that fails:
#   tests/unit     no real MNIST, no processes (about a minute and a half on 2 cores)
#   tests/process  the launcher and the CLI with stand-in tasks, network namespaces
#   tests/e2e      real TensorFlow clusters on loopback with real MNIST (prepared on first use)
#
#   ./run_tests.sh                    # every tier, in that order
#   ./run_tests.sh -k restart         # every tier, with these pytest options
#   ./run_tests.sh tests/unit         # arguments that start with a path go to pytest (a tier with its workers)
# Sets up .venv with the dev extra on first use.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
ensure_venv dev

run_pytest() {
  local status=0
  python -m pytest "$@" || status=$?
  if [ "$status" -eq 5 ]; then
    echo "error: pytest collected no tests for: $*" >&2
    return 1
  fi
  return "$status"
}

# The unit and process tiers run one test per core, at most 4 (pytest-xdist): their tests share no port, process
# or file (2026-11-26, Zen 4: process 264 s -> 135 s on 2 cores; unit 113 s -> 91 s). More workers than cores
# did not pay (Xeon family 6 model 207, 2026-11-28): the unit tier took 125 s on 4 against 121 s on 2; the process
# tier 151 s on 4 against 218 s, but two of its tests failed in one of three runs, their servers too slow under
# the load to answer in their windows. The e2e tier runs two at once, a module (the Slurm modules together) on
# one worker (tests/e2e/conftest.py): one at a time it kept the 2 cores 45% idle while tests waited on Slurm, a
# stall or a lost peer; a third worker kept them 91% busy and saved only 50 of 1,165 s.
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -gt 4 ] && workers=4
tier_options() {
  case "$1" in
    tests/unit|tests/process) [ "$workers" -gt 1 ] && echo "-n $workers" ;;
    tests/e2e) [ "$workers" -gt 1 ] && echo "-n 2 --dist loadscope" ;;
  esac
  return 0
}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  # A tier named first (`./run_tests.sh tests/e2e -k slurm`) runs with its workers, as in the full suite (a
  # later `-n 0` wins); a file or a test runs one test at a time.
  # shellcheck disable=SC2046  # the options are words
  run_pytest "$1" $(tier_options "${1%/}") "${@:2}"
  exit $?
fi
for tier in tests/unit tests/process tests/e2e; do
  echo "=== $tier" >&2
  started=$SECONDS
  # shellcheck disable=SC2046  # the options are words
  if ! run_pytest "$tier" $(tier_options "$tier") "$@"; then
    echo "error: $tier failed; later tiers were not run" >&2
    exit 1
  fi
  echo "=== $tier passed in $((SECONDS - started)) s" >&2
done
