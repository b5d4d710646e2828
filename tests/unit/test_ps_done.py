"""How a ps task decides that the run is over, or that it waited long enough (fake clock, fake probe), and
when each trainer tells it that it finished."""

import pytest

from estimator_mnist.tf_task import roles, runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.tf_task.ps_done import PsDoneWatcher
from estimator_mnist.plan.task_plan import plan_task

TRAINERS = [("chief:0", "a:1"), ("worker:0", "b:1")]


class World:
    def __init__(self):
        self.now, self.reachable = 0.0, {"chief:0", "worker:0"}

    def clock(self):
        return self.now

    def probe(self, peers, timeout):
        return [name for name, _ in peers if name not in self.reachable]


def watcher(world, evaluator=True):
    expected = ["chief:0", "worker:0"] + (["evaluator:0"] if evaluator else [])
    return PsDoneWatcher(expected, TRAINERS, idle_secs=30, final_secs=60, clock=world.clock, probe=world.probe)


def test_done_once_every_trainer_and_the_evaluator_reported():
    w = watcher(World())
    for name in ("worker:0", "chief:0", "chief:0"):  # a restarted trainer may report twice
        w.heard(name)
        assert not w.done
    w.heard("evaluator:0")
    assert w.done


def test_no_evaluator_means_the_trainers_are_enough():
    w = watcher(World(), evaluator=False)
    w.heard("chief:0")
    w.heard("worker:0")
    assert w.done


def test_a_ps_nobody_reaches_gives_up_retryably():
    world = World()
    w = watcher(world)
    world.reachable = {"worker:0"}
    world.now = 100
    w.check()  # one trainer still answers
    world.reachable = set()
    world.now = 120
    w.check()  # unreachable for 20 s only
    world.now = 131
    with pytest.raises(RetryableFailure, match=r"no trainer reached this ps task for training\.ps_idle_timeout_secs="
                                               r"30 s \(chief:0, worker:0 unreachable\)"):
        w.check()


def test_finished_trainers_are_not_missed_but_a_silent_evaluator_is_permanent():
    world = World()
    w = watcher(world)
    w.heard("chief:0")
    w.heard("worker:0")
    world.reachable = set()  # they exited after reporting
    world.now = 59
    w.check()
    world.now = 61
    with pytest.raises(PermanentFailure, match=r"training finished but evaluator:0 did not report within "
                                               r"evaluation\.final_timeout_secs=60 s"):
        w.check()


PS_CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]}
CHIEF, WORKER = TaskId("chief", 0), TaskId("worker", 0)


def ps_config(tmp_path, strategy="parameter_server"):
    cluster = PS_CLUSTER if strategy.startswith("parameter_server") else {"chief": ["localhost:1"],
                                                                          "worker": ["localhost:2"]}
    return config_from_dict({"cluster": cluster, "strategy": strategy, "training": {"max_steps": 200},
                             "run_dir": str(tmp_path / "run")}, "t.yaml")


def test_the_chief_reports_from_no_hook_since_its_final_save_comes_after_every_hook_s_end(tmp_path):
    # TF 2.15 calls the training hooks' end before the chief-only checkpoint saver's: a report from a hook let
    # the ps leave while the chief's final save still read the ps's variables.
    config = ps_config(tmp_path)
    reporters = {task: [h for h in runner.training_hooks(config, plan_task(config, task))
                        if isinstance(h, roles.DoneSignalHook)] for task in (CHIEF, WORKER)}
    assert reporters[CHIEF] == [] and len(reporters[WORKER]) == 1


@pytest.mark.parametrize("strategy, task, latest, reports", [
    ("parameter_server", CHIEF, 201, True),
    ("parameter_server_sync", CHIEF, 200, True),
    ("parameter_server", CHIEF, 180, False),      # stopped short (a preemption): the ps stays for the restart
    ("parameter_server", CHIEF, None, False),
    ("parameter_server_sync", WORKER, 200, True),  # its hook's end never ran: the teardown watchdog ended it
    ("parameter_server", WORKER, 180, False),
    ("multi_worker_mirrored", CHIEF, 200, False),  # no ps
])
def test_a_trainer_reports_to_the_ps_once_the_final_checkpoint_is_on_disk(tmp_path, monkeypatch, strategy, task,
                                                                          latest, reports):
    sent = []
    monkeypatch.setattr(roles, "signal_done", lambda addresses, name, timeout_ms, log: sent.append((addresses, name)))
    monkeypatch.setattr(roles.checkpoints, "latest_step", lambda model_dir: latest)
    monkeypatch.setattr(roles, "_REPORTED", set())
    config = ps_config(tmp_path, strategy)
    roles.report_final_checkpoint(config, plan_task(config, task))
    assert sent == ([(["localhost:3"], str(task))] if reports else [])


class _Session:
    def __init__(self, step):
        self.step = step

    def run(self, _fetch):
        return self.step


@pytest.mark.parametrize("hook_step, reports", [(200, ["worker:0"]), (150, ["worker:0"])],
                         ids=["its_hook_reported", "its_hook_saw_no_last_step"])
def test_a_worker_reports_once_from_its_hook_or_else_when_the_teardown_watchdog_ends_it(
        tmp_path, monkeypatch, hook_step, reports):
    # A backup worker of parameter_server_sync blocks in its last step's token queue; the teardown watchdog ends
    # it before its hooks' end. Unreported, the ps served on until launch's finish timeout (60 s), or under a
    # cluster manager until training.ps_idle_timeout_secs, then exited 200.
    sent = []
    monkeypatch.setattr(roles, "signal_done", lambda addresses, name, timeout_ms, log: sent.append(name))
    monkeypatch.setattr(roles.checkpoints, "latest_step", lambda model_dir: 200)
    monkeypatch.setattr(roles, "_REPORTED", set())
    monkeypatch.setattr(roles, "_FINISHED", set())
    config = ps_config(tmp_path, "parameter_server_sync")
    plan = plan_task(config, WORKER)
    hook = roles.DoneSignalHook(config, plan)
    hook._step = None  # pylint: disable=protected-access  # begin() needs a graph; the session is a stand-in
    hook.end(_Session(hook_step))
    runner._before_teardown_exit(config, plan, progress=type("Progress", (), {"report": lambda self, step: None})())
    assert sent == reports


def test_the_trainer_finishes_once_though_training_s_return_and_the_teardown_watchdog_both_finish_it(
        tmp_path, monkeypatch):
    # A second report to a ps that has already left would wait out the operation timeout before the exit.
    sent = []
    monkeypatch.setattr(roles, "signal_done", lambda addresses, name, timeout_ms, log: sent.append(name))
    monkeypatch.setattr(roles.checkpoints, "latest_step", lambda model_dir: 200)
    monkeypatch.setattr(roles, "_FINISHED", set())
    monkeypatch.setattr(roles, "_REPORTED", set())
    config = ps_config(tmp_path)
    plan = plan_task(config, CHIEF)
    roles.finish_training(config, plan)
    runner._before_teardown_exit(config, plan, progress=type("Progress", (), {"report": lambda self, step: None})())
    assert sent == ["chief:0"]
