"""The TensorFlow process of a task: `python -m estimator_mnist.tf_task --ready-fd N`, its TaskSpec on stdin.

`train` (supervise/task_parent.py) starts it and writes the task's spec, as JSON, to
its stdin. The spec is all it takes: it never reads the YAML, argv flags or
the TF_CONFIG `train` was started with. It applies the spec's plan, sets the
TF_CONFIG that Estimator's RunConfig reads from the spec alone, and only
then imports TensorFlow. `--ready-fd` is not input: it is the pipe on which
it tells its parent that its training session exists.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

from estimator_mnist.errors import (FAILURE_EXIT_CODE, INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE, USAGE_EXIT_CODE,
                                    PermanentFailure, RetryableFailure, UsageError)
from estimator_mnist.plan.cpu import priority_now
from estimator_mnist.plan.task_spec import TaskSpec, spec_from_json

SPEC_SOURCE = "the TaskSpec on stdin"


def set_tf_config(spec: TaskSpec, environ=os.environ) -> None:
    """The one place a task's TF_CONFIG is set: from its spec, replacing whatever the process inherited."""
    if spec.tf_config is None:
        environ.pop("TF_CONFIG", None)  # one process, no cluster
    else:
        environ["TF_CONFIG"] = json.dumps(spec.tf_config)


def run(spec: TaskSpec, ready_fd: int) -> int:
    """Runs TensorFlow; a failure ends the process at once (TensorFlow's threads could hold up a normal exit)."""
    # `train` applied the plan (env, cores, umask, priority) before it started this process, which inherits it.
    priority = priority_now()
    set_tf_config(spec)
    # Python's cyclic garbage collector would scan every object TensorFlow's import creates, over and over
    # while their number grows, and free almost none: over a third of the import's time (docs/performance.md,
    # "What makes it fast"). run_task turns it back on. Pinned by tests/unit/test_startup_gc.py.
    gc.disable()
    from estimator_mnist.tf_task.runner import run_task  # pylint: disable=import-outside-toplevel
    from estimator_mnist.tf_task.teardown import exit_now  # pylint: disable=import-outside-toplevel

    try:
        return run_task(spec, priority, ready_fd)
    except UsageError as exc:  # bad input found only now (MNIST not prepared in data_dir): one line, exit 2
        print(f"estimator-mnist: error: {exc}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE
    except RetryableFailure as exc:
        exit_now(f"error: {exc}", RETRYABLE_EXIT_CODE)
    except PermanentFailure as exc:
        exit_now(f"error: {exc}", FAILURE_EXIT_CODE)
    return FAILURE_EXIT_CODE  # not reached: exit_now does not return


def main(argv=None, stdin=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator_mnist.tf_task",
                                     description="a task's TensorFlow process; started by `estimator-mnist train`")
    parser.add_argument("--ready-fd", type=int, required=True, help="the pipe to report the training session on")
    args = parser.parse_args(argv)
    try:
        spec = spec_from_json((stdin or sys.stdin).read(), SPEC_SOURCE)
    except UsageError as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    return run(spec, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
