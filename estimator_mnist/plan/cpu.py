"""This machine's CPUs, without TensorFlow: cores, bfloat16 support, and a process's CPU priority."""

from __future__ import annotations

import os
import platform
import psutil

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def usable_cpus() -> tuple:
    """The CPUs this process may run on (its affinity, e.g. a sweep trial's or a container's cores)."""
    return tuple(sorted(psutil.Process().cpu_affinity() or range(psutil.cpu_count() or 1)))


def pin_to(cpus) -> None:
    """Pins this process to `cpus`; TensorFlow's threads, started later, and child processes inherit it."""
    psutil.Process().cpu_affinity(list(cpus))


def cpuinfo(cpuinfo_path: str) -> dict:
    """The first processor's fields of /proc/cpuinfo (psutil reports neither the flags nor the model)."""
    fields = {}
    try:
        with open(cpuinfo_path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _flags(cpuinfo_path: str) -> set:
    """The first processor's CPU flags."""
    return set(cpuinfo(cpuinfo_path).get("flags", "").split())


def cpu_has_bfloat16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bfloat16 natively (AMX or AVX512_BF16); emulated, it is slower than float32."""
    return not _flags(cpuinfo_path).isdisjoint(BF16_CPU_FLAGS)


def is_x86() -> bool:
    """Whether this is an x86-64 machine, the only kind TF 2.15's wheels have oneDNN's x86 kernels for."""
    return platform.machine().lower() in ("x86_64", "amd64")


# How lower_cpu_priority and priority_now say SCHED_IDLE: the task's log line, whichever process wrote it.
IDLE_PRIORITY = "SCHED_IDLE (runs only on cores that training leaves idle)"
# Every task is a session of its own (supervise/process_group.start_task); where the kernel groups sessions
# (sched_autogroup_enabled=1, Debian's default) it first shares the cores between the groups as equals, whatever
# their threads' policy, so SCHED_IDLE ranks the evaluator's threads only against each other. Lowering the group
# too (nice 19 in /proc/self/autogroup) was measured slower (docs/performance.md, "What was tried and not kept").
IDLE_IN_AUTOGROUP = "SCHED_IDLE within its session, whose autogroup shares the cores with the trainers' as an equal"
AUTOGROUP_ENABLED = "/proc/sys/kernel/sched_autogroup_enabled"


def idle_priority(enabled_path: str = AUTOGROUP_ENABLED) -> str:
    """What SCHED_IDLE does for this process on this kernel, as the task's log line says it."""
    try:
        with open(enabled_path, encoding="ascii") as handle:
            grouped = handle.read().strip() == "1"
    except OSError:
        grouped = False  # no such switch: no autogroups
    return IDLE_IN_AUTOGROUP if grouped else IDLE_PRIORITY


def lower_cpu_priority(nice) -> str:
    """Lowers every thread of this process to SCHED_IDLE ('idle') or to a niceness; says what it did.

    Linux applies both per thread and new threads inherit from their creator,
    so the threads TensorFlow already started are changed one by one. With
    SCHED_IDLE the evaluator takes only CPU time the trainers leave unused
    (on 2 cores an evaluator at nice 10 still cost the trainers about a third
    of their throughput), and once training ends it runs at full speed; on a
    kernel with autogroups its session still gets an equal share beside the
    trainers' (IDLE_IN_AUTOGROUP).
    """
    threads = [t.id for t in psutil.Process().threads()]
    if nice == "idle" and hasattr(os, "SCHED_IDLE"):
        for tid in threads:
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except OSError:
                pass  # the thread has ended
        return idle_priority()
    niceness = 19 if nice == "idle" else nice
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), niceness))
        except OSError:
            pass
    return f"nice {niceness}"


def priority_now() -> str:
    """This process's CPU priority as lower_cpu_priority describes it: what a process started by one that
    lowered its own priority inherits (a task's TensorFlow process, from `train`)."""
    if hasattr(os, "SCHED_IDLE") and os.sched_getscheduler(0) == os.SCHED_IDLE:
        return idle_priority()
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    return f"nice {niceness}" if niceness > 0 else "unchanged"
