"""Preemption: the SIGTERM logic (fake clock, injected exit) and a real Estimator run that stops at the
step a SIGTERM arrived at, with the chief's checkpoint of that step."""

import signal
import threading
import time

import pytest

from tests.helpers import planned
from estimator_mnist.model_files import checkpoints
from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.tf_task.preemption import Preemption, stop_save_listeners
from estimator_mnist.tf_task.save_times import saves_recorded
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.tf_task.teardown import TeardownWatchdogHook
from tests.unit.fakes import dataset_of, fake_mnist


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def make(graceful=True, grace=60.0, saved=lambda: None):
    exits, clock = [], Clock()
    return (Preemption("worker:0", grace, graceful, exit_fn=lambda m, c: exits.append((m, c)), clock=clock,
                       saved=saved), exits, clock)


SAVED = "the final checkpoint (step 500) is saved"


@pytest.mark.parametrize("graceful", [True, False])
def test_a_sigterm_after_the_work_is_saved_ends_the_task_with_0(graceful):
    preemption, exits, _ = make(graceful=graceful, saved=lambda: SAVED)
    preemption.on_sigterm()
    assert exits == [(f"task worker:0: SIGTERM, but {SAVED}: nothing is lost; exiting with 0", 0)]


def test_ctrl_c_after_the_work_is_saved_ends_the_task_with_0_and_before_it_is_a_keyboard_interrupt():
    preemption, exits, _ = make(saved=lambda: SAVED)
    preemption.on_sigint()
    assert exits == [(f"task worker:0: Ctrl-C, but {SAVED}: nothing is lost; exiting with 0", 0)]
    preemption, exits, _ = make()
    with pytest.raises(KeyboardInterrupt):  # cli.main turns it into 130
        preemption.on_sigint()
    assert exits == []


def test_a_stop_whose_step_was_the_last_one_ends_with_0():
    state = {"saved": None}
    preemption, exits, _ = make(saved=lambda: state["saved"])
    preemption.stopped_at_step = 500
    state["saved"] = SAVED
    preemption.exit_after_stop("/m/model.ckpt-500")
    assert exits == [("task worker:0: task worker:0 preempted: stopped at step 500, latest checkpoint "
                      f"/m/model.ckpt-500, but {SAVED}: nothing is lost; exiting with 0", 0)]


def test_what_is_saved_is_the_final_checkpoint_or_for_the_evaluator_its_final_evaluation(tmp_path):
    from estimator_mnist.model_files.checkpoints import work_saved

    model_dir = str(tmp_path)
    assert work_saved(model_dir, 10, evaluates=False) is None
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-10"\n')
    (tmp_path / "model.ckpt-10.index").write_text("")
    assert work_saved(model_dir, 10, evaluates=False) == "the final checkpoint (step 10) is saved"
    assert work_saved(model_dir, 11, evaluates=False) is None
    assert work_saved(model_dir, 10, evaluates=True) is None
    (tmp_path / "eval_results.jsonl").write_text('{"global_step": 10, "accuracy": 0.9, "loss": 0.3}\n')
    assert work_saved(model_dir, 10, evaluates=True) == "the final checkpoint (step 10) is evaluated"


def test_a_trainer_raises_its_flag_and_a_repeat_of_the_same_sigterm_changes_nothing():
    preemption, exits, clock = make()
    assert preemption.flag == 0.0
    preemption.on_sigterm()
    assert preemption.flag == 1.0 and exits == []
    clock.now += 1.0
    preemption.on_sigterm()  # the group's SIGTERM and the parent's forwarded one: one request
    assert exits == []


def test_a_second_sigterm_ends_the_task_at_once_with_200():
    preemption, exits, clock = make()
    preemption.on_sigterm()
    clock.now += 5.0
    preemption.on_sigterm()
    assert exits == [("task worker:0: a second SIGTERM; exiting with 200 (retryable)", 200)]


def test_a_task_that_does_not_stop_gracefully_as_the_evaluator_exits_200_at_once():
    preemption, exits, _ = make(graceful=False)
    preemption.on_sigterm()
    assert exits == [("task worker:0: SIGTERM; exiting with 200 (retryable)", 200)]


def test_the_grace_period_running_out_ends_the_task():
    preemption, exits, _ = make(grace=0.2)
    preemption.on_sigterm()
    deadline = time.monotonic() + 10
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits == [("task worker:0: training.preemption_grace_secs=0.2 s ran out after SIGTERM; exiting with "
                      "200 (retryable)", 200)]


@pytest.fixture
def keep_sigterm_handler():
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def chief_run(tmp_path, max_steps, save_checkpoints_steps):
    """A one-process chief's (config, plan, exits, preemption, its training hooks) with the exit recorded."""
    config = config_from_dict({"cluster": {"chief": ["localhost:1"]}, "run_dir": str(tmp_path / "run"),
                               "training": {"batch_size_per_replica": 8, "max_steps": max_steps,
                                            "save_checkpoints_steps": save_checkpoints_steps}}, "test")
    plan = planned(config, TaskId("chief", 0))
    exits = []
    preemption = Preemption("chief:0", 60, graceful=True, exit_fn=lambda m, c: exits.append((m, c)))
    hooks = [h for h in runner.training_hooks(config, plan, preemption=preemption)
             if not isinstance(h, TeardownWatchdogHook)]  # it would end this process
    return config, plan, exits, preemption, hooks


def test_a_run_stops_at_the_step_of_the_sigterm_and_saves_it(tmp_path, keep_sigterm_handler):
    images, labels = fake_mnist(128)
    config, plan, exits, preemption, hooks = chief_run(tmp_path, 500, 200)

    def sigterm_soon():
        while (read_progress(config.run_dir).get("chief:0") or {}).get("local_step", 0) < 1:
            time.sleep(0.05)
        signal.raise_signal(signal.SIGTERM)  # handled in the main thread, between steps

    threading.Thread(target=sigterm_soon, daemon=True).start()
    estimator = runner.build_estimator(config, plan)
    train_spec, _ = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels),
                                                hooks=hooks)
    with saves_recorded(stop_save_listeners(hooks)):  # as runner.run_task does
        estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps)
    stopped = preemption.stopped_at_step
    assert stopped is not None and 1 <= stopped < 500
    assert checkpoints.latest_step(config.model_dir) == stopped  # the chief saved the stop step
    assert preemption.final_save.is_set()  # the saver's end told it (the mark waits for that)
    assert read_progress(config.run_dir)["chief:0"]["preempted_at"] == stopped
    # A restart: the counter restored from the checkpoint is the new baseline, so training goes on.
    preemption2 = Preemption("chief:0", 60, graceful=True, exit_fn=lambda m, c: exits.append((m, c)))
    hooks = [h for h in runner.training_hooks(config, plan, preemption=preemption2)
             if not isinstance(h, TeardownWatchdogHook)]
    estimator.train(train_spec.input_fn, hooks=hooks, max_steps=stopped + 3)
    assert preemption2.stopped_at_step is None and checkpoints.latest_step(config.model_dir) == stopped + 3


def test_a_session_lost_after_a_sigterm_ends_the_task_without_waiting_out_the_grace(tmp_path, keep_sigterm_handler):
    """Under MultiWorkerMirrored a lost peer fails each step's all-reduce with UnavailableError, and MonitoredSession
    re-creates the session: before a SIGTERM that is TensorFlow's recovery, after one no stop step can be agreed."""
    import tensorflow as tf

    images, labels = fake_mnist(128)
    config, plan, exits, preemption, hooks = chief_run(tmp_path, 12, 4)

    class LostPeer(tf.compat.v1.train.SessionRunHook):
        """The third run fails as a lost peer's all-reduce does; SIGTERM after the fifth; the sixth fails again."""
        runs, exits_at_sigterm = 0, None

        def after_run(self, run_context, run_values):
            self.runs += 1
            if self.runs == 5:
                self.exits_at_sigterm = list(exits)
                signal.raise_signal(signal.SIGTERM)  # handled in the main thread, between steps
            if self.runs in (3, 6):
                raise tf.errors.UnavailableError(None, None, "Socket closed")

    lost = LostPeer()
    estimator = runner.build_estimator(config, plan)
    train_spec, _ = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels),
                                                hooks=[lost, *hooks])  # first: it fails the run before the others
    estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps)
    assert lost.exits_at_sigterm == []  # the session re-created before the SIGTERM ended nothing
    assert exits == [("task chief:0: the training session was lost after SIGTERM (a peer left), so the trainers "
                      "cannot stop at one step; exiting with 200 (retryable)", 200)]
    assert preemption.stopped_at_step is None


def test_every_trainer_waits_for_the_chief_s_checkpoint_of_the_stop_step_within_a_bound(tmp_path):
    """A worker that exits first gets the chief signalled again under srun --kill-on-bad-exit: it waits."""
    from estimator_mnist.tf_task.preemption import Preemption, wait_for_stop_checkpoint

    preemption = Preemption("worker:0", 25, graceful=True, exit_fn=lambda *a: None)
    preemption.stopped_at_step = 20
    now, slept = [0.0], []

    def sleep(secs):
        slept.append(secs)
        now[0] += secs
        if len(slept) == 3:  # the chief's save lands
            (tmp_path / "model.ckpt-20.index").write_bytes(b"x")
            (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n')

    wait_for_stop_checkpoint(preemption, str(tmp_path), 25, sleep=sleep, clock=lambda: now[0])
    assert len(slept) == 3
    slept.clear()
    preemption.stopped_at_step = 30  # never saved (the chief lost): the wait ends at its bound
    wait_for_stop_checkpoint(preemption, str(tmp_path), 2, sleep=sleep, clock=lambda: now[0])
    assert 1.99 <= sum(slept) <= 2.21
    slept.clear()
    preemption.stopped_at_step = 20  # the others wait for the chief's mark too
    wait_for_stop_checkpoint(preemption, str(tmp_path), 1, sleep=sleep, clock=lambda: now[0], marked=True)
    assert 0.99 <= sum(slept) <= 1.21
    (tmp_path / "preempted.json").write_text('{"step": 20}')
    slept.clear()
    wait_for_stop_checkpoint(preemption, str(tmp_path), 1, sleep=sleep, clock=lambda: now[0], marked=True)
    assert slept == []


def test_under_a_ps_strategy_a_worker_that_stepped_past_the_chief_s_final_save_takes_its_mark(tmp_path):
    """Asynchronous trainers read the global step on their own: in CI the chief stopped at 31, its final save
    held the worker's step 32, and the worker, stopped at 32, waited its whole grace for a mark of step 32 that
    the chief (looking for its own 31) never wrote."""
    from estimator_mnist.model_files import preemption_mark
    from estimator_mnist.tf_task.preemption import mark_if_saved, wait_for_stop_checkpoint

    def saved(step):
        (tmp_path / f"model.ckpt-{step}.index").write_bytes(b"x")
        (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')

    saved(20)
    preemption_mark.write_mark(str(tmp_path), 20, "chief:0")  # an earlier stop's, never taken
    chief = Preemption("chief:0", 25, graceful=True, exit_fn=lambda *a: None)
    chief.stopped_at_step, chief.session_step = 31, 20
    worker = Preemption("worker:0", 25, graceful=True, exit_fn=lambda *a: None)
    worker.stopped_at_step, worker.session_step = 33, 21  # its last step came after the chief's final save
    now, slept = [0.0], []

    def sleep(secs):
        slept.append(secs)
        now[0] += secs

    wait_for_stop_checkpoint(worker, str(tmp_path), 1, sleep=sleep, clock=lambda: now[0], marked=True)
    assert 0.99 <= sum(slept) <= 1.21  # the stale mark is not this stop's
    saved(32)
    mark_if_saved(chief, str(tmp_path))
    assert chief.marked_step == 32 and preemption_mark.mark_step(str(tmp_path)) == 32
    slept.clear()
    wait_for_stop_checkpoint(worker, str(tmp_path), 1, sleep=sleep, clock=lambda: now[0], marked=True)
    assert slept == []
    assert preemption_mark.take_mark(str(tmp_path), 32)["task"] == "chief:0"  # the restart budget's count


def test_the_chief_s_mark_is_written_once_though_two_paths_end_it_at_once(tmp_path, monkeypatch):
    """The hook's teardown thread and run_trainer both call mark_if_saved; in a real Slurm run the two raced, and
    the second os.replace found the first one's temporary gone (FileNotFoundError, the chief exited 1)."""
    from estimator_mnist.model_files import preemption_mark
    from estimator_mnist.tf_task import preemption as module

    (tmp_path / "model.ckpt-20.index").write_bytes(b"x")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n')
    preemption = Preemption("chief:0", 25, graceful=True, exit_fn=lambda *a: None)
    preemption.stopped_at_step = 20
    writes, barrier = [], threading.Barrier(8)

    def write_mark(*args):
        writes.append(args)
        return preemption_mark.write_mark(*args)

    monkeypatch.setattr(module, "write_mark", write_mark)

    def end():
        barrier.wait()
        module.mark_if_saved(preemption, str(tmp_path))

    threads = [threading.Thread(target=end) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert writes == [(str(tmp_path), 20, "chief:0")]
    assert preemption_mark.take_mark(str(tmp_path), 20)["step"] == 20
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint", "model.ckpt-20.index"]
