"""Run by test_task_parent.py and test_cli.py as a task's TensorFlow process, for its start-up lines.

  python -m tests.process.startup_lines_probe tensorflow   # imports TensorFlow: its own start-up lines, on stderr
  python -m tests.process.startup_lines_probe CODE         # TensorFlow's five known start-up lines among OTHERS on
                                                           # stderr, a line on stdout, an unfinished last line, then
                                                           # exit CODE (a negative CODE: killed by that signal)
"""

import os
import sys

from tests.helpers import TF_STARTUP_LINES

OTHERS = ["2026-11-25 05:57:26.050802: I external/local_tsl/tsl/cuda/cudart_stub.cc:31] Could not find cuda drivers on "
          "your machine, GPU will not be used.",
          "2026-11-25 06:00:00.000001: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
          "BaseCollectiveExecutor::StartAbort UNAVAILABLE: failed to connect to all addresses",
          "[estimator-mnist] task evaluator:0 role=evaluator", "Traceback (most recent call last):",
          "2026-11-25 06:00:00,000 evaluator:0 INFO Saving dict for global step 60: accuracy = 0.97"]
LAST_WORDS = "last words, unfinished"


def main(argv) -> int:
    if argv[0] == "tensorflow":
        import tensorflow  # noqa: F401
        return 0
    sys.stderr.write("".join(line + "\n" for pair in zip(TF_STARTUP_LINES, OTHERS) for line in pair))
    sys.stderr.flush()
    print("on stdout", flush=True)
    sys.stderr.write(LAST_WORDS)
    sys.stderr.flush()
    code = int(argv[0])
    if code < 0:
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
