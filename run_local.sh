#!/usr/bin/env bash
# Train, evaluate and export the MNIST CNN on a local cluster.
#   ./run_local.sh                                   # config/local.yaml: chief + worker + evaluator
#   ./run_local.sh config/FILE.yaml                  # any other cluster file
#   ./run_local.sh config/FILE.yaml --quiet --set training.max_steps=300
# Sets up .venv on first use, prepares MNIST once per machine, then launches
# every task of the file and supervises them until they all exit.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
ensure_venv

config="${1:-config/local.yaml}"
[ $# -gt 0 ] && shift
# validate and prepare-data take the same flags as launch, except --quiet.
flags=()
for arg in "$@"; do
  [ "$arg" = "--quiet" ] || flags+=("$arg")
done
estimator-mnist validate --cluster "$config" ${flags[@]+"${flags[@]}"} >/dev/null
estimator-mnist prepare-data --cluster "$config" ${flags[@]+"${flags[@]}"}
exec estimator-mnist launch --cluster "$config" "$@"
