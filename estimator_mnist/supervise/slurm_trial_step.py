"""A sweep trial's srun step inside its Slurm array task: started, signalled, stopped; the array task requeued.

The array task (sweep/array_task.py) plans the trial's TaskSpec and hands
over `train --spec` as `argv`; this runs it as a one-task srun step in the
array task's allocation, appending to the trial's log, so that the trial is
one process that Slurm can signal like any of its tasks. Signals go through
scancel to the job's steps only, never to the batch shell that runs this.
No TensorFlow.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from estimator_mnist.plan.task_spec import spec_environment
from estimator_mnist.supervise.slurm_job_state import job_fields, verdict


def own_cpus(environ: Mapping[str, str]) -> Optional[int]:
    """The CPUs Slurm gave the array task (--cpus-per-task), or None."""
    text = environ.get("SLURM_CPUS_PER_TASK", "")
    return int(text) if text.isdigit() else None


def gpus_from_slurm(environ: Mapping[str, str]) -> bool:
    """Slurm gave the array task GPUs and set CUDA_VISIBLE_DEVICES to them."""
    return environ.get("CUDA_VISIBLE_DEVICES") is not None and \
        any(environ.get(v) for v in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_PER_TASK"))


class TrialStep:
    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ
        self.job = environ.get("SLURM_JOB_ID") or "?"
        self.popen: Optional[subprocess.Popen] = None

    def command(self, argv: List[str], log_path: Path) -> List[str]:
        cpus = own_cpus(self.environ)
        return ["srun", "--ntasks=1", "--nodes=1", *([f"--cpus-per-task={cpus}"] if cpus else []),
                "--kill-on-bad-exit=1", f"--output={log_path}", "--open-mode=append", *argv]

    def start(self, argv: List[str], log_path: Path) -> None:
        """`argv` as the step's one task; TF_CONFIG left out, as for every task started from a spec."""
        self.popen = subprocess.Popen(self.command(argv, log_path), stdin=subprocess.DEVNULL,
                                      env=spec_environment(self.environ))

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return self.popen.returncode if self.popen is not None else None

    def wait_once(self, secs: float) -> bool:
        """Sleeps `secs`; True while the step still runs."""
        time.sleep(secs)
        return self.running

    def ask_to_stop(self) -> None:
        """SIGTERM to this job's steps (not to its batch shell): the trial stops at a saved step. A second one, 2 s
        or more later, ends its TensorFlow process at once (task_parent.py)."""
        subprocess.run(["scancel", "--signal=TERM", self.job], check=False, capture_output=True)

    def stop(self, grace_secs: float) -> None:
        """Ends the step: SIGTERM, then SIGTERM again after `grace_secs`, then waits for it."""
        self.ask_to_stop()
        deadline = time.monotonic() + grace_secs
        while self.running and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.running:
            self.ask_to_stop()
        self.popen.wait()

    def stop_verdict(self) -> Tuple[str, str]:
        """After a SIGTERM to the array task: cancelled, or warned of its end (slurm_job_state.py)."""
        return verdict(job_fields(self.job))

    def requeue(self) -> Tuple[bool, str]:
        """`scontrol requeue` of this array task: (done, scontrol's error)."""
        result = subprocess.run(["scontrol", "requeue", self.job], check=False, capture_output=True, text=True)
        return result.returncode == 0, result.stderr.strip()
