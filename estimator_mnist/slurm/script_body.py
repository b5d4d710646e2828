"""The text of the batch script that batch_script.py fills in (a str.format template: bash's braces doubled)."""

BODY = """\
#!/bin/bash
# Written by `estimator-mnist slurm --cluster {file}`; submit it with sbatch.
{directives}
#
# Shared storage: model_dir below must be on storage that every node sees, a bucket (gs://) or a shared file
# system (NFS, Lustre, ...): the chief writes the checkpoints that the evaluator and a rerun read, and the tasks
# their ports and progress. With a bucket, run_dir (the logs) is each node's own; otherwise it is shared too.
# The YAML and this Python must be at the same paths on every node.
# Ranks take the roles in this order (block distribution): {ranks}.
# Restarts: a step that exits 200 runs again from the last checkpoint. A step whose every task was asked to stop
# (scancel --signal) never counts; one in which a task failed by itself is an incident, and
# restart.max_restarts ({max_restarts}) bounds them in a row without a newer checkpoint, then the job ends with 1
# (model_dir/restart_budget.json). A preemption requeues the job (PreemptMode=REQUEUE) or ends it (CANCEL); a
# plain scancel is final: the job is not requeued.
set -u
PY=({python})
EM=("${{PY[@]}}" -m estimator_mnist)
TRAIN_ARGS=({args})
RUN_DIR={run_dir}
DATA_DIR={data_dir}
LOGS="$RUN_DIR/logs/slurm-$SLURM_JOB_ID"
mkdir -p "$LOGS" || exit 1
say() {{ echo "estimator-mnist: $*"; }}

stop=0
step=
USER_SIGNAL=0
on_term() {{  # a cancel, a time limit near (--signal=B:TERM@N), scancel --batch, a requeue: stop at one saved step
  stop=1
  [ -n "$step" ] || return 0
  local job
  job=$(timeout 10 scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null)
  # Slurm signals the steps itself when it ends or requeues the job (a cancel, a node lost); so does a preemption
  # without send_user_signal, and the warning that follows it (the grace brings the job's end within --signal's
  # lead) must not signal them again: a later SIGTERM ends a task at once, without its saved step.
  case "$job" in *" JobState=RUNNING "*) ;; "") ;; *) return 0 ;; esac
  if [ "$USER_SIGNAL" -eq 0 ] && [[ "$job" == *" PreemptTime="[0-9]* ]]; then return 0; fi
  timeout 10 scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null
}}
trap on_term TERM

# The most telling exit code of the step's tasks, from srun's own lines: 2, then 1, then 200. With
# --kill-on-bad-exit srun's status is that of the tasks it ended with a signal, not the failing task's. A task
# asked to stop exits 0 to srun, its 200 in its record (supervise/slurm_task_end.py says why): srun's 0 is
# the step's 0 or 200 by the tasks' own words (slurm_job_end --step-code).
task_code() {{
  local c
  if [ "$2" -eq 0 ]; then
    "${{PY[@]}}" -m estimator_mnist.supervise.slurm_job_end "${{TRAIN_ARGS[@]}}" --step-code || echo 200
    return
  fi
  for c in 2 1 200; do
    if grep -q "Exited with exit code $c\\$" "$1"; then echo "$c"; return; fi
  done
  echo 200  # a task ended by a signal (the OOM killer, a node lost): retryable, as train itself reports it
}}

say "job $SLURM_JOB_ID (requeued ${{SLURM_RESTART_COUNT:-0}} times) on $SLURM_JOB_NODELIST; task logs in $LOGS"
{prepare} || exit $?

# The step stopped with 200, or the batch shell got SIGTERM: before anything else, Slurm says what happened
# (supervise/slurm_job_end.py): a step stopped by a user or a failed task runs again within the restart budget;
# a preemption (whatever PreemptParameters) requeues the job at once in REQUEUE mode and ends it in CANCEL mode;
# a job Slurm or an operator requeued is left to resume; a cancel is final. It says the next move on fd 3.
after_stop() {{
  local next
  {{ next=$("${{PY[@]}}" -m estimator_mnist.supervise.slurm_job_end "${{TRAIN_ARGS[@]}}" --signalled "$stop" \\
      --seen "$1" ${{2:+--early}} --move-fd 3 3>&1 1>&4); }} 4>&1  # its lines to the job's output as they come, its move on fd 3
  case "$next" in
    rerun) reruns=$((reruns + 1)) ;;
    wait) ;;
    "exit "*) exit "${{next#exit }}" ;;
    *) say "error: the job's end could not be decided (slurm_job_end said: ${{next:-nothing}}); see $LOGS"; exit 1 ;;
  esac
}}
finish() {{  # the job ends with $1: its step's records in model_dir go with it
  "${{PY[@]}}" -m estimator_mnist.supervise.slurm_job_end "${{TRAIN_ARGS[@]}}" --ended "$1" >/dev/null
  exit "$1"
}}

# Ports: each task holds a free port of its own on its node and publishes it in model_dir before TensorFlow
# starts (plan/slurm_ports.py); where slurm.conf reserves ports (MpiParams=ports=...), those Slurm gives the step.
# PreemptParameters=send_user_signal: a preemption signals the batch shell only (its --signal), not the steps.
CONFIG=$(scontrol show config 2>/dev/null)
RESV=()
if grep -Eq '^MpiParams[[:space:]]*=.*ports=' <<<"$CONFIG"; then RESV=(--resv-ports={ntasks}); fi
USER_SIGNAL=0
if grep -Eq '^PreemptParameters[[:space:]]*=.*send_user_signal' <<<"$CONFIG"; then USER_SIGNAL=1; fi

reruns=0  # this run of the job's, for the log names; the restart budget counts them (model_dir/restart_budget.json)
while :; do
  if [ "$stop" -eq 1 ]; then after_stop "signalled before the step started"; continue; fi
  attempt="${{SLURM_RESTART_COUNT:-0}}.$reruns"
  export ESTIMATOR_MNIST_SLURM_ATTEMPT="$attempt"  # the step's tasks key their ports and their ends by it
  srun --kill-on-bad-exit=1 --ntasks={ntasks} --distribution=block "${{RESV[@]}}" --output="$LOGS/rank-%t.log" \\
    "${{EM[@]}}" train "${{TRAIN_ARGS[@]}}" 2>"$LOGS/srun-$attempt.err" &
  step=$!
  "${{PY[@]}}" -m estimator_mnist.supervise.slurm_step "${{TRAIN_ARGS[@]}}" --pid "$step" &  # launch's lines
  progress=$!
  status=0
  wait "$step" || status=$?
  # Signalled while the step stops: a job Slurm requeued (a node lost) is said now, before KillWait's SIGKILL.
  if [ "$stop" -eq 1 ] && kill -0 "$step" 2>/dev/null; then
    after_stop "signalled while the step ran" early
    status=0
    wait "$step" || status=$?  # its own status, also when it ended meanwhile
  fi
  while kill -0 "$step" 2>/dev/null; do  # wait returned for the trap: the step is still stopping
    status=0
    wait "$step" || status=$?
  done
  step=
  wait "$progress"
  cat "$LOGS/srun-$attempt.err" >&2
  code=$(task_code "$LOGS/srun-$attempt.err" "$status")
  # 200 (or a task ended by a signal): stopped, or failed and retryable; Slurm says which (after_stop). A step
  # that finished (0) or failed for good (1, 2) as a signal came ends the job with its code.
  if [ "$code" -eq 200 ]; then
    if [ "$stop" -eq 1 ]; then after_stop "signalled; the step's tasks stopped with 200"
    else after_stop "the step's tasks stopped with 200"; fi
    continue
  fi
  [ "$stop" -eq 1 ] && say "signalled, but the step's code is $code: not requeued"
  case "$code" in
    0) say "done: the step's tasks all exited 0"; finish 0 ;;
    *) say "error: a task exited $code; the job ends with it; see $LOGS"; finish "$code" ;;
  esac
done
"""
