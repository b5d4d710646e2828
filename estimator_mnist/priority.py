"""CPU priority of the evaluator, without TensorFlow (the launcher applies it before exec)."""

from __future__ import annotations

import os


def lower_cpu_priority(nice) -> str:
    """Lowers every thread of this process to SCHED_IDLE ('idle') or to a niceness; says what it did.

    Linux applies both per thread and new threads inherit from their creator,
    so the threads TensorFlow already started are changed one by one. With
    SCHED_IDLE the evaluator takes only CPU time the trainers leave unused
    (on 2 cores a niced evaluator still cost the trainers a third of their
    throughput), and once training ends it gets every core for the final
    evaluation.
    """
    threads = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    if nice == "idle" and hasattr(os, "SCHED_IDLE"):
        for tid in threads:
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError:
                pass  # the thread has ended
        return "SCHED_IDLE (runs only on cores that training leaves idle)"
    niceness = 19 if nice == "idle" else nice
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), niceness))
        except OSError:
            pass
    return f"nice {niceness}"
