"""serve's version picking and batching, with stand-in models (no TensorFlow): the newest export is served, a
newer one replaces it live, failures and deletions leave the served one in place; concurrent requests share
model calls and a bad one fails alone."""

import json
import shutil
import threading
import time

import numpy as np
import pytest

from estimator_mnist.tf_model.serve.batcher import Batcher
from estimator_mnist.model_files.exports import evaluation_of
from estimator_mnist.tf_model.serve.versions import Versions
from tests.helpers import make_export


class FakeModel:
    def __init__(self, export_dir):
        self.export_dir, self.closed = export_dir, False

    def close(self):
        self.closed = True


def served(versions):
    held = versions.acquire()
    if held is None:
        return None
    held.release()
    return held.number


def test_nothing_is_served_before_the_first_export_then_it_is_loaded(tmp_path):
    versions = Versions(str(tmp_path / "model"), FakeModel, log=lambda m: None)
    (tmp_path / "model").mkdir()
    versions.poll()
    assert served(versions) is None and versions.states() == []
    make_export(tmp_path / "model", 100)
    versions.poll()
    assert served(versions) == 100
    assert versions.states() == [(100, "AVAILABLE", "OK", "")]


def test_a_newer_export_replaces_the_served_one_once_its_requests_are_done(tmp_path):
    make_export(tmp_path / "model", 100)
    versions = Versions(str(tmp_path / "run"), FakeModel, log=lambda m: None)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run_summary.json").write_text(json.dumps({"model_dir": str(tmp_path / "model")}))
    versions.poll()
    old = versions.acquire()  # a request still running on version 100
    make_export(tmp_path / "model", 200)
    swap = threading.Thread(target=versions.poll)
    swap.start()
    time.sleep(0.2)
    assert served(versions) == 200 and not old.model.closed  # new requests go to 200 at once
    assert (100, "UNLOADING", "OK", "") in versions.states()
    old.release()
    swap.join(5)
    deadline = time.monotonic() + 5  # it is unloaded in a thread of its own
    while not old.model.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert old.model.closed and sorted(versions.states()) == [(100, "END", "OK", ""), (200, "AVAILABLE", "OK", "")]
    assert versions.acquire(100) is None  # Serving's Specific(mnist, 100) is gone


def test_an_export_that_fails_to_load_is_recorded_and_the_served_one_stays(tmp_path):
    make_export(tmp_path / "model", 100)
    loads = []

    def load(export_dir):
        loads.append(export_dir)
        if export_dir.endswith("200"):
            raise OSError("SavedModel file does not exist at: 200/{saved_model.pbtxt|saved_model.pb}")
        return FakeModel(export_dir)

    versions = Versions(str(tmp_path / "model"), load, log=lambda m: None)
    versions.poll()
    make_export(tmp_path / "model", 200)
    versions.poll()
    versions.poll()  # not tried again
    assert served(versions) == 100 and len(loads) == 2
    assert (200, "END", "UNKNOWN", "SavedModel file does not exist at: 200/{saved_model.pbtxt|saved_model.pb}") \
        in versions.states()


def test_deleting_the_served_export_does_not_stop_it_being_served(tmp_path):
    make_export(tmp_path / "model", 100)
    newest = make_export(tmp_path / "model", 200)
    versions = Versions(str(tmp_path / "model"), FakeModel, log=lambda m: None)
    versions.poll()
    shutil.rmtree(newest)  # as keep_newest does to old exports
    versions.poll()
    assert served(versions) == 200 and versions.states() == [(200, "AVAILABLE", "OK", "")]


def test_an_export_given_itself_is_served_and_never_polled(tmp_path):
    export = make_export(tmp_path / "model", 300)
    versions = Versions(str(export), FakeModel, log=lambda m: None, poll_secs=0.01)
    versions.poll()
    versions.start()
    assert versions.fixed and served(versions) == 300
    versions.stop()
    assert served(versions) is None


def test_the_evaluation_of_an_export_is_found_in_eval_results(tmp_path):
    export = make_export(tmp_path / "model", 300)
    records = [{"global_step": 100, "accuracy": 0.9, "export": None},
               {"global_step": 200, "accuracy": 0.95, "export": str(export)}]
    (tmp_path / "model" / "eval_results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert evaluation_of(str(export)) == {"global_step": 200, "accuracy": 0.95}
    assert evaluation_of(str(make_export(tmp_path / "model", 400))) == {}


class Doubler:
    """A model that doubles `x`, and fails on any negative value, as a session fails on a bad image."""

    def __init__(self):
        self.calls = []

    def run(self, signature, inputs):
        self.calls.append(len(inputs["x"]))
        if (inputs["x"] < 0).any():
            raise ValueError("a negative value")
        time.sleep(0.05)  # long enough for the other requests to queue up
        return {"y": inputs["x"] * 2}


class Held:
    def __init__(self, model):
        self.model = model


def test_concurrent_requests_share_a_call_and_a_bad_one_fails_alone():
    version = Held(Doubler())
    batcher = Batcher(max_batch_size=64, timeout_secs=0.2)
    try:
        futures = [batcher.submit(version, "", {"x": np.array([float(i)])}) for i in range(8)]
        bad = batcher.submit(version, "", {"x": np.array([-1.0])})
        assert [f.result(5)["y"][0] for f in futures] == [2.0 * i for i in range(8)]
        with pytest.raises(ValueError):
            bad.result(5)
    finally:
        batcher.stop()
    assert version.model.calls[0] == 9 and sorted(version.model.calls[1:]) == [1] * 9  # tried together, then alone


def test_a_batch_holds_at_most_max_batch_size_and_mismatched_shapes_run_apart():
    version = Held(Doubler())
    batcher = Batcher(max_batch_size=4, timeout_secs=0.2)
    try:
        futures = [batcher.submit(version, "", {"x": np.ones((2, 3))}) for _ in range(3)]
        other = batcher.submit(version, "", {"x": np.ones((1, 5))})
        assert all(f.result(5)["y"].shape == (2, 3) for f in futures) and other.result(5)["y"].shape == (1, 5)
    finally:
        batcher.stop()
    assert sorted(version.model.calls) == [1, 2, 4]
