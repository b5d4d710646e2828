"""Runs one task of the cluster: chief, worker, ps or evaluator.

The process's TF_CONFIG is set here, from the dict built by cluster.py, and
nowhere else; then `tf.estimator.train_and_evaluate` does the rest.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import threading
import time

import tensorflow as tf

from . import checkpoints
from .cluster import TaskId
from .config import Config
from .cpu import lower_cpu_priority
from .data import input_fn, serving_input_receiver_fn
from .model import model_fn
from .strategy import (build_train_strategy, configure_devices, resolve_precision, session_config, sync_replicas,
                       thread_settings)

EVAL_RESULTS_FILE = checkpoints.EVAL_RESULTS_FILE
IN_GRAPH_STRATEGIES = ("mirrored", "one_device")


def _log(message: str) -> None:
    print(f"[estimator-mnist] {message}", file=sys.stderr, flush=True)


class RecordingExporter(tf.estimator.Exporter):
    """Wraps the SavedModel exporter and appends every evaluation to eval_results.jsonl.

    Exporters are the one place where Estimator hands over the evaluation
    result together with the checkpoint it came from, so the launcher (and a
    user) can read each evaluated step without parsing logs or event files.
    """

    def __init__(self, inner: tf.estimator.Exporter, results_path: str):
        self._inner = inner
        self._results_path = results_path

    @property
    def name(self):
        return self._inner.name

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        exported = self._inner.export(estimator, export_path, checkpoint_path, eval_result, is_the_final_export)
        if isinstance(exported, bytes):
            exported = exported.decode()
        record = {
            "global_step": int(eval_result[tf.compat.v1.GraphKeys.GLOBAL_STEP]),
            "accuracy": float(eval_result["accuracy"]),
            "loss": float(eval_result["loss"]),
            "checkpoint": checkpoint_path,
            "export": exported,
            "final": bool(is_the_final_export),
            "time": time.time(),
        }
        with open(self._results_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        _log(f"evaluation: global_step={record['global_step']} accuracy={record['accuracy']:.4f} "
             f"loss={record['loss']:.4f} export={exported}")
        return exported


def _exit_now(message: str) -> None:
    _log(message)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class TeardownWatchdogHook(tf.compat.v1.train.SessionRunHook):
    """Ends a trainer that is still running after training is over because TensorFlow waits on peers.

    Seen in practice, all after the chief's final checkpoint was on disk:
    - under MultiWorkerMirrored, GrpcSession::Close on the chief and the
      workers waited 60-90 s on peers that had already finished (py-spy:
      LocalMaster::CloseSession in WaitForNotification);
    - a worker stayed blocked after the chief finished;
    - with SyncReplicasOptimizer a replica waited for a step token that no
      stopped peer would ever send.
    - with in-graph MirroredStrategy on one machine, closing the session
      blocked for minutes after the final checkpoint (py-spy:
      BaseSession.close), with no peer at all.
    So every trainer watches model_dir from the start. Once its work is on
    disk it has `timeout_secs` to exit by itself, then it says why and exits
    0. Its work is the checkpoint at or past max_steps (the evaluator does the
    rest), or, for a process that evaluates itself, the final evaluation and
    export: nothing is lost.
    """

    def __init__(self, model_dir: str, timeout_secs: int, max_steps: int, wait_for_final_evaluation: bool = False,
                 before_exit=None):
        self._before_exit = before_exit
        self._model_dir = model_dir
        self._timeout_secs = timeout_secs
        self._max_steps = max_steps
        self._wait_for_final_evaluation = wait_for_final_evaluation

    def begin(self):
        threading.Thread(target=self._watch, name="teardown-watchdog", daemon=True).start()

    def _work_is_saved(self) -> bool:
        if self._wait_for_final_evaluation:
            return any(r["global_step"] >= self._max_steps for r in checkpoints.read_eval_results(self._model_dir))
        return (checkpoints.latest_step(self._model_dir) or -1) >= self._max_steps

    def _watch(self) -> None:
        while not self._work_is_saved():
            time.sleep(0.5)
        time.sleep(self._timeout_secs)
        if self._before_exit is not None:
            self._before_exit()
        _exit_now(f"training ended at step {checkpoints.latest_step(self._model_dir)} and its results are saved, "
                  f"but this task is still blocked {self._timeout_secs} s later (TensorFlow waiting on peers that "
                  f"left, or closing its session); exiting")


# Runs as its own process: while TensorFlow sets up a MultiWorkerMirrored
# cluster it holds the GIL, so no thread of the task itself could act.
_STARTUP_WATCHDOG = r"""
import json, os, select, signal, socket, sys
parent, timeout, task, peers = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
if select.select([sys.stdin], [], [], timeout)[0]:
    sys.exit(0)  # the cluster formed (the task closed our stdin), or the task is gone
missing = []
for name, address in peers:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
    except OSError:
        missing.append(f"{name} ({address})")
if missing:
    reason = ("these peers do not answer: " + ", ".join(missing) + "; start them, or check their host:port in the "
              "cluster file and the firewall")
else:
    reason = "every peer answers but the cluster did not form; check that all tasks use the same cluster file"
print(f"[estimator-mnist] task {task}: no training session after training.session_creation_timeout_secs="
      f"{timeout:g} s: {reason}; stopping this task", file=sys.stderr, flush=True)
os.kill(parent, signal.SIGKILL)  # MultiWorkerMirrored tasks ignore SIGTERM
"""


class StartupWatchdog(tf.compat.v1.train.SessionRunHook):
    """Bounds the wait for the cluster to form, and names the peers that never came.

    A MultiWorkerMirrored task with a missing peer was seen waiting for ever
    inside the strategy's set-up, and Estimator waits up to two hours for a
    session by default. If no session exists after `timeout_secs`, a helper
    process probes every peer's address, logs which ones do not answer, and
    ends the task.
    """

    def __init__(self, task: TaskId, tf_config: dict, timeout_secs: int):
        peers = [(f"{role}:{index}", address) for role, addresses in tf_config.get("cluster", {}).items()
                 for index, address in enumerate(addresses) if (role, index) != (task.type, task.index)]
        self._helper = subprocess.Popen(
            [sys.executable, "-c", _STARTUP_WATCHDOG, str(os.getpid()), str(timeout_secs), str(task),
             json.dumps(peers)], stdin=subprocess.PIPE)

    def after_create_session(self, session, coord):
        """The cluster formed: dismiss the helper."""
        if self._helper.stdin and not self._helper.stdin.closed:
            self._helper.stdin.close()
            self._helper.wait()


STEP_TIMES_DIR = "step_times"
STEP_TIMES_EVERY = 10


class StepCountHook(tf.compat.v1.train.SessionRunHook):
    """Counts this task's own training steps, times them, and logs the count with the global step at the end.

    The two numbers tell the strategies apart: asynchronous ps training
    advances the global step once per worker step, synchronous training once
    per aggregated update. The wall-clock time after the first step, every
    STEP_TIMES_EVERY-th step and the last one goes to
    <run_dir>/step_times/<task>.json, so throughput and start-up time can be
    read without parsing logs (benchmarks/keras_comparison.py does).
    """

    def __init__(self, task: TaskId, delay_secs: float = 0.0, times_dir: str = ""):
        self._task = task
        self._delay_secs = delay_secs
        self._times_path = os.path.join(times_dir, f"{task.type}-{task.index}.json") if times_dir else ""
        self._times = []
        self.local_steps = 0

    def after_run(self, run_context, run_values):
        self.local_steps += 1
        now = time.time()
        if self.local_steps == 1 or self.local_steps % STEP_TIMES_EVERY == 0:
            self._times.append((self.local_steps, now))
            if self.local_steps == 1 or self.local_steps % (10 * STEP_TIMES_EVERY) == 0:
                self._write_times()
        self._last = (self.local_steps, now)
        if self._delay_secs:
            time.sleep(self._delay_secs)  # tasks.<task>.step_delay_ms: a straggler on purpose

    def _write_times(self) -> None:
        if not self._times_path:
            return
        times = list(self._times)
        if self.local_steps and times[-1][0] != self.local_steps:
            times.append(self._last)
        record = {"task": str(self._task), "pid": os.getpid(), "step_times": times}
        os.makedirs(os.path.dirname(self._times_path), exist_ok=True)
        tmp = self._times_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(tmp, self._times_path)

    def end(self, session):
        self.report(int(session.run(tf.compat.v1.train.get_global_step())))

    def report(self, global_step) -> None:
        """Writes the step times and logs the task's own step count (also when the teardown watchdog ends it)."""
        self._write_times()
        _log(f"task {self._task} ran {self.local_steps} local steps; global_step {global_step}")


class VariablePlacementHook(tf.compat.v1.train.SessionRunHook):
    """Logs where each variable lives, in the task's log, with log_device_placement."""

    def begin(self):
        for variable in tf.compat.v1.global_variables():
            _log(f"variable {variable.op.name} placed on {variable.device or '(default device)'}")


def _exporter(config: Config) -> tf.estimator.Exporter:
    evaluation = config.evaluation
    if evaluation.export == "best":
        inner = tf.estimator.BestExporter(name="best", serving_input_receiver_fn=serving_input_receiver_fn,
                                          exports_to_keep=evaluation.exports_to_keep)
    else:
        inner = tf.estimator.LatestExporter(name="latest", serving_input_receiver_fn=serving_input_receiver_fn,
                                            exports_to_keep=evaluation.exports_to_keep)
    return RecordingExporter(inner, os.path.join(config.model_dir, EVAL_RESULTS_FILE))


def build_estimator(config: Config, task: TaskId, strategy=None) -> tf.estimator.Estimator:
    training = config.training
    run_config = tf.estimator.RunConfig(
        model_dir=config.model_dir,
        train_distribute=strategy,
        # Under MultiWorkerMirrored, save_checkpoints_secs would silently become
        # "every 1000 steps"; steps are explicit and the same for every task.
        save_checkpoints_steps=training.save_checkpoints_steps,
        save_summary_steps=training.log_step_count_steps,
        keep_checkpoint_max=training.keep_checkpoint_max,
        log_step_count_steps=training.log_step_count_steps,
        session_config=session_config(config, task),
        session_creation_timeout_secs=training.session_creation_timeout_secs,
        tf_random_seed=training.seed,
    )
    params = {"config": config.model, "batch_size_per_replica": training.batch_size_per_replica,
              "max_steps": training.max_steps, "sync_replicas": sync_replicas(config),
              "precision": resolve_precision(config.model.precision)}
    return tf.estimator.Estimator(model_fn=model_fn, config=run_config, params=params)


def train_and_eval_specs(config: Config, make_dataset=None, hooks=()):
    training = config.training
    common = dict(data_dir=config.data_dir, batch_size_per_replica=training.batch_size_per_replica,
                  eval_batch_size=config.evaluation.batch_size, shuffle_buffer=training.shuffle_buffer,
                  seed=training.seed)
    train_spec = tf.estimator.TrainSpec(
        input_fn=functools.partial(input_fn, tf.estimator.ModeKeys.TRAIN, make_dataset=make_dataset, **common),
        max_steps=training.max_steps, hooks=list(hooks))
    eval_spec = tf.estimator.EvalSpec(
        input_fn=functools.partial(input_fn, tf.estimator.ModeKeys.EVAL, make_dataset=make_dataset, **common),
        steps=None,  # the whole test split
        exporters=[_exporter(config)],
        start_delay_secs=config.evaluation.start_delay_secs,
        throttle_secs=config.evaluation.throttle_secs)
    return train_spec, eval_spec


EVAL_POLL_SECS = 0.5


def evaluate_checkpoints(estimator: tf.estimator.Estimator, eval_spec: tf.estimator.EvalSpec, max_steps: int,
                         poll_secs: float = EVAL_POLL_SECS) -> dict:
    """The evaluator task: scores and exports new checkpoints until the final one (step >= max_steps).

    Estimator's own evaluator loop sleeps a whole throttle_secs after each
    evaluation, so the final checkpoint could wait that long (10 s at the end
    of a 2-minute run was seen), and then it sleeps once more before it
    notices that training is over. Here throttle_secs only spaces out the
    intermediate evaluations: the final checkpoint is scored as soon as it is
    on disk, and the task returns right after its export.
    """
    time.sleep(eval_spec.start_delay_secs)
    evaluated, last_start = None, float("-inf")
    while True:
        path = checkpoints.latest_checkpoint(estimator.model_dir)
        step = checkpoints.step_of(path)
        final = step is not None and step >= max_steps
        if path and path != evaluated and (final or time.time() - last_start >= eval_spec.throttle_secs):
            last_start = time.time()
            result = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, checkpoint_path=path,
                                        hooks=eval_spec.hooks)
            for exporter in eval_spec.exporters:
                exporter.export(estimator, os.path.join(estimator.model_dir, "export", exporter.name), path,
                                result, final)
            evaluated = path
            if final:
                return result
        time.sleep(poll_secs)


def _configure_logging(task: TaskId) -> None:
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    logger = logging.getLogger("tensorflow")
    logger.propagate = False  # absl's root handler would print every line a second time
    for handler in logger.handlers:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {task} %(levelname)s %(message)s"))


def _describe(config: Config, task: TaskId, strategy) -> str:
    intra, inter = thread_settings(config, task)
    settings = config.task_settings(task.type, task.index)
    devices = ", ".join(d.name for d in tf.config.list_logical_devices()) or "none"
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if task.is_evaluator:
        name = "none (evaluator)"
    elif strategy is None:
        r2a, total = sync_replicas(config)
        name = f"{config.strategy.name} (replicas_to_aggregate={r2a} of {total})"
    else:
        name = f"{config.strategy.name} ({type(strategy).__name__})"
        if config.strategy.name == "multi_worker_mirrored":
            timeout = config.strategy.collective_timeout_secs or "none"
            name += f" communication={config.strategy.communication} collective_timeout_secs={timeout}"
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"task {task} role={task.type} strategy={name} replicas_in_sync={replicas} devices=[{devices}] "
            f"CUDA_VISIBLE_DEVICES={'(unset)' if cuda is None else repr(cuda)} "
            f"gpu_memory_growth={settings.gpu_memory_growth} gpu_memory_fraction={settings.gpu_memory_fraction} "
            f"intra_op_threads={intra} inter_op_threads={inter} "
            f"precision={resolve_precision(config.model.precision)} (model.precision={config.model.precision}) "
            f"log_device_placement={config.session.log_device_placement} "
            f"operation_timeout_ms={config.session.operation_timeout_ms or 'none'} "
            f"model_dir={config.model_dir} pid={os.getpid()}")


READY_POLL_SECS = 1.0


def poll_for_ready_model_quickly() -> None:
    """Non-chief trainers wait for the chief to initialise the variables, polling every 30 s.

    Estimator gives no way to change that interval (SessionManager's
    recovery_wait_secs), and on a short run a ps worker then joins only after
    the chief has finished. One-second polls cost nothing.
    """
    from tensorflow.python.training import session_manager  # pylint: disable=import-outside-toplevel

    original = session_manager.SessionManager.__init__
    if getattr(original, "_polls_quickly", False):
        return

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._recovery_wait_secs = min(self._recovery_wait_secs, READY_POLL_SECS)  # pylint: disable=protected-access

    init._polls_quickly = True
    session_manager.SessionManager.__init__ = init


def training_hooks(config: Config, task: TaskId):
    settings = config.task_settings(task.type, task.index)
    evaluates_itself = config.strategy.name in IN_GRAPH_STRATEGIES and config.cluster.evaluator is None
    steps = StepCountHook(task, settings.step_delay_ms / 1000.0,
                          times_dir=os.path.join(config.run_dir, STEP_TIMES_DIR) if config.run_dir else "")
    return [steps,
            TeardownWatchdogHook(config.model_dir, timeout_secs=config.training.teardown_timeout_secs,
                                 max_steps=config.training.max_steps, wait_for_final_evaluation=evaluates_itself,
                                 before_exit=lambda: steps.report(checkpoints.latest_step(config.model_dir))),
            *([VariablePlacementHook()] if config.session.log_device_placement else [])]


def run_task(config: Config, tf_config: dict) -> int:
    """Runs the task named by tf_config['task'] until training (or evaluation) ends."""
    task = TaskId(tf_config["task"]["type"], int(tf_config["task"].get("index", 0)))
    finished_step = checkpoints.latest_step(config.model_dir)
    if not task.is_evaluator and finished_step is not None and finished_step >= config.training.max_steps:
        # Starting a server here would leave the peers waiting for a chief that skips training.
        _log(f"task {task}: model_dir already holds step {finished_step} >= max_steps "
             f"{config.training.max_steps}; nothing to train. Raise training.max_steps to continue.")
        return 0
    os.makedirs(config.model_dir, exist_ok=True)
    in_graph = config.strategy.name in IN_GRAPH_STRATEGIES and not task.is_evaluator
    if in_graph:
        # In-graph replication runs in one process without a TF server: with a
        # cluster in TF_CONFIG, Estimator would place the input pipeline on
        # /job:localhost while the session only has /job:chief devices.
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    _configure_logging(task)
    if task.is_evaluator:
        _log(f"task {task}: CPU priority {lower_cpu_priority(config.evaluation.nice)}")
    watchdog = None
    if not in_graph and task.type in ("chief", "worker"):
        watchdog = StartupWatchdog(task, tf_config, config.training.session_creation_timeout_secs)
    configure_devices(config, task)
    strategy = build_train_strategy(config, task)
    _log(_describe(config, task, strategy))
    estimator = build_estimator(config, task, strategy)
    hooks = [] if task.is_evaluator else training_hooks(config, task)
    if watchdog is not None:
        hooks.append(watchdog)
    if not task.is_evaluator:
        poll_for_ready_model_quickly()
    train_spec, eval_spec = train_and_eval_specs(config, hooks=hooks)
    if task.is_evaluator:
        evaluate_checkpoints(estimator, eval_spec, config.training.max_steps)
    elif in_graph and config.cluster.evaluator is not None:
        # The evaluator process scores the checkpoints; evaluating here too
        # would pause training at every checkpoint.
        estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps)
    else:
        tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    _log(f"task {task} finished")
    return 0
