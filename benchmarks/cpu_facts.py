"""The facts a benchmark names beside its figures: the CPU's kind and model, whether TensorFlow turns oneDNN on by
itself, and how many of the usable CPUs share a core. The product needs none of them (estimator_mnist/plan/cpu.py
has what it plans with)."""

from __future__ import annotations

from typing import Optional

from estimator_mnist.plan.cpu import cpuinfo, is_x86, usable_cpus

# TF 2.15's Linux wheels compute with oneDNN's kernels only on x86 CPUs that have one of these
# (DefaultOneDnnPolicy in tensorflow/core/util/util.cc). Elsewhere, e.g. on an AVX2-only AMD EPYC, they
# fall back to Eigen kernels that the wheel builds without AVX2 or FMA.
TF_ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def _flags(cpuinfo_path: str) -> set:
    """The first processor's CPU flags."""
    return set(cpuinfo(cpuinfo_path).get("flags", "").split())


def tf_onednn_by_default(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether TensorFlow 2.15 turns oneDNN on by itself on this CPU (TF_ENABLE_ONEDNN_OPTS unset)."""
    return is_x86() and not _flags(cpuinfo_path).isdisjoint(TF_ONEDNN_DEFAULT_FLAGS)


def cpu_kind(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU kind the performance figures are given per: amx, avx512_bf16, avx512, avx2 or other."""
    flags = _flags(cpuinfo_path)
    for kind, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return kind
    return "other"


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The model name /proc/cpuinfo gives, e.g. 'AMD EPYC 9R14 96-Core Processor'."""
    return cpuinfo(cpuinfo_path).get("model name", "unknown")


def _cpu_list(text: str) -> set:
    """The CPUs a kernel list such as '0-1,4' names."""
    cpus = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def threads_per_core(cpus=None, sysfs: str = "/sys/devices/system/cpu") -> Optional[int]:
    """The most of `cpus` (default: the usable ones) that the kernel says share one core; None if it does not say.

    Two vCPUs that are two hardware threads of one core share its arithmetic units, so two workers on them
    can gain little over one. A virtual machine's topology may be wrong: benchmarks/core_sharing.py measures it.
    """
    cpus = set(usable_cpus() if cpus is None else cpus)
    most = 0
    for cpu in cpus:
        try:
            with open(f"{sysfs}/cpu{cpu}/topology/thread_siblings_list", encoding="utf-8") as handle:
                siblings = _cpu_list(handle.read())
        except (OSError, ValueError):
            return None
        most = max(most, len(siblings & cpus))
    return most or None
