"""After a SIGTERM to a Slurm batch shell: was the job cancelled, or warned of its end? Slurm's own state says.

A plain `scancel JOB` (or of an array task, `scancel JOB_INDEX`) sends SIGTERM to the batch shell and every
step, exactly as a preemption's grace, a time limit's warning (`--signal=B:TERM@N`) or `scancel --batch
--signal=TERM` do; only the job's state in slurmctld tells them apart. Slurm 22.05 marks a cancelled job
JOB_CANCELLED|JOB_COMPLETING before it signals anything (src/slurmctld/job_mgr.c, _job_signal), and
`scontrol show job` shows that as JobState=COMPLETING with Reason=None (JobState=CANCELLED once the batch
shell is gone), while a warning leaves the job RUNNING. A cancelled job must not be requeued: slurmctld
accepts `scontrol requeue` of a completing job (job_mgr.c, _job_requeue_op) and would run it again. A job
ended by its time limit or a preemption (Reason=TimeLimit, a PreemptTime) is requeued, as before; one that
Slurm requeues itself (PreemptMode=REQUEUE: PENDING, REQUEUED) is left to it; a state that cannot be read
(slurmctld unreachable) requeues, the old behaviour, saying so.

`python -m estimator_mnist.supervise.slurm_job_state JOB` prints the verdict's word and why, for the batch
script; the sweep's array task calls `verdict` directly. No TensorFlow.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Callable, Dict, Optional, Tuple

from estimator_mnist.config import timeouts

CANCELLED, REQUEUE, SLURM_REQUEUES = "cancelled", "requeue", "slurm-requeues"
WARNED = ("RUNNING", "SUSPENDED", "CONFIGURING", "SIGNALING", "RESIZING", "STAGE_OUT")
REQUEUED_BY_SLURM = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
ENDED_BY_SLURM = ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "DEADLINE", "BOOT_FAIL", "OUT_OF_MEMORY")


def job_fields(job_id: str, run: Callable = subprocess.run) -> Optional[Dict[str, str]]:
    """`scontrol -o show job JOB` as a dict, or None when it cannot be read."""
    try:
        result = run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True, check=False,
                     timeout=timeouts.SLURM_SCONTROL_SECS)
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(item.split("=", 1) for item in result.stdout.split() if "=" in item)
    return fields if result.returncode == 0 and "JobState" in fields else None


def verdict(fields: Optional[Dict[str, str]]) -> Tuple[str, str]:
    """(CANCELLED, REQUEUE or SLURM_REQUEUES, why) for a job whose batch shell got SIGTERM."""
    if fields is None:
        return REQUEUE, "its state could not be read from scontrol: taken for a preemption"
    state, reason = fields.get("JobState", "?"), fields.get("Reason", "None")
    preempted = fields.get("PreemptTime", "None") not in ("None", "Unknown", "")
    seen = f"JobState={state} Reason={reason}"
    if state in WARNED:
        return REQUEUE, f"{seen}: a warning of its end (preemption, time limit, scancel --batch --signal)"
    if state in REQUEUED_BY_SLURM:
        return SLURM_REQUEUES, f"{seen}: Slurm requeues it itself"
    if state in ENDED_BY_SLURM or reason == "TimeLimit" or preempted:
        return REQUEUE, f"{seen}: ended by Slurm (time limit or preemption)"
    return CANCELLED, f"{seen}: cancelled (scancel)"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    word, why = verdict(job_fields(args[0]))
    print(f"{word} {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
