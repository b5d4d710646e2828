"""A ps host lost mid-training, on the simulated hosts: every trainer exits 200 (retryable) within
`session.operation_timeout_ms` plus a margin, naming the ps, under both parameter-server strategies."""

import time

import pytest

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.model_files.progress import read_progress
from tests.e2e.test_multi_host import hosts, log_of, write  # noqa: F401  (hosts is the fixture)

OPERATION_TIMEOUT_MS = 10000
MARGIN_SECS = 30  # the trainer's own exit, and this test's polling, on 2 cores shared with other runs
PS_LOST = """
cluster: {{chief: ["192.0.2.1:2222"], worker: ["192.0.2.1:2223"], ps: ["192.0.2.2:2222"]}}
strategy: {strategy}
session: {{operation_timeout_ms: {timeout}}}
training: {{batch_size_per_replica: 32, max_steps: 100000, save_checkpoints_steps: {save},
            session_creation_timeout_secs: 90}}
model_dir: {root}/model
run_dir: {root}/run
data_dir: {data_dir}
"""
HOST_OF = {"ps:0": "b", "chief:0": "a", "worker:0": "a"}  # the ps alone on host b, whose link goes down


@pytest.mark.parametrize("strategy", ["parameter_server", "{name: parameter_server_sync, replicas_to_aggregate: 2}"])
def test_a_lost_ps_host_ends_every_trainer_retryably_naming_the_ps(tmp_path, mnist_data_dir, hosts, strategy):
    path = write(tmp_path, PS_LOST, mnist_data_dir, strategy=strategy, timeout=OPERATION_TIMEOUT_MS, save=20)
    procs = {task: hosts.start(HOST_OF[task], ["train", "--cluster", str(path), "--task", task],
                               tmp_path / f"{task.replace(':', '-')}.log") for task in HOST_OF}
    def both_training():
        # Both trainers past their first step: a sync-ps chief can make the 20 steps alone while the worker
        # (started 5 s later by Estimator) still forms its session, which would then wait out its own timeout.
        records = read_progress(str(tmp_path / "run"))
        return all((records.get(t) or {}).get("local_step", 0) >= 1 for t in ("chief:0", "worker:0"))

    deadline = time.monotonic() + 300
    while ((latest_step(str(tmp_path / "model")) or 0) < 20 or not both_training()) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), {t: log_of(tmp_path, t)[-2000:] for t in procs}
        time.sleep(0.2)
    hosts.link("b", up=False)
    trainers = {task: procs[task] for task in ("chief:0", "worker:0")}
    ended = hosts.wait_all(trainers, timeout=OPERATION_TIMEOUT_MS / 1000 + 120)
    codes = {task: proc.returncode for task, proc in trainers.items()}
    print(f"{strategy}: ps host lost; trainers exited {codes} after {ended} s")
    assert codes == {"chief:0": 200, "worker:0": 200}, {t: log_of(tmp_path, t)[-3000:] for t in trainers}
    assert max(ended.values()) < OPERATION_TIMEOUT_MS / 1000 + MARGIN_SECS, ended
    for task in trainers:
        assert "ps:0 (192.0.2.2:2222)" in log_of(tmp_path, task), log_of(tmp_path, task)[-3000:]
