"""One real two-worker run, and everything a user does with it: the export, predict, Serving's signatures,
TensorBoard, the console and the summary."""

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from estimator_mnist.model_files.checkpoints import read_eval_results
from estimator_mnist.model_files.progress import read_progress
from tests.helpers import CLUSTER_YAML, REPO, launch_cluster, pids_alive

NOISE = re.compile(r"cuDNN|cuFFT|cuBLAS|TensorRT|oneDNN|cuda|cpu_feature_guard|tensorflow/core|google_auth")
DIGITS = 200


@pytest.fixture(scope="module")
def run(tmp_path_factory, mnist_data_dir):
    tmp_path = tmp_path_factory.mktemp("two_workers")
    temporary = tmp_path / "tmp"  # the tasks' temporary directory, which they must leave as they found it
    temporary.mkdir()
    code, out, summary = launch_cluster(tmp_path, CLUSTER_YAML, 2, steps=60, save=30, data_dir=mnist_data_dir,
                                        env={**os.environ, "TMPDIR": str(temporary)})
    assert code == 0, out
    return {"out": out, "summary": summary, "run_dir": tmp_path / "run", "tmp": temporary}


@pytest.fixture(scope="module")
def test_digits(run, mnist_data_dir, tmp_path_factory):
    """The first test digits as PNG files, with their labels and the float batch."""
    import tensorflow as tf

    from estimator_mnist.tf_task.data import load_split

    images, labels = next(iter(load_split("test", mnist_data_dir).batch(DIGITS)))
    folder = tmp_path_factory.mktemp("digits")
    files = []
    for i, image in enumerate(images):
        files.append(str(folder / f"{i:03d}.png"))
        tf.io.write_file(files[-1], tf.io.encode_png(image))
    return files, labels.numpy(), images.numpy().astype(np.float32) / 255.0


def cli(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_two_workers_train_evaluate_and_export(run, tmp_path):
    out, summary = run["out"], run["summary"]
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(r"finished: accuracy=(?P<acc>[\d.]+) global_step=60 export=(?P<export>\S+)", last)
    assert match, out
    assert float(match["acc"]) > 0.5  # chance is 0.1

    assert summary["status"] == "finished" and summary["global_step"] == 60
    assert {t for t in summary["tasks"]} == {"worker:0", "worker:1", "evaluator:0"}
    assert summary["tasks"]["worker:0"]["exit"] == 0 and summary["tasks"]["evaluator:0"]["exit"] == 0
    assert summary["evaluations"][-1]["global_step"] == 60
    model_dir = Path(summary["model_dir"])
    assert (model_dir / "model.ckpt-60.index").is_file()
    assert not pids_alive([t["pid"] for t in summary["tasks"].values()])
    # AutoGraph converted nothing, so no task left its generated source behind (tf_workarounds.without_autograph).
    assert not list(run["tmp"].glob("__autograph_generated_file*")), sorted(os.listdir(run["tmp"]))

    # Both workers trained: each logged its own input pipeline's steps.
    for task in ("worker-0", "worker-1"):
        log = (Path(summary["log_dir"]) / f"{task}.log").read_text()
        assert "replicas_in_sync=2" in log and "loss = " in log
        assert "communication=ring collective_timeout_secs=300" in log
        # Each trainer's progress record: its steps timed (the first, every tenth, and the last), its loss.
        record = read_progress(str(run["run_dir"]))[task.replace("-", ":")]
        assert record["done"] and record["local_step"] == 60 and record["loss"] > 0
        times = record["step_times"]
        steps = [step for step, _ in times]
        assert steps[0] == 1 and steps[-1] == 60 and 30 in steps
        assert all(a[1] <= b[1] for a, b in zip(times, times[1:]))
    # Sharing one machine, the two trainers ran on cores of their own (tasks.*.pin_cores), and their
    # TensorFlow processes kept the share: the records come from them.
    records = read_progress(str(run["run_dir"]))
    cores = [set(records[f"worker:{i}"]["cpus"]) for i in (0, 1)]
    if len(os.sched_getaffinity(0)) >= 2:
        assert all(cores) and not cores[0] & cores[1], cores
    # The chief recorded each checkpoint's save under MultiWorkerMirrored (save_times.py), and the evaluator each
    # evaluation's start, after that save: the records benchmarks/time_to_accuracy.py splits the time to accuracy by.
    saves = {step: (started, saved) for step, started, saved in records["worker:0"]["saves"]}
    assert sorted(saves) == [30, 60] and all(started <= saved for started, saved in saves.values())
    evaluations = read_eval_results(str(model_dir))
    assert evaluations and all(saves[e["global_step"]][1] <= e["started"] <= e["time"] for e in evaluations)
    evaluator_log = (Path(summary["log_dir"]) / "evaluator-0.log").read_text()
    assert "starts TensorFlow once a trainer on this machine has taken a step" in evaluator_log


def test_the_console_shows_progress_and_none_of_tensorflow_s_noise(run):
    out = run["out"]
    assert not [line for line in out.splitlines() if NOISE.search(line)], out
    progress = [line for line in out.splitlines() if re.search(r"step \d+/60", line)]
    assert progress and all("images/s" in line and ("s left" in line or "time left" in line) for line in progress), out


def test_tensorboard_shows_one_training_run_with_images_per_sec_and_the_evaluations(run):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    model_dir = run["summary"]["model_dir"]
    runs = EventMultiplexer().AddRunsFromDirectory(model_dir)
    runs.Reload()
    # The non-chief worker's scratch copy (tmp_worker_1, tf_workarounds.remove_collective_scratch) is gone.
    assert set(runs.Runs()) == {".", "eval"}, runs.Runs()
    assert not (Path(model_dir) / "tmp_worker_1").exists()
    training = set(runs.GetAccumulator(".").Tags()["scalars"])
    assert {"loss", "train_accuracy", "learning_rate", "global_step/sec", "images_per_sec",
            "images_per_sec/worker_0", "images_per_sec/worker_1"} <= training, training
    for tag in ("images_per_sec", "images_per_sec/worker_1"):
        points = runs.Scalars(".", tag)
        assert len(points) >= 3 and all(p.value > 0 for p in points)
        assert [p.step for p in points] == sorted(p.step for p in points)
    evaluated = [e["global_step"] for e in run["summary"]["evaluations"]]
    for tag in ("accuracy", "loss"):
        assert [p.step for p in runs.Scalars("eval", tag)] == evaluated


def test_predict_classifies_png_digits_as_the_images_signature_does(run, test_digits):
    files, labels, floats = test_digits
    proc = cli("predict", "--model", str(run["run_dir"]), *files)
    found = dict(re.findall(r"^(\S+)\[0\]: digit (\d) \(p=[\d.]+\)$", proc.stdout, re.MULTILINE))
    assert len(found) == DIGITS, proc.stdout
    from_png = np.array([int(found[f]) for f in files])

    arrays = Path(files[0]).parent / "digits.npy"
    np.save(arrays, floats)
    proc = cli("predict", "--model", run["summary"]["model_dir"], str(arrays), "--json")
    from_floats = np.array([p["class"] for p in json.loads(proc.stdout)["predictions"]])
    # The digits made in the graph from MNIST's own PNGs are MNIST's digits: (nearly) the same answers.
    assert np.mean(from_png == from_floats) >= 0.97
    assert np.mean(from_png == labels) >= np.mean(from_floats == labels) - 0.02


def test_a_corrupt_file_is_named_with_exit_2_and_the_others_are_still_classified(run, test_digits, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    proc = cli("predict", "--model", str(run["run_dir"]), str(broken), test_digits[0][0], check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and str(broken) in proc.stderr, proc.stderr
    assert re.search(r"\[0\]: digit \d", proc.stdout)


def test_saved_model_cli_shows_and_runs_both_signatures_and_bytes_agree_with_predict(run, test_digits, tmp_path):
    import tensorflow as tf

    export = run["summary"]["evaluations"][-1]["export"]
    cli_path = str(Path(sys.executable).parent / "saved_model_cli")
    shown = subprocess.run([cli_path, "show", "--dir", export, "--all"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "signature_def['serving_default']" in shown.stdout and "signature_def['images']" in shown.stdout
    files, _, floats = test_digits
    encoded = tf.constant([Path(f).read_bytes() for f in files[:20]])
    np.save(tmp_path / "bytes.npy", encoded.numpy())
    np.save(tmp_path / "floats.npy", floats[:20])
    outputs = {}
    for signature, name in (("serving_default", "image_bytes=bytes.npy"), ("images", "images=floats.npy")):
        ran = subprocess.run([cli_path, "run", "--dir", export, "--tag_set", "serve", "--signature_def", signature,
                              "--inputs", name, "--outdir", str(tmp_path / signature)],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        outputs[signature] = np.load(tmp_path / signature / "class_ids.npy")
    proc = cli("predict", "--model", export, *files[:20], "--json")
    from_predict = [p["class"] for p in json.loads(proc.stdout)["predictions"]]
    assert list(outputs["serving_default"]) == from_predict
    # The same request as a TensorFlow Serving REST client's: {"instances": [{"b64": ...}]}, decoded as Serving does.
    request = {"instances": [{"b64": base64.b64encode(Path(f).read_bytes()).decode()} for f in files[:3]]}
    serving = tf.saved_model.load(export).signatures["serving_default"]
    decoded = tf.constant([base64.b64decode(i["b64"]) for i in request["instances"]])
    assert list(serving(image_bytes=decoded)["class_ids"].numpy()) == from_predict[:3]


def test_summary_reads_the_run_and_its_model_dir(run):
    table = cli("summary", str(run["run_dir"])).stdout
    assert re.search(r"^status\s+finished$", table, re.MULTILINE), table
    assert re.search(r"^images/s\s+[\d,]+ \(worker:0 [\d,]+, worker:1 [\d,]+\)$", table, re.MULTILINE), table
    assert re.search(r"^restarts\s+0$", table, re.MULTILINE), table
    facts = json.loads(cli("summary", run["summary"]["model_dir"], "--json").stdout)
    assert facts["status"] == "finished" and facts["global_step"] == 60
    assert [e["step"] for e in facts["evaluations"]] == [e["global_step"] for e in run["summary"]["evaluations"]]
    # From the model_dir alone (as under Kubernetes) images/s comes from the TensorBoard events.
    assert facts["images_per_sec"] > 0 and facts["restarts"] is None
