"""model_dir on a bucket, end to end, against a real GCS API server (fake-gcs-server) behind the tests' loopback
HTTPS proxy, with TensorFlow's built-in gs:// file system and the product's storage layer (google-cloud-storage):
no mock of either. The machines share nothing but the bucket: every task's run_dir is its own.

- `launch` of a chief, a worker and an evaluator trains, evaluates and exports into the bucket, through 503s the
  proxy injects into TensorFlow's requests and the product's own; nothing local is named after the bucket.
- Kubeflow's TF_CONFIG, each pod re-created after every exit with a fresh run_dir: a preemption (SIGTERM to the
  worker) resumes from a newer checkpoint and the job finishes. GCS_PREEMPTIONS=3 runs the issue's three.
- Bad input before any task starts: a bucket that does not exist, no credentials.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from estimator_mnist import storage
from estimator_mnist.model_files.checkpoints import latest_step, read_eval_results
from estimator_mnist.model_files.progress import read_progress
from tests.e2e.simulated_hosts import require_namespaces
from tests.e2e.simulated_pods import SimulatedPods
from tests.gcs_netns import NamespaceListener
from tests.gcs_faults import PRODUCT_AGENT, TF_AGENT
from tests.helpers import CLUSTER_YAML, REPO, free_ports, launch_cluster

# The suite's cluster (tests/helpers.py) as a chief, a worker and an evaluator, with model_dir in the bucket.
TWO_WORKERS = 'worker: ["localhost:{p0}", "localhost:{p1}"]'
assert TWO_WORKERS in CLUSTER_YAML
GCS_YAML = CLUSTER_YAML.replace(TWO_WORKERS, 'chief: ["localhost:{p0}"]\n  worker: ["localhost:{p1}"]') \
    + "model_dir: {model_dir}\n"
STEPS, SAVE = 40, 20
POD_YAML = """
strategy: {{name: multi_worker_mirrored, communication: ring, collective_timeout_secs: 300}}
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: {steps}, log_step_count_steps: 5,
           preemption_grace_secs: 30, teardown_timeout_secs: 5}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
tasks: {{all: {{step_delay_ms: 40}}}}
data_dir: {data_dir}
"""
PREEMPTIONS = int(os.environ.get("GCS_PREEMPTIONS", "1"))
WAIT_SECS = 240


@pytest.fixture(scope="module")
def bucket_run(gcs_server, mnist_data_dir, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gcs_run")
    gcs_server.proxy.reset()
    bucket = gcs_server.create_bucket()
    model_dir = f"gs://{bucket}/runs/mnist"
    # Faults in both clients' traffic, each only in its client's (by User-Agent): TensorFlow's own requests for
    # the checkpoint state file (the product reads that file too, and without the agent its reads took the
    # three 503s before TensorFlow asked), and the product's own for its evaluation records.
    faults = [gcs_server.proxy.inject(503, times=3, name="checkpoint", agent=TF_AGENT),
              gcs_server.proxy.inject(503, times=3, name="eval_results.jsonl", agent=PRODUCT_AGENT)]
    code, out, summary = launch_cluster(tmp_path, GCS_YAML, 2, steps=STEPS, save=SAVE, data_dir=mnist_data_dir,
                                        model_dir=model_dir, env={**os.environ, **gcs_server.env()})
    run = {"code": code, "out": out, "summary": summary, "bucket": bucket, "model_dir": model_dir,
           "tmp": tmp_path, "faults": [f.hits for f in faults],
           "fault_agents": [sorted(set(f.hit_agents)) for f in faults], "refused": list(gcs_server.proxy.refused),
           "objects": gcs_server.objects(bucket)}
    gcs_server.proxy.reset()
    return run


def test_launch_trains_evaluates_and_exports_into_the_bucket(bucket_run):
    out = bucket_run["out"]
    assert bucket_run["code"] == 0, out
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(rf"finished: accuracy=(?P<acc>[\d.]+) global_step={STEPS} export=(?P<export>\S+)", last)
    assert match and match["export"].startswith(bucket_run["model_dir"] + "/export/latest/"), last
    names = bucket_run["objects"]
    assert f"runs/mnist/model.ckpt-{STEPS}.index" in names and "runs/mnist/checkpoint" in names
    assert any(re.fullmatch(r"runs/mnist/events\.out\.tfevents\..*", n) for n in names)
    assert any(re.fullmatch(r"runs/mnist/export/latest/\d+/saved_model\.pb", n) for n in names)
    assert not any("/export/latest/temp-" in n for n in names), names  # no temporary export left behind
    assert {"runs/mnist/eval_results.jsonl", "runs/mnist/progress/chief-0.json",
            "runs/mnist/progress/worker-0.json"} <= set(names)
    assert bucket_run["faults"] == [3, 3]  # TensorFlow and the product each met their own 503s and went on
    tf_agents, product_agents = bucket_run["fault_agents"]
    assert tf_agents == [TF_AGENT] and product_agents and product_agents[0].startswith(PRODUCT_AGENT)
    assert bucket_run["refused"] == []  # nothing tried to leave the machine


def test_nothing_local_is_named_after_the_bucket(bucket_run):
    for root in (bucket_run["tmp"], REPO):
        assert not list(Path(root).glob("gs:*")) and not list(Path(root).glob(f"**/{bucket_run['bucket']}"))


def test_the_evaluations_in_the_bucket_are_read_where_they_are(bucket_run, gcs_server):
    env = {**os.environ, **gcs_server.env()}
    for key, value in gcs_server.env().items():
        os.environ.setdefault(key, value)  # this process's storage layer reads the bucket too
    evaluations = read_eval_results(bucket_run["model_dir"])
    assert evaluations and evaluations[-1]["global_step"] == STEPS and evaluations[-1]["final"]
    summary = subprocess.run([sys.executable, "-m", "estimator_mnist", "summary", str(bucket_run["tmp"] / "run")],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert summary.returncode == 0 and bucket_run["model_dir"] in summary.stdout, summary.stderr


class Pods:
    """A TFJob's pods (Kubeflow's exact TF_CONFIG in a network namespace of the test's, tests/e2e/simulated_pods.py),
    each re-created after every exit as training-operator v1.9 does under restartPolicy ExitCode (200 is
    retryable): a fresh `train` with a fresh run_dir each time, nothing kept but the bucket, which the pods reach
    through the GCS proxy's listener inside their namespace."""

    def __init__(self, tmp_path, yaml_file, model_dir, gcs_server):
        self.simulated = SimulatedPods(uuid.uuid4().hex[:6], {"Chief": 1, "Worker": 1, "Evaluator": 1})
        self.listener = NamespaceListener(gcs_server.proxy, self.simulated.ns)
        self.env = self.listener.env({**os.environ, **gcs_server.env()})
        self.tmp, self.yaml, self.model_dir = tmp_path, yaml_file, model_dir
        self.procs, self.starts, self.done = {}, {}, set()

    def start(self, name):
        kind, index = name.split(":")
        number = self.starts[name] = self.starts.get(name, 0) + 1
        run_dir, log = self.tmp / f"{kind}-{number}" / "run", self.tmp / f"{kind}-{number}.log"
        self.procs[name] = self.simulated.start(kind, int(index), [
            "train", "--cluster", str(self.yaml), "--model-dir", self.model_dir, "--run-dir", str(run_dir)], log,
            env=self.env)

    def keep_running(self) -> set:
        """Re-creates each pod that exited 200; the names of those that exited 0 (done)."""
        for name, proc in list(self.procs.items()):
            code = proc.poll()
            if code is None or name in self.done:
                continue
            assert code in (0, 200), f"{name} exited {code}:\n{self.logs()}"
            if code == 200:
                self.start(name)
            else:
                self.done.add(name)
        return self.done

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.tmp.glob("*.log")))

    def close(self):
        self.simulated.close()
        self.listener.close()


def _wait(pods, predicate, what):
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline:
        pods.keep_running()
        if predicate():
            return
        time.sleep(0.3)
    pytest.fail(f"{what} did not happen within {WAIT_SECS} s:\n{pods.logs()}")


def _trained_past(model_dir, step):
    return any((r.get("global_step") or 0) >= step for r in read_progress(model_dir).values()
               if r.get("task") in ("chief:0", "worker:0"))


def test_pods_with_nothing_but_the_bucket_resume_after_preemptions_and_finish(gcs_server, mnist_data_dir, tmp_path,
                                                                             monkeypatch):
    bucket = gcs_server.create_bucket()
    model_dir = f"gs://{bucket}/job"
    for key, value in gcs_server.env().items():
        monkeypatch.setenv(key, value)  # this process reads the bucket too (progress, checkpoints)
    yaml_file = tmp_path / "job.yaml"
    steps = 40 + 30 * PREEMPTIONS
    yaml_file.write_text(POD_YAML.format(steps=steps, data_dir=mnist_data_dir))
    require_namespaces()
    pods = Pods(tmp_path, yaml_file, model_dir, gcs_server)
    try:
        for name in ("chief:0", "worker:0", "evaluator:0"):
            pods.start(name)
        stops = [0]
        for number in range(1, PREEMPTIONS + 1):
            _wait(pods, lambda: _trained_past(model_dir, stops[-1] + 10), f"preemption {number}: progress")
            before = dict(pods.starts)
            pods.procs["worker:0"].send_signal(signal.SIGTERM)  # the kubelet's SIGTERM: its node is taken away
            _wait(pods, lambda: all(pods.starts[n] > before[n] for n in ("chief:0", "worker:0")),
                  f"preemption {number}: both trainers re-created")
            stops.append(latest_step(model_dir))
            assert stops[-1] > stops[-2], (stops, pods.logs())
        _wait(pods, lambda: {"chief:0", "worker:0", "evaluator:0"} <= pods.keep_running(), "the job's end")
        evaluations = read_eval_results(model_dir)
        assert evaluations[-1]["global_step"] >= steps and evaluations[-1]["final"], pods.logs()
        record = storage.read_json(storage.join(model_dir, "restart_budget.json"))
        assert record and len(record["preemptions"]) == PREEMPTIONS and record["incidents"] == [], (record, pods.logs())
        assert not list(tmp_path.glob("**/gs:*")) and gcs_server.proxy.refused == []
    finally:
        pods.close()


def test_a_bucket_that_does_not_exist_is_one_line_exit_2_before_any_task(gcs_server, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"cluster: {{chief: ['localhost:{free_ports(1)[0]}']}}\nrun_dir: {tmp_path / 'run'}\n"
                       "model_dir: gs://no-such-bucket-anywhere/run\n")
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(cluster)],
                          capture_output=True, text=True, env={**os.environ, **gcs_server.env()}, cwd=REPO,
                          timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "gs://no-such-bucket-anywhere" in lines[0] and "does not exist" in lines[0]
    assert not (tmp_path / "run" / "logs").exists()


def _copy_export(source: str, target: str) -> None:
    """A newer export written into the bucket as an evaluation writes one: saved_model.pb last."""
    files = storage.store_for(source).walk_files(source)
    for url in sorted(files, key=lambda u: u.endswith("/saved_model.pb")):
        if not url.endswith("/"):
            storage.write_atomic(target + url[len(source):], storage.read_bytes(url))


def test_serve_answers_from_the_bucket_and_picks_up_a_newer_export(bucket_run, gcs_server, mnist_data_dir,
                                                                  monkeypatch):
    from estimator_mnist.mnist_data.arrays import load_split_numpy  # pylint: disable=import-outside-toplevel
    from tests.serve_helpers import Server  # pylint: disable=import-outside-toplevel

    for key, value in gcs_server.env().items():
        monkeypatch.setenv(key, value)  # serve's process, and this one, reach the bucket
    images, labels = load_split_numpy("test", mnist_data_dir)
    images, labels = images[:100], labels[:100]
    export_base = storage.join(bucket_run["model_dir"], "export", "latest")
    first = max(int(name) for name in storage.listdir(export_base) if name.isdigit())
    server = Server(bucket_run["model_dir"])
    try:
        server.wait_for_version(first)
        answer = server.predict({"signature_name": "images", "instances": (images / 255.0).tolist()})
        assert answer.ok, answer.text
        classes = [int(p["class_ids"]) for p in answer.json()["predictions"]]
        assert sum(c == l for c, l in zip(classes, labels)) >= 80  # a 40-step model: most digits right
        _copy_export(storage.join(export_base, str(first)), storage.join(export_base, str(first + 1000)))
        server.wait_for_version(first + 1000, timeout=120)
        again = server.predict({"signature_name": "images", "instances": (images[:5] / 255.0).tolist()})
        assert again.ok and [int(p["class_ids"]) for p in again.json()["predictions"]] == classes[:5]
    finally:
        assert server.stop() in (0, 130), "".join(server.lines)


def test_no_credentials_is_one_line_exit_2_before_any_task(gcs_server, tmp_path):
    """Without the emulator's variable the client looks for Google's default credentials: none here (no key
    file, no gcloud login; NO_GCE_CHECK=true keeps google-auth off the metadata server)."""
    bucket = gcs_server.create_bucket()
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"cluster: {{chief: ['localhost:{free_ports(1)[0]}']}}\nrun_dir: {tmp_path / 'run'}\n"
                       f"model_dir: gs://{bucket}/run\n")
    env = {k: v for k, v in {**os.environ, **gcs_server.env()}.items()
           if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env["CLOUDSDK_CONFIG"] = str(tmp_path / "gcloud")
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "launch", "--cluster", str(cluster)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no Google Cloud credentials were found" in lines[0], \
        proc.stderr
    assert not (tmp_path / "run" / "logs").exists() and gcs_server.proxy.refused == []


def test_an_object_the_storage_refuses_tensorflow_is_one_line_exit_1(gcs_server, mnist_data_dir, tmp_path):
    """A denied object met by TensorFlow's own gs:// (the first checkpoint's save) ends the task with one line
    naming it, exit 1: a restart would not cure it."""
    bucket = gcs_server.create_bucket()
    cluster = tmp_path / "c.yaml"
    cluster.write_text("cluster: {chief: ['localhost:2222']}\ntraining: {max_steps: 20, save_checkpoints_steps: 10}\n"
                       f"data_dir: {mnist_data_dir}\n")
    fault = gcs_server.proxy.inject(403, times=1000, name="model.ckpt")
    try:
        proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(cluster),
                               "--model-dir", f"gs://{bucket}/run", "--run-dir", str(tmp_path / "run")],
                              capture_output=True, text=True, env={**os.environ, **gcs_server.env()}, cwd=REPO,
                              timeout=300)
    finally:
        gcs_server.proxy.reset()
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode == 1 and fault.hits >= 1, proc.stderr[-3000:]
    assert len(errors) == 1 and f"gs://{bucket}/run/model.ckpt" in errors[0] and "refused" in errors[0], errors
