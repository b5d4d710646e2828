"""A process-group leader that leaves a child behind: prints the child's pid and exits at once.

    python tests/process/group_probe.py          # the leader
    python tests/process/group_probe.py child    # what it starts: sleeps for a minute
"""

import subprocess
import sys
import time

if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        time.sleep(60)
    else:
        child = subprocess.Popen([sys.executable, __file__, "child"])
        print(child.pid, flush=True)
