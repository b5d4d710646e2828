"""Which device each trial runs on: a GPU of its own, or a disjoint set of CPU cores. No TensorFlow.

A CPU trial is pinned to its cores (sched_setaffinity before exec), and its
task plan sizes TensorFlow's thread pools from that affinity (cpu.py), so
parallel trials never compete for a core. The cores per trial stay the same
whatever the parallelism, so `--parallel 1` is the fair sequential baseline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from estimator_mnist.plan.cpu import usable_cpus
from estimator_mnist.errors import UsageError

ERR_DEVICE = ("--devices {text!r}: {item!r} is not a device; write GPUs as gpu:0,gpu:1 or core sets as "
              "cpu:0-1,cpu:2-3 (cpu:N for one core, cpu:0+2 for cores apart)")
ERR_MIXED = "--devices {text!r}: mixes GPUs and CPU cores; give one kind"
ERR_OVERLAP = "--devices {text!r}: {first} and {second} share core(s) {shared}; give each trial its own cores"
ERR_DUPLICATE_GPU = "--devices {text!r}: gpu:{index} is given twice"
ERR_NOT_ALLOWED = ("--devices {text!r}: core(s) {cores} are not available to this process (it may use {allowed}); "
                   "pick cores from that set")
ERR_CORES_SIZE = ("--devices {text!r}: {device} has {size} core(s) but --cores-per-trial is {cores}; make every set "
                  "{cores} core(s) or change --cores-per-trial")
ERR_TOO_FEW_CORES = ("--cores-per-trial {cores}: this process may use only {count} core(s) ({allowed}); use "
                     "--cores-per-trial {count} or less")
ERR_PARALLEL = ("--parallel {parallel}: there are only {count} device(s) ({devices}) for one trial each; use "
                "--parallel {count} or less, or give more devices (--devices, --cores-per-trial)")


@dataclass(frozen=True)
class Device:
    kind: str                       # "cpu" or "gpu"
    cores: Tuple[int, ...] = ()     # the CPU cores of a cpu device
    gpu: Optional[int] = None       # the GPU index (CUDA_VISIBLE_DEVICES) of a gpu device

    def __str__(self) -> str:
        if self.kind == "gpu":
            return f"gpu:{self.gpu}"
        low, high = self.cores[0], self.cores[-1]
        contiguous = list(self.cores) == list(range(low, high + 1))
        return f"cpu:{low}" if low == high else f"cpu:{low}-{high}" if contiguous else \
            "cpu:" + "+".join(map(str, self.cores))


def visible_gpus(environ: Mapping[str, str] = os.environ, driver_dir: str = "/proc/driver/nvidia/gpus") -> List[int]:
    """GPU indices this machine shows to CUDA, without loading TensorFlow (the NVIDIA driver's /proc entries)."""
    mask = environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:
        indices = [part.strip() for part in mask.split(",") if part.strip()]
        valid = []
        for part in indices:  # CUDA stops at the first invalid index
            if not part.isdigit():
                break
            valid.append(int(part))
        return valid
    try:
        return list(range(len(os.listdir(driver_dir))))
    except OSError:
        return []


def _parse_one(text: str, item: str) -> Device:
    kind, _, spec = item.strip().partition(":")
    error = UsageError(ERR_DEVICE.format(text=text, item=item))
    if kind == "gpu" and spec.isdigit():
        return Device("gpu", gpu=int(spec))
    if kind != "cpu":
        raise error
    if "+" in spec and all(part.isdigit() for part in spec.split("+")):
        return Device("cpu", cores=tuple(sorted({int(part) for part in spec.split("+")})))
    low, dash, high = spec.partition("-")
    if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
        raise error
    return Device("cpu", cores=tuple(range(int(low), int(high if dash else low) + 1)))


def parse_devices(text: str, cores_per_trial: Optional[int], allowed: Sequence[int]) -> List[Device]:
    devices = [_parse_one(text, item) for item in text.split(",")]
    if len({d.kind for d in devices}) > 1:
        raise UsageError(ERR_MIXED.format(text=text))
    seen_gpus, taken = set(), {}
    for device in devices:
        if device.kind == "gpu":
            if device.gpu in seen_gpus:
                raise UsageError(ERR_DUPLICATE_GPU.format(text=text, index=device.gpu))
            seen_gpus.add(device.gpu)
            continue
        outside = sorted(set(device.cores) - set(allowed))
        if outside:
            raise UsageError(ERR_NOT_ALLOWED.format(text=text, cores=",".join(map(str, outside)),
                                                    allowed=_cores_text(allowed)))
        if cores_per_trial is not None and len(device.cores) != cores_per_trial:
            raise UsageError(ERR_CORES_SIZE.format(text=text, device=device, size=len(device.cores),
                                                   cores=cores_per_trial))
        for core in device.cores:
            if core in taken:
                raise UsageError(ERR_OVERLAP.format(text=text, first=taken[core], second=device, shared=core))
            taken[core] = device
    return devices


def _cores_text(cores: Sequence[int]) -> str:
    return ",".join(map(str, cores))


def default_devices(cores_per_trial: int, allowed: Sequence[int], gpus: Sequence[int]) -> List[Device]:
    """One device per GPU; without GPUs, the available cores cut into sets of `cores_per_trial`."""
    if gpus:
        return [Device("gpu", gpu=index) for index in gpus]
    allowed = sorted(allowed)
    if cores_per_trial > len(allowed):
        raise UsageError(ERR_TOO_FEW_CORES.format(cores=cores_per_trial, count=len(allowed),
                                                  allowed=_cores_text(allowed)))
    count = len(allowed) // cores_per_trial
    return [Device("cpu", cores=tuple(allowed[i * cores_per_trial:(i + 1) * cores_per_trial])) for i in range(count)]


def choose_devices(devices_text: Optional[str], cores_per_trial: Optional[int], parallel: Optional[int],
                   allowed: Optional[Sequence[int]] = None, gpus: Optional[Sequence[int]] = None) -> List[Device]:
    """The devices the sweep runs on, one trial each: `parallel` of them (default: all)."""
    allowed = list(usable_cpus()) if allowed is None else list(allowed)
    gpus = visible_gpus() if gpus is None else list(gpus)
    if devices_text:
        devices = parse_devices(devices_text, cores_per_trial, allowed)
    else:
        devices = default_devices(cores_per_trial or 1, allowed, [] if cores_per_trial else gpus)
    if parallel is not None and parallel > len(devices):
        raise UsageError(ERR_PARALLEL.format(parallel=parallel, count=len(devices),
                                             devices=", ".join(map(str, devices))))
    return devices[:parallel] if parallel else devices
