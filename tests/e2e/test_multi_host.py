"""Tasks started by hand on two simulated hosts (network namespaces), with no launcher around.

They run with their own settings, end by themselves, and fail with an exit
code a cluster manager can act on: 200 (retryable) for a dead host or a
link lost in the middle of training, after which a restart resumes.
"""

import re
import time
import uuid

import pytest

from estimator_mnist.model_files.checkpoints import final_evaluation, latest_step
from estimator_mnist.model_files.progress import read_progress
from tests.e2e.simulated_hosts import SimulatedHosts, require_namespaces

TRAINING = """
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: {save},
            session_creation_timeout_secs: {session}}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0, batch_size: 2000}}
model_dir: {root}/model
run_dir: {root}/run
data_dir: {data_dir}
"""
MWMS = """
cluster: {{chief: ["192.0.2.1:2222"], worker: ["192.0.2.2:2222"]{evaluator}}}
strategy: {{name: multi_worker_mirrored, collective_timeout_secs: {collective}, gradient_compression: {compression}}}
tasks: {{worker: {{gpus: [1]}}, all: {{step_delay_ms: {delay}}}}}
""" + TRAINING
PS = """
cluster: {{chief: ["192.0.2.1:2222"], worker: ["192.0.2.2:2222"], ps: ["192.0.2.2:2223"], evaluator: 192.0.2.1}}
strategy: parameter_server
""" + TRAINING
HOST_OF = {"chief:0": "a", "worker:0": "b", "ps:0": "b", "evaluator:0": "a"}


@pytest.fixture
def hosts():
    require_namespaces()
    simulated = SimulatedHosts(uuid.uuid4().hex[:6])
    yield simulated
    simulated.close()


def write(tmp_path, template, mnist_data_dir, **fields):
    path = tmp_path / "cluster.yaml"
    fields.setdefault("compression", "none")
    fields.setdefault("session", 20)
    path.write_text(template.format(root=tmp_path, data_dir=mnist_data_dir, **fields), encoding="utf-8")
    return path


def start(hosts, path, tasks, tmp_path):
    return {task: hosts.start(HOST_OF[task], ["train", "--cluster", str(path), "--task", task],
                              tmp_path / f"{task.replace(':', '-')}.log") for task in tasks}


def log_of(tmp_path, task):
    return (tmp_path / f"{task.replace(':', '-')}.log").read_text(errors="replace")


def test_mwms_across_two_hosts_finishes_and_applies_each_task_s_settings(tmp_path, mnist_data_dir, hosts):
    # bfloat16 on the wire: a real cross-process all-reduce of 16-bit gradients (the unit tier has one process).
    path = write(tmp_path, MWMS, mnist_data_dir, steps=40, save=20, collective=60, delay=0, compression="bf16",
                 evaluator=', evaluator: 192.0.2.1')
    procs = start(hosts, path, ["chief:0", "worker:0", "evaluator:0"], tmp_path)
    ended = hosts.wait_all(procs, timeout=400)
    assert {t: p.returncode for t, p in procs.items()} == {"chief:0": 0, "worker:0": 0, "evaluator:0": 0}, \
        {t: log_of(tmp_path, t)[-2000:] for t in procs}
    assert final_evaluation(str(tmp_path / "model"), 40)["global_step"] >= 40
    assert ended["chief:0"] >= ended["evaluator:0"] - 1  # the chief waited for the final evaluation
    first = next(line for line in log_of(tmp_path, "worker:0").splitlines() if "role=worker" in line)
    assert "CUDA_VISIBLE_DEVICES='1'" in first  # the worker's gpus, applied on the host that runs it
    assert "gradient_compression=bf16" in first


def test_async_ps_across_two_hosts_ends_every_task_by_itself(tmp_path, mnist_data_dir, hosts):
    path = write(tmp_path, PS, mnist_data_dir, steps=60, save=30)
    procs = start(hosts, path, ["ps:0", "chief:0", "worker:0", "evaluator:0"], tmp_path)
    hosts.wait_all(procs, timeout=400)
    assert {t: p.returncode for t, p in procs.items()} == dict.fromkeys(procs, 0), \
        {t: log_of(tmp_path, t)[-2000:] for t in procs}
    assert "every trainer and the evaluator finished" in log_of(tmp_path, "ps:0")


def test_a_dead_host_is_named_with_the_retryable_code(tmp_path, mnist_data_dir, hosts):
    session = 10  # training.session_creation_timeout_secs: what the chief waits out here
    path = write(tmp_path, MWMS, mnist_data_dir, steps=40, save=20, collective=60, delay=0, evaluator="",
                 session=session)
    hosts.link("b", up=False)
    procs = start(hosts, path, ["chief:0"], tmp_path)
    ended = hosts.wait_all(procs, timeout=120)
    print(f"dead host: chief exit {procs['chief:0'].returncode} after {ended} s")
    assert procs["chief:0"].returncode == 200, log_of(tmp_path, "chief:0")[-3000:]
    assert ended["chief:0"] < session + 30  # session_creation_timeout_secs plus a margin
    assert "these peers do not answer: worker:0 (192.0.2.2:2222)" in log_of(tmp_path, "chief:0")


def test_a_link_lost_mid_training_ends_every_trainer_retryably_and_a_restart_resumes(tmp_path, mnist_data_dir,
                                                                                      hosts):
    collective = 10
    # 120 steps: the link goes at the first checkpoint (20), the restart trains the rest at 50 ms a step.
    path = write(tmp_path, MWMS, mnist_data_dir, steps=120, save=20, collective=collective, delay=50, evaluator="")
    procs = start(hosts, path, ["chief:0", "worker:0"], tmp_path)
    deadline = time.monotonic() + 300
    while (latest_step(str(tmp_path / "model")) or 0) < 20 and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), {t: log_of(tmp_path, t)[-2000:] for t in procs}
        time.sleep(0.2)
    step_at_loss = read_progress(str(tmp_path / "run"))["chief:0"]["global_step"]
    hosts.link("b", up=False)
    ended = hosts.wait_all(procs, timeout=collective + 120)
    codes = {t: p.returncode for t, p in procs.items()}
    print(f"link lost at step {step_at_loss}: exits {codes} after {ended} s")
    assert codes == {"chief:0": 200, "worker:0": 200}, {t: log_of(tmp_path, t)[-3000:] for t in procs}
    assert max(ended.values()) < collective + 45, ended
    assert re.search(r"task chief:0 lost .*worker:0 \(192\.0\.2\.2:2222\)", log_of(tmp_path, "chief:0"))
    saved = latest_step(str(tmp_path / "model"))
    assert 20 <= saved <= step_at_loss + 20

    hosts.link("b", up=True)
    again = start(hosts, path, ["chief:0", "worker:0"], tmp_path)
    hosts.wait_all(again, timeout=400)
    assert {t: p.returncode for t, p in again.items()} == {"chief:0": 0, "worker:0": 0}
    assert re.search(rf"Restoring parameters from .*model\.ckpt-{saved}\b", log_of(tmp_path, "chief:0"))
    assert latest_step(str(tmp_path / "model")) == 120
