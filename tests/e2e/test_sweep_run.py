"""Real sweeps of tiny single-process trials on real MNIST: two at a time on disjoint cores, each holding out the
last 5,000 training images, the results files with both accuracies, best.yaml chosen on validation, a re-run that
starts nothing, a real failure, Ctrl-C and resuming; and the greedy ensemble of the trials as one SavedModel that
predict takes, at least as good as its best member on validation, scored like the weighted average of its
members' own probabilities."""

import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from estimator_mnist.config import config_from_dict
from estimator_mnist.errors import INTERRUPTED_EXIT_CODE
from estimator_mnist.storage import read_json
from estimator_mnist.sweep import records
from tests.helpers import REPO, descendants, pids_alive

BASE = """
cluster: {{chief: ["localhost:23456"], worker: ["localhost:23457"], evaluator: localhost}}
strategy: multi_worker_mirrored
training: {{batch_size_per_replica: 64, max_steps: 60, save_checkpoints_steps: 30, log_step_count_steps: 10}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
data_dir: {data_dir}
"""
PARAMS = ["--param", "model.learning_rate=0.002,0.004", "--param", "model.dropout=0.2,0.5"]


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "estimator_mnist", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, mnist_data_dir):
    tmp_path = tmp_path_factory.mktemp("sweep")
    base = tmp_path / "base.yaml"
    base.write_text(BASE.format(data_dir=mnist_data_dir))
    args = ["sweep", "--cluster", str(base), *PARAMS, "--parallel", "2", "--sweep-dir", str(tmp_path / "s")]
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"args": args, "out": proc.stdout, "dir": tmp_path / "s", "base": base}


def test_two_trials_run_at_once_each_on_its_own_core(sweep):
    trials = records.read_sweep(sweep["dir"])["trials"]
    assert [t["state"] for t in trials] == ["finished"] * 4, sweep["out"]
    for first, second in (trials[0], trials[1]), (trials[2], trials[3]):
        assert first["started"] < second["ended"] and second["started"] < first["ended"]  # at the same time
    for a, b in (trials[0], trials[1]), (trials[2], trials[3]):
        assert len(a["cpus_seen"]) == 1 and not set(a["cpus_seen"]) & set(b["cpus_seen"])  # TF process's own record
        assert a["affinity"] == a["cpus_seen"]


def test_results_files_hold_both_accuracies_of_every_trial_and_best_yaml_is_chosen_on_validation(sweep):
    record = records.read_sweep(sweep["dir"])
    rows = (sweep["dir"] / records.CSV_FILE).read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("trial,state,model.learning_rate,model.dropout,validation_accuracy,"
                                                 "test_accuracy,rank,ranked_by")
    assert all(",validation_accuracy," in row for row in rows[1:])
    table = [line for line in sweep["out"].splitlines() if line.startswith("trial-")]
    assert len(table) == 4 and all(line.split()[-1] == "finished" for line in table)
    assert record["ranked_by"] == "validation_accuracy" and "holds out the last 5000 training images" in sweep["out"]
    for trial in record["trials"]:
        assert 0.5 < trial["accuracy"] <= 1 and trial["global_step"] == 60 and trial["images_per_sec"] > 0
        assert 0.5 < trial["validation_accuracy"] <= 1
        assert set(trial["seconds_to"]) == {"0.98", "0.99", "0.992"}
        evaluations = [json.loads(line) for line in
                       (sweep["dir"] / trial["trial"] / "model" / "eval_results.jsonl").read_text().splitlines()]
        assert evaluations and all({"accuracy", "loss", "validation_accuracy", "validation_loss"} <= set(e)
                                   for e in evaluations)
        summary = read_json(sweep["dir"] / trial["trial"] / "run_summary.json")
        assert (summary["accuracy"], summary["validation_accuracy"]) == (trial["accuracy"], trial["validation_accuracy"])
    best = max(record["trials"], key=lambda t: t["validation_accuracy"])
    assert record["best"] == best["trial"]
    text = (sweep["dir"] / records.BEST_FILE).read_text()
    assert f"validation accuracy {best['validation_accuracy']:.4f} (chose), test accuracy {best['accuracy']:.4f}" in text
    config = config_from_dict(yaml.safe_load(text), "best.yaml")
    assert config.model.learning_rate == best["values"]["model.learning_rate"]
    assert config.model.dropout == best["values"]["model.dropout"]
    assert config.cluster.num_workers == 2 and "tuned in ONE process" in text
    summary = cli("summary", str(sweep["dir"] / best["trial"]))  # each trial has its own run summary
    assert summary.returncode == 0 and re.search(r"status\s+finished", summary.stdout), summary.stdout + summary.stderr


def test_a_re_run_starts_nothing(sweep):
    before = records.read_sweep(sweep["dir"])["trials"]
    started = time.time()
    proc = cli(*sweep["args"])
    assert proc.returncode == 0 and "0 to run (4 already done)" in proc.stdout, proc.stdout + proc.stderr
    assert time.time() - started < 20
    assert records.read_sweep(sweep["dir"])["trials"] == before


def test_the_greedy_ensemble_is_one_model_at_least_as_good_as_its_best_member_on_validation(sweep, mnist_data_dir):
    import tensorflow as tf

    from estimator_mnist.tf_model.ensemble import load_test_set
    from estimator_mnist.tf_model.ensemble_report import devices_note
    from estimator_mnist.tf_model.inference import Classifier

    devices = ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    proc = cli("ensemble", "--sweep-dir", str(sweep["dir"]), "--devices", "cpu:0,cpu:1,cpu:2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = records.read_sweep(sweep["dir"])
    ensemble, trials = record["ensemble"], {t["trial"]: t for t in record["trials"]}
    members = ensemble["members"]
    assert ensemble["selection"] == "greedy" and sorted(ensemble["candidates"]) == sorted(trials)
    best = max(trials.values(), key=lambda t: t["validation_accuracy"])
    assert ensemble["picks"][0] == best["trial"] and ensemble["best_member"]["trial"] == best["trial"]
    # By construction, never below the best member on the split it chose on; the test set is only reported.
    assert ensemble["validation_accuracy"] >= ensemble["best_member"]["validation_accuracy"]
    assert ensemble["validation_images"] == 5000 and ensemble["test_images"] == 10000
    assert sum(m["weight"] for m in members) == len(ensemble["picks"])
    assert [m["devices_in_graph"] for m in members] == [[devices[i % 3]] for i in range(len(members))]
    for member in members:
        # Same checkpoint, same images, both in float32 (evaluation.precision); with the trial's evaluator in
        # bfloat16 (evaluation.precision: training) 5 of the 10,000 answers were seen to differ after 60 steps.
        trial = trials[member["trial"]]
        assert member["accuracy"] == pytest.approx(trial["accuracy"], abs=1e-4)
        assert member["validation_accuracy"] == pytest.approx(trial["validation_accuracy"], abs=4e-4)
    assert f"validation accuracy {ensemble['validation_accuracy']:.4f} (best member {best['trial']}" in proc.stdout
    note = devices_note([m["device"] for m in members])  # what the devices mean, said plainly
    assert ensemble["devices_note"] == note and f"devices: {note}" in proc.stdout

    images, labels = load_test_set(mnist_data_dir)
    weighted = 0
    for member in members:  # each member's own export, written by its trial, weighted by its count
        with Classifier(trials[member["trial"]]["export"]) as model:
            weighted = weighted + member["weight"] * model.probabilities(
                type("Item", (), {"encoded": None, "array": images})())
    assert ensemble["accuracy"] == pytest.approx(float(np.mean(np.argmax(weighted, axis=1) == labels)), abs=2e-4)
    export = ensemble["export"]
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:  # the counts are part of the exported graph
        tf.compat.v1.saved_model.load(session, ["serve"], export)
        assert session.run("ensemble/member_counts:0").tolist() == [float(m["weight"]) for m in members]
    assert set(tf.saved_model.load(export).signatures) == {"serving_default", "images"}

    np.save(sweep["dir"] / "digits.npy", (images[:20, ..., 0] * 255).astype(np.uint8))
    predicted = cli("predict", "--model", str(sweep["dir"] / "ensemble"), "--json", str(sweep["dir"] / "digits.npy"))
    assert predicted.returncode == 0, predicted.stderr
    classes = [p["class"] for p in json.loads(predicted.stdout)["predictions"]]
    assert np.mean(np.array(classes) == labels[:20]) >= 0.8


def test_a_real_failure_is_recorded_ctrl_c_stops_everything_and_the_same_sweep_resumes(tmp_path, mnist_data_dir):
    base = tmp_path / "base.yaml"
    # 1,000 held-out images, not the sweep's 5,000, and a checkpoint every 60 steps: CI time counts. 120 steps
    # slowed by 30 ms each (a sleep, no compute): Ctrl-C, 3 s into its training, comes before its end on the
    # fastest kind at hand (240 unslowed steps did too, at twice the compute).
    base.write_text(BASE.format(data_dir=mnist_data_dir).replace("max_steps: 60, save_checkpoints_steps: 30",
                                                                 "max_steps: 120, save_checkpoints_steps: 60")
                    + "data: {validation_examples: 1000}\ntasks: {all: {step_delay_ms: 30}}\n")
    # A 1 ms limit on every session call fails the first step: a trial that fails for real.
    args = ["sweep", "--cluster", str(base), "--param", "session.operation_timeout_ms=1,0",
            "--sweep-dir", str(tmp_path / "s")]
    sweep = subprocess.Popen([sys.executable, "-m", "estimator_mnist", *args], cwd=REPO, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    progress = tmp_path / "s" / "trial-001" / "progress" / "chief-0.json"

    def failed_and_training():
        record = read_json(tmp_path / "s" / records.SWEEP_FILE) or {"trials": [{}]}
        return record["trials"][0].get("state") == "failed" and progress.is_file()

    deadline = time.time() + 120
    while time.time() < deadline and not failed_and_training():
        time.sleep(0.5)
    time.sleep(3)  # past the first checkpoint (step 0) into training
    pids = descendants(sweep.pid)
    sweep.send_signal(signal.SIGINT)
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == INTERRUPTED_EXIT_CODE, out
    assert pids and not pids_alive(pids), out
    failed, interrupted = records.read_sweep(tmp_path / "s")["trials"]
    assert failed["state"] == "failed" and "DeadlineExceeded" in failed["reason"], out
    assert interrupted["state"] == "interrupted", out
    assert (tmp_path / "s" / "trial-001" / "model" / "checkpoint").is_file()

    resumed = cli(*args)
    failed, finished = records.read_sweep(tmp_path / "s")["trials"]
    assert resumed.returncode == 1 and finished["state"] == "finished", resumed.stdout + resumed.stderr
    assert finished["attempts"] == 2 and "trial-001 resumed" in resumed.stdout
    assert failed["state"] == "failed" and failed["attempts"] == 2
