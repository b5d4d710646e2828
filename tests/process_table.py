"""The processes of a launched run, found in the process table: each task's `train` process and its TensorFlow
child. For the tests and benchmarks that sample or signal them; the product supervises only the processes it
started (estimator_mnist/supervise/)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import psutil

from estimator_mnist.supervise.process_group import SPEC_SUFFIX
from estimator_mnist.tf_task import TF_PROCESS_MODULE


def descendants(pid: int) -> List[int]:
    """Every process whose ancestry leads to `pid`."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def task_of_command(cmdline: List[str]) -> Optional[str]:
    """The task ("chief:0") of a `train` process as `launch` starts it (`train --spec .../chief-0.spec.json`) or as
    started by hand (`train ... --task chief:0`); None for any other command line. For people and tools that
    look at the process table (benchmarks/soak.py, the fault-injection benchmark, the e2e tests)."""
    if "train" not in cmdline:
        return None
    for flag in ("--spec", "--task"):
        if flag in cmdline[:-1]:
            value = cmdline[cmdline.index(flag) + 1]
            if flag == "--task":
                return value
            name = Path(value).name
            if name.endswith(SPEC_SUFFIX) and "-" in name:
                role, index = name[:-len(SPEC_SUFFIX)].rsplit("-", 1)
                return f"{role}:{index}"
    return None


def tensorflow_processes(root_pid: int) -> Dict[str, psutil.Process]:
    """{task: its TensorFlow process} among the descendants of `root_pid` (a launcher): each the child of its
    task's `train` process. For the benchmarks and tests that signal or sample them."""
    found = {}
    for pid in descendants(root_pid):
        try:
            process = psutil.Process(pid)
            task = task_of_command(process.cmdline())
            if task is not None:
                found.update({task: c for c in process.children() if TF_PROCESS_MODULE in c.cmdline()})
        except psutil.Error:
            continue
    return found
