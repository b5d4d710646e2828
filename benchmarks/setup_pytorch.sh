#!/usr/bin/env bash
# Make the PyTorch virtual environment for the DDP reference (benchmarks/ddp_reference.py):
#   benchmarks/setup_pytorch.sh            # creates .venv-torch beside .venv, once
# It is kept apart from the package's .venv on purpose: PyTorch is no dependency of
# estimator_mnist, and CI never installs it. The CPU build of torch is pinned, because
# an unpinned torch pulls several GB of CUDA packages. Override the pin with TORCH_SPEC.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/venv.sh"
TORCH_VENV="${ESTIMATOR_MNIST_TORCH_VENV:-$REPO/.venv-torch}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
NUMPY_SPEC="$(grep -i '^numpy==' "$REPO/constraints.txt" || echo numpy)"

if [ ! -x "$TORCH_VENV/bin/python" ]; then
  python="$(pick_python)" || exit 2
  echo "creating $TORCH_VENV with $($python --version 2>&1)" >&2
  "$python" -m venv "$TORCH_VENV"
fi
if ! "$TORCH_VENV/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  echo "installing $TORCH_SPEC and $NUMPY_SPEC into $TORCH_VENV" >&2
  "$TORCH_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC" "$NUMPY_SPEC" || {
    echo "error: could not install $TORCH_SPEC into $TORCH_VENV; set TORCH_SPEC to a CPU build your index has (for example torch==2.5.1+cpu)" >&2
    exit 2
  }
fi
"$TORCH_VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "in", __import__("sys").prefix)'
