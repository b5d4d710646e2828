"""The product's own lines in a task's log: `[estimator-mnist] ...` on stderr, flushed at once. No TensorFlow."""

import sys

PREFIX = "[estimator-mnist]"


def log(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)
