"""Preemption with real clusters: a SIGTERM to one task (a trainer, or the ps task) stops every trainer at the same
step, the chief saves it, all exit 200 within the grace period, and starting the tasks again resumes from that
checkpoint."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.model_files.preemption_mark import mark_step
from estimator_mnist.model_files.progress import read_progress
from tests.helpers import REPO, free_ports

GRACE = 25
STEPS = 100  # the SIGTERM comes after the first checkpoint (step 20); the restart trains the rest
SETTINGS = """
training: {{batch_size_per_replica: 32, max_steps: 100, save_checkpoints_steps: 20, preemption_grace_secs: 25}}
tasks: {{all: {{step_delay_ms: 50}}}}
run_dir: {root}/run
data_dir: {data_dir}
"""
MWMS = 'cluster: {{chief: ["localhost:{p0}"], worker: ["localhost:{p1}"]}}\n' + SETTINGS
PS = ('cluster: {{chief: ["localhost:{p0}"], worker: ["localhost:{p1}"], ps: ["localhost:{p2}"]}}\n'
      'strategy: parameter_server\n' + SETTINGS)


class Tasks:
    def __init__(self, tmp_path, template, mnist_data_dir):
        ports = {f"p{i}": port for i, port in enumerate(free_ports(3))}
        self.root, self.path = tmp_path, tmp_path / "cluster.yaml"
        self.path.write_text(template.format(root=tmp_path, data_dir=mnist_data_dir, **ports), encoding="utf-8")
        self.procs = {}

    def start(self, *tasks):
        for task in tasks:
            log = open(self.root / f"{task.replace(':', '-')}.log", "ab")
            self.procs[task] = subprocess.Popen([sys.executable, "-m", "estimator_mnist", "train", "--cluster",
                                                 str(self.path), "--task", task], cwd=REPO, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, tasks, timeout):
        deadline, ended = time.monotonic() + timeout, {}
        started = time.monotonic()
        while len(ended) < len(tasks) and time.monotonic() < deadline:
            for task in tasks:
                if task not in ended and self.procs[task].poll() is not None:
                    ended[task] = time.monotonic() - started
            time.sleep(0.1)
        return ended

    def log(self, task):
        return (self.root / f"{task.replace(':', '-')}.log").read_text(errors="replace")

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# The signalled trainer is not the chief here: a SIGTERM the chief gets beside its peers, as Slurm and Kubernetes
# send it, is test_slurm.py's scancel (every task at once) and test_restart_budget_pods.py's (the chief alone).
# Under parameter_server the ps task alone is signalled (Kubernetes draining its node): the trainers, which got no
# SIGTERM, stop at the request it raises, and it stays until they have left (ps_preemption.py); a trainer's own
# request works under it as under MultiWorkerMirrored (the same counter, on the ps task).
@pytest.mark.parametrize("template, victim", [(MWMS, "worker:0"), (PS, "ps:0")], ids=["mwms-worker", "ps-ps"])
def test_sigterm_to_one_task_stops_all_trainers_at_a_saved_step_and_a_restart_resumes(tmp_path, mnist_data_dir,
                                                                                      template, victim):
    tasks = Tasks(tmp_path, template, mnist_data_dir)
    trainers = ["chief:0", "worker:0"]
    every = (["ps:0"] if template is PS else []) + trainers
    try:
        tasks.start(*every)
        deadline = time.monotonic() + 300
        while (latest_step(str(tmp_path / "run" / "model")) or 0) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        records = read_progress(str(tmp_path / "run"))
        logged = max([latest_step(str(tmp_path / "run" / "model"))] +
                     [records[t]["global_step"] or 0 for t in trainers if t in records])
        tasks.procs[victim].send_signal(signal.SIGTERM)  # to the process Kubernetes would signal: train's parent
        ended = tasks.wait(every, timeout=GRACE + 30)
        print(f"SIGTERM to {victim} at step {logged}: exits after {ended} s")
        assert {t: tasks.procs[t].returncode for t in every} == {t: 200 for t in every}, \
            {t: tasks.log(t)[-2500:] for t in every}
        assert max(ended.values()) <= GRACE
        saved = latest_step(str(tmp_path / "run" / "model"))
        assert saved >= logged and saved < STEPS
        # The chief wrote the checkpoint of the step it stopped at. Under the ps strategy the trainers step on their
        # own: a worker's last step can come after the chief's, and the chief's final save holds it.
        stop = re.search(rf"task chief:0 preempted: stopped at step (\d+), latest checkpoint \S+-{saved}\b",
                         tasks.log("chief:0"))
        assert stop and (int(stop.group(1)) == saved if template is MWMS else int(stop.group(1)) <= saved)
        assert mark_step(str(tmp_path / "run" / "model")) == saved  # the restart budget counts no incident
        if victim == "ps:0":  # it raised the request, and left once the trainers had (their ports closed)
            assert "asked the trainers to stop at one step" in tasks.log("ps:0")
            assert "task ps:0: SIGTERM, and every trainer has left; exiting with 200" in tasks.log("ps:0")

        tasks.start(*every)
        tasks.wait(every, timeout=400)
        assert {t: tasks.procs[t].returncode for t in every} == {t: 0 for t in every}
        assert re.search(rf"Restoring parameters from .*model\.ckpt-{saved}\b", tasks.log("chief:0"))
        assert latest_step(str(tmp_path / "run" / "model")) >= STEPS
    finally:
        tasks.close()


LAUNCHED = """
cluster: {{chief: ["localhost:{p0}"], worker: ["localhost:{p1}"], evaluator: localhost}}
training: {{batch_size_per_replica: 32, max_steps: 200, save_checkpoints_steps: 100}}
tasks: {{all: {{step_delay_ms: 50}}}}
restart: {{policy: on_failure, max_restarts: 2, backoff_secs: 1}}
run_dir: {run_dir}
data_dir: {data_dir}
"""


def test_under_the_launcher_a_preemption_costs_a_restart_not_the_steps_since_the_checkpoint(tmp_path,
                                                                                           mnist_data_dir):
    from tests.helpers import start_launch, write_cluster

    proc = start_launch(write_cluster(tmp_path, LAUNCHED, 2, data_dir=mnist_data_dir))
    deadline = time.monotonic() + 300
    record = None
    while time.monotonic() < deadline and proc.poll() is None:
        record = read_progress(str(tmp_path / "run")).get("worker:0")
        if record and 30 <= record["global_step"] < 90:
            break
        time.sleep(0.2)
    assert record is not None and proc.poll() is None
    os.kill(record["parent_pid"], signal.SIGTERM)  # between periodic checkpoints (every 100 steps)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"preempted at step \d+, checkpoint \d+ written", out), out[-3000:]
    summary = __import__("json").loads((tmp_path / "run" / "run_summary.json").read_text())
    [restart] = summary["restarts"]
    assert restart["restored_checkpoint_step"] >= 30 and restart["steps_redone"] <= 2
    assert summary["global_step"] == 200 and summary["accuracy"] is not None
