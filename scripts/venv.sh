# Sourced by run_local.sh and run_tests.sh: create or reuse .venv in the repo and
# install the package into it, pinned by constraints.txt. Reinstalls only when
# setup.cfg or constraints.txt change.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ESTIMATOR_MNIST_VENV:-$REPO/.venv}"

pick_python() {
  # TensorFlow 2.15, the last release with tf.estimator, has wheels for Python 3.9-3.11 only.
  local candidate
  for candidate in ${PYTHON:-} python3.11 python3.10 python3.9 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "error: estimator_mnist needs Python 3.9, 3.10 or 3.11 (TensorFlow 2.15 has no wheels for newer ones);" \
       "found: $(python3 --version 2>&1 || echo 'no python3'). Install python3.11 or set PYTHON=/path/to/python3.11" >&2
  return 2
}

ensure_venv() {
  local extras="${1:-}" python stamp
  if [ ! -x "$VENV/bin/python" ] ||
     ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else 1)' 2>/dev/null; then
    python="$(pick_python)" || exit 2
    echo "creating virtual environment $VENV with $($python --version 2>&1)" >&2
    rm -rf "$VENV"
    "$python" -m venv "$VENV"
  fi
  local hash
  hash="$(cat "$REPO/setup.cfg" "$REPO/constraints.txt" | sha256sum | cut -c1-16)"
  stamp="$VENV/.installed-$hash${extras:+-$extras}"
  # An install with the dev extra also serves run_local.sh, which needs no extra.
  if [ ! -f "$stamp" ] && { [ -n "$extras" ] || [ ! -f "$VENV/.installed-$hash-dev" ]; }; then
    echo "installing estimator_mnist${extras:+[$extras]} and its pinned dependencies into $VENV (first time: a few minutes)" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=23" setuptools wheel
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      -c "$REPO/constraints.txt" -e "$REPO${extras:+[$extras]}"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
}
