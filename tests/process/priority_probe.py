"""Run as a script by test_cpu.py: lower this process's CPU priority with a thread already running.

usage: python priority_probe.py idle|NICENESS
Prints what lower_cpu_priority said, then the scheduling policies and the nicenesses of all its threads.
"""

import os
import sys
import threading

from estimator_mnist.plan.cpu import lower_cpu_priority


def main(setting: str) -> int:
    # A thread first: the priority must reach threads that already exist, not only new ones.
    ready, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (ready.set(), done.wait()))
    worker.start()
    ready.wait()
    said = lower_cpu_priority(setting if setting == "idle" else int(setting))
    later = threading.Thread(target=done.wait)
    later.start()
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    print(said)
    print(sorted({os.sched_getscheduler(t) for t in tids}))
    print(sorted({os.getpriority(os.PRIO_PROCESS, t) for t in tids}))
    done.set()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
