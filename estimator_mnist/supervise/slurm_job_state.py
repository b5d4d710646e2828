"""What Slurm did to a job whose step stopped or whose batch shell got SIGTERM: Slurm's own fields say.

The signals alone tell nothing apart. Slurm 22.05 (read from src/slurmctld/job_mgr.c and preempt.c, seen on
the test cluster):
- a plain `scancel` marks the job CANCELLED|COMPLETING, then SIGTERMs the batch shell and every step
  (`scontrol show job` prints JobState=COMPLETING);
- a preemption sets PreemptTime and, with a GraceTime, SIGTERMs the *steps* only (the batch shell too only
  with PreemptParameters=send_user_signal, and then its --signal instead); at the grace's end Slurm requeues
  the job itself (PreemptMode=REQUEUE) or kills it (CANCEL);
- a requeue by Slurm (preemption at the grace's end, a node failure) or by an operator (`scontrol requeue`,
  `requeuehold`) makes the job PENDING|COMPLETING, also printed COMPLETING, and adds one to Restarts
  before anything is signalled (_job_requeue_op, kill_running_job_by_node_name); PreemptTime is kept until
  the job has completed (batch_requeue_fini). So Restarts above this run's SLURM_RESTART_COUNT means that
  Slurm has requeued the job already: another `scontrol requeue` would fail (ESLURM_JOB_PENDING);
- a time limit's warning (`--signal=B:TERM@N`) and `scancel --batch --signal=TERM` leave the job RUNNING.

`verdict` (pure) gives one word: RERUN (nothing of Slurm's: a user's `scancel --signal`, or a task failed),
REQUEUE (the script requeues the job: a warning of its end, or a preemption in REQUEUE mode, still within
its grace), PREEMPTED_CANCEL (preempted in CANCEL mode: the job ends, never requeued), SLURM_REQUEUED
(Slurm or an operator requeued it: it resumes by itself) or CANCELLED (final), and why, naming the event.
The facts are read from scontrol (`SlurmFacts`); a state that cannot be read requeues after a signal to
the batch shell and reruns otherwise (the old behaviour), saying so. No TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from estimator_mnist.config import timeouts

CANCELLED, REQUEUE, SLURM_REQUEUES = "cancelled", "requeue", "slurm-requeued"
SLURM_REQUEUED, RERUN, PREEMPTED_CANCEL = SLURM_REQUEUES, "rerun", "preempted-cancel"
WARNED = ("RUNNING", "SUSPENDED", "CONFIGURING", "SIGNALING", "RESIZING", "STAGE_OUT")
REQUEUED_BY_SLURM = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
ENDED_BY_SLURM = ("TIMEOUT", "NODE_FAIL", "DEADLINE", "BOOT_FAIL", "OUT_OF_MEMORY")
HELD = ("JobHeldUser", "JobHeldAdmin")
NODE_DOWN = ("DOWN", "NOT_RESPONDING", "FAIL")  # a node state's words that make it lost to its jobs


def _scontrol(args: List[str], run: Callable) -> Optional[str]:
    try:
        result = run(["scontrol", *args], capture_output=True, text=True, check=False,
                     timeout=timeouts.SLURM_SCONTROL_SECS)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def _fields(line: str) -> Dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def job_fields(job_id: str, run: Callable = subprocess.run) -> Optional[Dict[str, str]]:
    """`scontrol -o show job JOB` as a dict, or None when it cannot be read."""
    fields = _fields(_scontrol(["-o", "show", "job", str(job_id)], run) or "")
    return fields if "JobState" in fields else None


def preempt_mode(partition: str, run: Callable = subprocess.run) -> Optional[str]:
    """The partition's PreemptMode as `scontrol show partition` prints it (REQUEUE, CANCEL, SUSPEND,GANG, OFF; the
    cluster's PreemptMode where the partition sets none), or None when it cannot be read."""
    return _fields(_scontrol(["-o", "show", "partition", partition], run) or "").get("PreemptMode")


def nodes_down(nodelist: str, run: Callable = subprocess.run) -> List[str]:
    """The nodes of `nodelist` (a hostlist) that Slurm holds lost: DOWN, NOT_RESPONDING or FAIL."""
    lines = (_scontrol(["-o", "show", "node", nodelist], run) or "").splitlines()
    states = [_fields(line) for line in lines]
    return [f"{s['NodeName']} {s.get('State')}" for s in states if "NodeName" in s
            and any(word in NODE_DOWN for word in s.get("State", "").replace("*", "+NOT_RESPONDING").split("+"))]


@dataclass(frozen=True)
class SlurmFacts:
    """What `verdict` may ask Slurm beyond the job's fields, read only when needed."""
    restart_count: Optional[int] = None  # this run's SLURM_RESTART_COUNT (None: not compared)
    mode_of: Callable[[str], Optional[str]] = lambda partition: None
    down_of: Callable[[str], List[str]] = lambda nodelist: []
    nodelist: str = ""

    @classmethod
    def from_slurm(cls, environ: Mapping[str, str], run: Callable = subprocess.run) -> "SlurmFacts":
        return cls(int(environ.get("SLURM_RESTART_COUNT") or 0), lambda p: preempt_mode(p, run),
                   lambda n: nodes_down(n, run), environ.get("SLURM_JOB_NODELIST", ""))


def _requeued_why(fields: Dict[str, str], facts: SlurmFacts, seen: str) -> str:
    if fields.get("Reason") in HELD:
        return f"{seen}: requeued and held (scontrol requeuehold): it resumes once released (scontrol release)"
    if fields.get("PreemptTime", "None") not in ("None", "Unknown", ""):
        return f"{seen}: preempted and requeued by Slurm at its grace time's end (PreemptMode=REQUEUE)"
    # This run's nodes, from the batch shell's environment: a requeued job's NodeList may already read (null).
    nodelist = facts.nodelist or fields.get("NodeList", "").replace("(null)", "")
    down = facts.down_of(nodelist) if nodelist else []
    if down:
        return f"{seen}: requeued by Slurm after a node failure ({', '.join(down)})"
    return f"{seen}: requeued by an operator (scontrol requeue)"


def verdict(fields: Optional[Dict[str, str]], facts: SlurmFacts = SlurmFacts(),
            signalled: bool = True) -> Tuple[str, str]:
    """(word, why) for a job whose step stopped with 200 or whose batch shell got SIGTERM (`signalled`)."""
    if fields is None:
        return (REQUEUE, "its state could not be read from scontrol: taken for a preemption") if signalled else \
            (RERUN, "its state could not be read from scontrol: the step runs again")
    state, reason = fields.get("JobState", "?"), fields.get("Reason", "None")
    restarts = int(fields.get("Restarts") or 0)
    preempted = fields.get("PreemptTime", "None") not in ("None", "Unknown", "")
    seen = f"JobState={state} Reason={reason} Restarts={restarts}"
    if facts.restart_count is not None and restarts > facts.restart_count:
        return SLURM_REQUEUED, _requeued_why(fields, facts, seen)
    if state in REQUEUED_BY_SLURM:
        return SLURM_REQUEUED, f"{seen}: Slurm requeues it itself"
    if preempted:
        partition = fields.get("Partition", "?")
        mode = facts.mode_of(partition) if facts.restart_count is not None else None
        if mode is not None and "REQUEUE" not in mode.split(",") and "CANCEL" in mode.split(","):
            return PREEMPTED_CANCEL, f"{seen}: preempted by Slurm (partition {partition}: PreemptMode={mode})"
        how = f"PreemptMode={mode}" if mode else "its PreemptMode unread: taken for REQUEUE"
        return REQUEUE, f"{seen}: preempted by Slurm (partition {partition}: {how})"
    if state in WARNED:
        if not signalled:
            return RERUN, f"{seen}: the steps were signalled (scancel --signal) or a task failed"
        return REQUEUE, f"{seen}: a warning of its end (time limit, scancel --batch --signal)"
    if state in ENDED_BY_SLURM or reason == "TimeLimit":
        return REQUEUE, f"{seen}: ended by Slurm (time limit)"
    return CANCELLED, f"{seen}: cancelled (scancel)"


def main(argv=None) -> int:
    """`python -m estimator_mnist.supervise.slurm_job_state JOB`: the word and why, for a look by hand."""
    import sys  # pylint: disable=import-outside-toplevel

    args = sys.argv[1:] if argv is None else argv
    word, why = verdict(job_fields(args[0]), SlurmFacts.from_slurm(os.environ))
    print(f"{word} {why}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
