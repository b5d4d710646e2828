"""Training hooks: the progress record a real Estimator run writes, and the teardown watchdog."""

import json
import re
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import planned
from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.model_files.progress import progress_path, read_progress
from estimator_mnist.tf_task.save_times import save_times_listeners, saves_recorded
from estimator_mnist.tf_task.teardown import TeardownWatchdogHook
from tests.unit.fakes import dataset_of, fake_mnist


def test_a_training_run_writes_its_progress_record_and_images_per_sec_for_tensorboard(tmp_path):
    images, labels = fake_mnist(128)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"]},
        "training": {"batch_size_per_replica": 8, "max_steps": 12, "save_checkpoints_steps": 6,
                     "log_step_count_steps": 4},
        "run_dir": str(tmp_path / "run"),
    }, "test")
    plan = planned(config, TaskId("chief", 0))
    # Without the teardown watchdog: once the work is saved it would end this very process.
    hooks = [h for h in runner.training_hooks(config, plan) if not isinstance(h, TeardownWatchdogHook)]
    estimator = runner.build_estimator(config, plan)
    assert len(hooks) == 3  # progress, throughput, and the step watchdog (multi_worker_mirrored by default)
    train_spec, _ = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels),
                                                hooks=hooks)
    # Another trainer's record, as a worker of the same run writes it: the chief puts its rate in TensorBoard.
    other = Path(progress_path(config.run_dir, TaskId("worker", 0)))
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({"task": "worker:0", "examples_per_sec": 123.0, "time": time.time() + 60}))
    with saves_recorded(save_times_listeners(hooks)):  # as runner.run_task trains
        estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps)
    record = read_progress(config.run_dir)["chief:0"]
    # Each save's start and end (SaveTimesListener), between the steps around it, each checkpoint's files before
    # its end: the save time of benchmarks/time_to_accuracy.py.
    assert [step for step, _, _ in record["saves"]] == [6, 12]
    for step, started, saved in record["saves"]:
        index = Path(config.model_dir) / f"model.ckpt-{step}.index"
        assert record["first_step_time"] <= started <= index.stat().st_mtime <= saved + 0.01
    assert record["done"] is True and record["local_step"] == 12 and record["global_step"] == 12
    assert record["loss"] is not None and record["loss"] > 0
    assert [step for step, _ in record["step_times"]] == [1, 10, 12]
    assert record["first_step_time"] <= record["time"]
    assert record["examples_per_step"] == 8

    # TensorBoard's own reader sees the global rate and each trainer's in the training run, in Estimator's one
    # events file, every 4 steps after the first and at the end (labelled with the global step the step began at).
    assert len(list(Path(config.model_dir).glob("events.out.tfevents.*"))) == 1
    events = EventAccumulator(config.model_dir)
    events.Reload()
    for tag in ("images_per_sec", "images_per_sec/chief_0", "images_per_sec/worker_0"):
        points = events.Scalars(tag)
        assert [p.step for p in points] == [4, 8, 11] and all(p.value > 0 for p in points)
    assert {p.value for p in events.Scalars("images_per_sec/worker_0")} == {123.0}
    assert {"loss", "learning_rate", "train_accuracy"} <= set(events.Tags()["scalars"])


def write_final_checkpoint(model_dir, step=5):
    (model_dir / f"model.ckpt-{step}.index").touch()
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"')


def write_final_evaluation(model_dir, step=5):
    with open(model_dir / "eval_results.jsonl", "a", encoding="utf-8") as handle:
        handle.write(f'{{"global_step": {step}, "accuracy": 0.9}}\n')


@pytest.mark.parametrize("evaluates_itself", [False, True])
def test_teardown_watchdog_exits_only_once_the_work_is_saved(tmp_path, evaluates_itself):
    """A trainer stuck after training ends is ended (exit 0), but never before its final checkpoint,
    or its final evaluation when it evaluates itself, is on disk."""
    exits, reported = [], []
    hook = TeardownWatchdogHook(str(tmp_path), timeout_secs=0.2, max_steps=5,
                                wait_for_final_evaluation=evaluates_itself, poll_secs=0.02,
                                before_exit=lambda: reported.append(True),
                                exit_fn=lambda message, code=0: exits.append((message, code)))
    watcher = threading.Thread(target=hook.watch, daemon=True)
    watcher.start()
    time.sleep(0.5)
    assert not exits  # nothing saved yet
    write_final_checkpoint(tmp_path)
    if evaluates_itself:
        time.sleep(0.5)
        assert not exits  # the checkpoint alone is not enough
        write_final_evaluation(tmp_path)
    watcher.join(timeout=10)
    assert reported == [True]  # the task's own step count is logged before it is ended
    assert len(exits) == 1 and exits[0][1] == 0
    assert re.fullmatch(r"training ended at step 5 and its results are saved, but this task is still blocked "
                        r"\d+\.\d s after the final checkpoint \(TensorFlow waiting on peers that left, or closing "
                        r"its session\); exiting", exits[0][0]), exits


@pytest.mark.parametrize("evaluated_after, exits_after", [(0.4, 1.0), (1.5, 1.8)])
def test_the_teardown_timeout_counts_from_the_final_checkpoint(tmp_path, evaluated_after, exits_after):
    """The chief waits for the final evaluation within its timeout, not before it: an evaluation recorded
    0.4 s after the checkpoint still ends a blocked chief 1 s after the checkpoint; one recorded after the
    timeout ends it `after_final_evaluation_secs` (0.3 s) later, not a whole timeout later."""
    exited_at = []
    hook = TeardownWatchdogHook(str(tmp_path), timeout_secs=1.0, max_steps=5, wait_for_final_evaluation=True,
                                poll_secs=0.02, after_final_evaluation_secs=0.3,
                                exit_fn=lambda message, code=0: exited_at.append(time.monotonic()))
    watcher = threading.Thread(target=hook.watch, daemon=True)
    watcher.start()
    write_final_checkpoint(tmp_path)
    saved = time.monotonic()
    time.sleep(evaluated_after)
    write_final_evaluation(tmp_path)
    watcher.join(timeout=10)
    assert len(exited_at) == 1
    assert exits_after - 0.05 <= exited_at[0] - saved <= exits_after + 0.25  # before: 1.4 s and 2.5 s


def test_teardown_watchdog_gives_up_on_a_final_evaluation_that_never_comes(tmp_path):
    exits = []
    hook = TeardownWatchdogHook(str(tmp_path), timeout_secs=0.2, max_steps=5, wait_for_final_evaluation=True,
                                final_timeout_secs=0.5, poll_secs=0.02,
                                exit_fn=lambda message, code=0: exits.append((message, code)))
    write_final_checkpoint(tmp_path)
    hook.watch()
    assert exits == [("the final checkpoint was not evaluated within evaluation.final_timeout_secs=0.5 s; check "
                      "the evaluator's log", 1)]


def test_session_recreation_gives_up_after_the_timeout():
    """MonitoredSession alone would re-create a session for ever after UnavailableError (a dead peer)."""
    import tensorflow as tf
    from tensorflow.python.training import monitored_session

    from estimator_mnist.tf_task.tf_workarounds import bound_session_recreation

    class PeerGone:
        calls = 0

        def create_session(self):
            PeerGone.calls += 1
            raise tf.errors.UnavailableError(None, None, "/job:worker/replica:0/task:1 is gone")

    bound_session_recreation(0.3)
    started = time.monotonic()
    with pytest.raises(tf.errors.UnavailableError):
        monitored_session._RecoverableSession(PeerGone())
    assert 0.3 <= time.monotonic() - started < 10 and PeerGone.calls >= 2


def test_a_close_that_hangs_after_a_lost_peer_is_bounded(monkeypatch):
    """After DeadlineExceeded from a lost ps, MonitoredSession's exit hung in the session's close (TF 2.15)."""
    import threading

    import tensorflow as tf
    from tensorflow.python.training import monitored_session

    from estimator_mnist.tf_task.tf_workarounds import bound_close_after_an_error

    session_class = monitored_session._MonitoredSession
    monkeypatch.setattr(session_class, "__exit__", session_class.__exit__)  # the test's bound ends with it

    released, reported = threading.Event(), []

    class LostPs(tf.compat.v1.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            raise tf.errors.DeadlineExceededError(None, None, "Operation timed out")

    class HangingClose(tf.compat.v1.train.SessionCreator):
        def create_session(self):
            session = tf.compat.v1.Session()
            session.close = lambda: released.wait(30)  # GrpcSession::Close waiting for the lost ps
            return session

    def on_timeout(exc):
        reported.append(exc)
        released.set()

    bound_close_after_an_error(0.3, (tf.errors.DeadlineExceededError,), on_timeout)
    with tf.Graph().as_default():
        one = tf.constant(1)
        started = time.monotonic()
        with pytest.raises(tf.errors.DeadlineExceededError):
            with tf.compat.v1.train.MonitoredSession(HangingClose(), hooks=[LostPs()]) as session:
                session.run(one)
    assert [type(e) for e in reported] == [tf.errors.DeadlineExceededError]
    assert time.monotonic() - started < 10
