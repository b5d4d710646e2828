"""A slow, lossy link between the simulated hosts (netem's `delay 10ms loss 0.1%`, by the stand-in in
netem_link.py, as this kernel has no sch_netem): an MWMS run and an asynchronous ps run both finish, each
task started once and ending 0, with frames really delayed and dropped on the way. Worse links are measured
by benchmarks/degraded_network.py."""

import json
import uuid

import pytest

from estimator_mnist.model_files.checkpoints import final_evaluation
from estimator_mnist.model_files.progress import read_progress
from tests.e2e.simulated_hosts import Netem, SimulatedHosts, require_namespaces
from tests.e2e.test_multi_host import MWMS, PS, log_of, start, write

LINK = Netem(delay_ms=10, loss=0.001, seed=36)


@pytest.fixture
def slow_hosts(tmp_path):
    require_namespaces()
    simulated = SimulatedHosts(uuid.uuid4().hex[:6], netem=LINK, stats=tmp_path / "link.json")
    yield simulated
    simulated.close()


def finished_once(tmp_path, slow_hosts, procs, steps):
    """Every task ended 0 by itself, and the run's own records show one start of each trainer; the link's
    counts show the frames it carried and the frames it dropped."""
    slow_hosts.wait_all(procs, timeout=240)
    assert {t: p.returncode for t, p in procs.items()} == dict.fromkeys(procs, 0), \
        {t: log_of(tmp_path, t)[-2000:] for t in procs}
    assert final_evaluation(str(tmp_path / "model"), steps)["global_step"] >= steps
    records = read_progress(str(tmp_path / "run"))
    trainers = [t for t in procs if t.split(":")[0] in ("chief", "worker")]
    for task in trainers:  # the record of the process this test started, not of a later one
        assert records[task]["done"] and records[task]["parent_pid"] == procs[task].pid, records[task]
    slow_hosts.stop_forwarder()
    counts = json.loads((tmp_path / "link.json").read_text())
    print(f"link {LINK}: {counts}")
    assert all(c["frames"] > 0 for c in counts.values()), counts
    assert sum(c["lost"] for c in counts.values()) > 0, counts  # the run survived real losses
    return records, trainers


def test_mwms_over_a_slow_lossy_link_finishes_without_a_restart(tmp_path, mnist_data_dir, slow_hosts):
    steps = 30
    path = write(tmp_path, MWMS, mnist_data_dir, steps=steps, save=steps, collective=60, delay=0,
                 evaluator=', evaluator: 192.0.2.1')
    procs = start(slow_hosts, path, ["chief:0", "worker:0", "evaluator:0"], tmp_path)
    records, trainers = finished_once(tmp_path, slow_hosts, procs, steps)
    # Synchronous: each trainer made every step itself, from step 0, in the one process started.
    assert all(records[task]["local_step"] == steps for task in trainers), records


def test_async_ps_over_a_slow_lossy_link_finishes_without_a_restart(tmp_path, mnist_data_dir, slow_hosts):
    steps = 40
    path = write(tmp_path, PS, mnist_data_dir, steps=steps, save=steps)
    procs = start(slow_hosts, path, ["ps:0", "chief:0", "worker:0", "evaluator:0"], tmp_path)
    records, trainers = finished_once(tmp_path, slow_hosts, procs, steps)
    assert sum(records[task]["local_step"] for task in trainers) >= steps, records
