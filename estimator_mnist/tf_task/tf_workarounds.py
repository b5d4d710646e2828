"""Every work-around for TensorFlow 2.15 (tensorflow-estimator 2.15.0) in one place.

Each entry names the TF version it was seen on, the symptom, and the test
that pins it. These live where the data flows and are listed here so that
this file stays the index:
- trainers blocked in closing their session after training end by themselves
  once their work is on disk (teardown.TeardownWatchdogHook; pinned by
  tests/unit/test_hooks.py::test_teardown_watchdog_exits_only_once_the_work_is_saved);
- a MultiWorkerMirrored step is bounded by one watchdog thread per trainer, not by a timeout on each
  collective op, which starts a thread per op (step_watchdog.StepWatchdogHook; pinned by
  tests/unit/test_step_watchdog.py::test_a_step_that_outlasts_the_timeout_ends_the_task_retryably);
- in-graph strategies (mirrored, one_device) run with no TF_CONFIG cluster:
  with one, Estimator placed the input pipeline on /job:localhost while the
  session had only /job:chief devices (task_plan.plan_task sets tf_config to
  None; pinned by tests/e2e/test_strategies_run.py::test_mirrored_replicates_over_two_devices);
- the startup watchdog is the task's parent process (supervise/task_parent.py): while
  TF sets up a MultiWorkerMirrored cluster it holds the GIL, so no thread of
  the task could act (tests/e2e/test_cluster_run.py::test_a_peer_that_never_starts_is_named_within_the_timeout);
- model_fn is marked as AutoGraph's own artifact (model.py): under a strategy AutoGraph rewrote it and
  all it calls at every trainer's start (tests/unit/test_model.py::test_autograph_leaves_model_fn_alone);
- a task's role runs with AutoGraph off (without_autograph; tests/unit/test_without_autograph.py);
- TF's coordination service gets a heartbeat timeout past any suspension of a Slurm job (strategy.py,
  configure_coordination_service; tests/e2e/test_slurm_preemption.py, tests/unit/test_strategy.py);
- `serve` takes off the "Graph execution error:" that TF 2.15's Python session puts before a kernel's message,
  so that a client gets the text TF Serving's C++ session gives (serve/model.py;
  tests/process/test_serve.py::test_an_undecodable_image_gets_tensorflow_s_own_message).
"""

from __future__ import annotations

import contextlib
import threading
import time

import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.model_files.layout import summary_copy_dir

READY_POLL_SECS = 1.0


def bound_session_recreation(timeout_secs: float) -> None:
    """TF 2.15: MonitoredSession re-creates its session for ever after AbortedError or UnavailableError.

    Survivors of a dead peer or ps were seen retrying without end
    (_RecoverableSession._create_session loops on those errors). The loop now
    gives up after training.session_creation_timeout_secs and the error
    propagates, so the task exits 200 (retryable) instead of hanging. Pinned by
    tests/unit/test_hooks.py::test_session_recreation_gives_up_after_the_timeout.
    """
    from tensorflow.python.training import monitored_session  # pylint: disable=import-outside-toplevel

    recoverable = monitored_session._RecoverableSession  # pylint: disable=protected-access
    if getattr(recoverable._create_session, "_bounded_secs", None) == timeout_secs:
        return

    def create_session(self):
        deadline = time.monotonic() + timeout_secs
        while True:
            try:
                return self._sess_creator.create_session()
            except monitored_session._PREEMPTION_ERRORS as exc:  # pylint: disable=protected-access
                if time.monotonic() >= deadline:
                    raise
                tf.compat.v1.logging.info("session creation failed (%s); retrying until "
                                          "training.session_creation_timeout_secs", type(exc).__name__)

    create_session._bounded_secs = timeout_secs
    recoverable._create_session = create_session


def bound_close_after_an_error(timeout_secs: float, errors: tuple, on_timeout) -> None:
    """TF 2.15: after a lost ps, closing the session waited for that ps for ever.

    A trainer whose ps host went down got DeadlineExceededError within
    session.operation_timeout_ms, then hung in MonitoredSession's exit:
    GrpcSession::Close -> LocalMaster::CloseSession waits for the lost ps with
    no deadline (gdb, on the simulated hosts), so the error never
    reached the task's exit code. After one of `errors`, the exit now waits at
    most `timeout_secs` (training.teardown_timeout_secs), then calls
    `on_timeout(error)`, which ends the task with that error's line. Pinned by
    tests/e2e/test_ps_lost.py.
    """
    from tensorflow.python.training import monitored_session  # pylint: disable=import-outside-toplevel

    session_class = monitored_session._MonitoredSession  # pylint: disable=protected-access
    original = getattr(session_class.__exit__, "_original", session_class.__exit__)

    def __exit__(self, exception_type, exception_value, traceback):
        if not isinstance(exception_value, errors):
            return original(self, exception_type, exception_value, traceback)
        timer = threading.Timer(timeout_secs, on_timeout, args=(exception_value,))
        timer.daemon = True
        timer.start()
        try:
            return original(self, exception_type, exception_value, traceback)
        finally:
            timer.cancel()

    __exit__._original = original
    session_class.__exit__ = __exit__


def lean_checkpoint_start() -> None:
    """TF 2.15: CheckpointSaverHook.after_create_session held the first step back by about a second.

    At session start it serialised the whole graph three times (graph.pbtxt,
    a MetaGraphDef for the events file, the step-0 checkpoint's .meta), in
    pure Python: protobuf 3.20.3, the newest that tensorflow-metadata 1.14.0
    (tfds 4.9.4) accepts, has no C++ extension for Python 3.11. Then it saved
    a checkpoint of the untrained weights, which the evaluator scored at
    about 8% while the trainers started. Under MultiWorkerMirrored every
    worker waits for the chief's first step. Now a session start only notes
    the global step; RunConfig(checkpoint_save_graph_def=False) leaves out the
    .meta of later checkpoints (Estimator rebuilds graphs from model_fn, and
    the events file still gets the graph from its writer). A restart before
    the first checkpoint starts from the initial weights, as it would from
    the step-0 checkpoint. Pinned by
    tests/unit/test_model.py::test_no_checkpoint_of_the_untrained_weights.

    Estimator's listener for train_and_evaluate in one process
    (`_NewCheckpointListenerForEvaluate`, one_device and mirrored evaluating
    themselves, every sweep trial) skips its first `after_save` as that
    session-start save of the untrained weights. Without the save, it skipped
    the first real checkpoint instead: one_device.yaml's step 250 was never
    evaluated, nor a sweep trial's first checkpoint, which the median rule
    judges. So the listeners are told that the first save is behind them.
    Pinned by tests/unit/test_lean_checkpoint_start.py.
    """
    hook = tf.compat.v1.train.CheckpointSaverHook
    if getattr(hook.after_create_session, "_lean", False):
        return

    def after_create_session(self, session, coord):  # pylint: disable=unused-argument
        self._timer.update_last_triggered_step(session.run(self._global_step_tensor))
        for listener in self._listeners:
            if getattr(listener, "_is_first_run", False):  # pylint: disable=protected-access
                listener._is_first_run = False  # pylint: disable=protected-access

    after_create_session._lean = True
    hook.after_create_session = after_create_session


def lean_events_graph() -> None:
    """TF 2.15: the first summary writer of a model_dir held the first step back by about 1.5 s.

    `FileWriterCache.get` makes its FileWriter with the default graph, and the
    writer serialises that graph twice with every tensor's shape added
    (`as_graph_def(add_shapes=True)`), then a MetaGraphDef, all in pure-Python
    protobuf (see lean_checkpoint_start). The first hook to ask for a writer
    (ours, or Estimator's SummarySaverHook) paid it before the first step, and
    the evaluator before its first result. Now the writer gets the GraphDef's
    bytes straight from TensorFlow's C API, with no shapes and no MetaGraphDef:
    TensorBoard's Graphs tab still shows the graph, without shapes on its
    edges. Pinned by tests/unit/test_model.py::test_the_events_file_gets_the_graph_without_python_protobuf.
    """
    cache = tf.compat.v1.summary.FileWriterCache
    if getattr(cache.get, "_lean", False):
        return
    # pylint: disable=import-outside-toplevel
    from tensorflow.core.util import event_pb2
    from tensorflow.python.client import pywrap_tf_session
    from tensorflow.python.framework import c_api_util

    def graph_def_bytes(graph) -> bytes:
        with graph._lock, c_api_util.tf_buffer() as buffer:  # pylint: disable=protected-access
            with graph._c_graph.get() as c_graph:  # pylint: disable=protected-access
                pywrap_tf_session.TF_GraphToGraphDef(c_graph, buffer)
                return bytes(pywrap_tf_session.TF_GetBuffer(buffer))

    def get(logdir):
        with cache._lock:  # pylint: disable=protected-access
            if logdir not in cache._cache:  # pylint: disable=protected-access
                writer = tf.compat.v1.summary.FileWriter(logdir)
                writer.add_event(event_pb2.Event(wall_time=time.time(),
                                                 graph_def=graph_def_bytes(tf.compat.v1.get_default_graph())))
                cache._cache[logdir] = writer  # pylint: disable=protected-access
            return cache._cache[logdir]  # pylint: disable=protected-access

    get._lean = True
    cache.get = staticmethod(get)


def poll_for_ready_model_quickly() -> None:
    """TF 2.15: non-chief trainers poll for the chief's initialised variables every 30 s.

    Estimator gives no way to change SessionManager's recovery_wait_secs, and
    on a short ps run a worker joined only after the chief had finished.
    One-second polls cost nothing. Pinned by
    tests/e2e/test_strategies_run.py::test_parameter_server_async (the slowed worker trains).
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


def size_thread_pools(intra_op_threads: int, inter_op_threads: int) -> None:
    """TF 2.15: all CPU devices of a process share one pool of intra-op threads, sized by the first
    device created, and a session's ConfigProto no longer changes it. The task listed its devices
    before any session existed, so that pool took TensorFlow's default, one thread per usable core:
    a trainer asked for 1 intra-op thread computed on 2 when it was not pinned to one core (the
    lone trainer of the like-for-like benchmark, the evaluator). Sizing the eager context's pools
    first makes the first device, and so every session, use the plan's counts. Must run before
    TensorFlow creates a device; pinned by
    tests/process/test_tf_subprocess.py::test_a_task_computes_on_the_intra_op_threads_it_was_given.
    """
    tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)


def no_bfloat16_fusion(proto: tf.compat.v1.ConfigProto) -> None:
    """TF 2.15: in a cluster session grappler's remapper fuses bfloat16 Conv2D+BiasAdd+Relu into a
    _FusedConv2D that has no bfloat16 CPU kernel, and the first step fails. Bfloat16 trainers turn the
    remapper off, and so does an evaluator told to evaluate in bfloat16 (its evaluations are slower).
    Pinned by tests/unit/test_strategy.py::test_bfloat16_turns_off_the_fusion_that_has_no_bfloat16_kernel.
    """
    from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=import-outside-toplevel

    proto.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF


def set_collective_options(strategy, options) -> None:
    """TF 2.15: the v1 MultiWorkerMirroredStrategy takes no CommunicationOptions (only `communication=`).
    Its extended object builds the all-reduce ops from these options when Estimator configures it, so
    the implementation reaches every collective op (and no timeout does: step_watchdog.py). Pinned by
    tests/process/test_tf_subprocess.py::test_collective_options_reach_the_all_reduce_ops.
    """
    strategy.extended._communication_options = options  # pylint: disable=protected-access


def float32_variables(network: tf.keras.Model):
    """TF 2.15 / Keras 2.15: in-graph MirroredStrategy with a mixed policy failed in Adam's slot creation
    ('PerReplica' object has no attribute 'name'): it does not see the AutoCastVariable wrappers of one
    variable on several replicas as one mirrored variable. The optimizer gets the float32 variables
    underneath (private `_variable`). Pinned by tests/e2e/test_strategies_run.py::test_mirrored_replicates_over_two_devices.
    """
    return [getattr(v, "_variable", v) for v in network.trainable_variables]


class ReleaseSyncTokensHook(tf.compat.v1.train.SessionRunHook):
    """TF 2.15: with SyncReplicasOptimizer the chief was seen waiting for ever for a step token.

    A replica waits for a token after each step, and tokens only come from the
    next aggregated update. Once the global step passes max_steps the replicas
    that already stopped send no more gradients, so a replica that began one
    more step would wait for ever. Spare tokens handed out when a replica stops
    let it finish that step, see that training is over and stop. Pinned by
    tests/e2e/test_strategies_run.py::test_parameter_server_sync_with_a_backup_worker.
    """

    def __init__(self, optimizer, total_replicas: int):
        queue = optimizer.get_chief_queue_runner().queue
        global_step = tf.compat.v1.train.get_global_step()
        with tf.control_dependencies(None), tf.compat.v1.device(global_step.device):
            self._release = queue.enqueue_many(
                (tf.fill([total_replicas], tf.identity(global_step)),), name="release_sync_tokens")

    def end(self, session):
        try:
            session.run(self._release)
        except tf.errors.OpError:
            pass  # the ps tasks are already gone: nobody is left waiting on them


def remove_collective_scratch(model_dir: str, task) -> None:
    """TF 2.15: a non-chief MultiWorkerMirrored worker writes a copy of every checkpoint and summary to
    <model_dir>/tmp_<type>_<index> (layout.summary_copy_dir). MonitoredTrainingSession makes them run the save
    and summary ops so that collective ops stay in step, and writes the output there. TensorBoard showed it as a
    second, partial run beside the real one, and the copies took as much disk as the checkpoints (96 MB in the
    default run). The worker removes it once training has ended. Pinned by
    tests/e2e/test_two_workers_run.py::test_tensorboard_shows_one_training_run_with_images_per_sec_and_the_evaluations.
    """
    tf.compat.v1.summary.FileWriterCache.clear()  # closes the writers, which would re-create their files
    with contextlib.suppress(OSError):  # housekeeping: a copy left behind costs space, not correctness
        storage.rmtree(summary_copy_dir(model_dir, task))


@contextlib.contextmanager
def without_autograph():
    """TF 2.15: under a strategy AutoGraph converted Estimator's own functions at every task's start.

    `call_for_each_replica` (mirrored_run.py) converted Estimator's `_call_model_fn` and its scaffold's
    functions (0.2 s of a trainer's start), each written to `__autograph_generated_file*.py` in the temporary
    directory for an atexit hook to remove; tasks end with os._exit (teardown.exit_now), so each run left
    three per trainer in /tmp. Nothing in them needs converting. Pinned by tests/unit/test_without_autograph.py.
    """
    from tensorflow.python.autograph.core import ag_ctx  # pylint: disable=import-outside-toplevel

    with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.DISABLED):
        yield
