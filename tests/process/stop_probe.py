"""Run by test_task_parent.py as a task's TensorFlow process that gets stopped by a signal (SIGSTOP), as a user or
a debugger would stop it.

  python -m tests.process.stop_probe                 # stops itself after 0.3 s, for ever
  python -m tests.process.stop_probe SECS            # stops itself; a helper continues it after SECS, then it exits 0
  python -m tests.process.stop_probe --continue PID SECS   # the helper: SIGCONT to PID after SECS
"""

import os
import signal
import subprocess
import sys
import time


def main(argv) -> int:
    if argv[:1] == ["--continue"]:
        time.sleep(float(argv[2]))
        os.kill(int(argv[1]), signal.SIGCONT)
        return 0
    time.sleep(0.3)
    if argv:
        subprocess.Popen([sys.executable, "-m", "tests.process.stop_probe", "--continue", str(os.getpid()), argv[0]])
    os.kill(os.getpid(), signal.SIGSTOP)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
