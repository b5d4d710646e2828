#!/usr/bin/env bash
# Train, evaluate and export the MNIST CNN on a local cluster.
#   ./run_local.sh                      # config/local.yaml: chief + worker + evaluator
#   ./run_local.sh config/FILE.yaml     # any other cluster file
#   ./run_local.sh config/FILE.yaml --quiet
# Sets up .venv on first use, prepares MNIST once per machine, then launches
# every task of the file and supervises them until they all exit.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
ensure_venv

config="${1:-config/local.yaml}"
[ $# -gt 0 ] && shift
estimator-mnist validate --cluster "$config" >/dev/null
estimator-mnist prepare-data --cluster "$config"
exec estimator-mnist launch --cluster "$config" "$@"
