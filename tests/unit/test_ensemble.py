"""The ensemble graph on two stand-in members of different networks (no MNIST, no processes): each member on its
own logical CPU under its own name scope, restored from a checkpoint written under its training names, and an
export with a single model's signatures whose probabilities are the average of the members' own, weighted by
their counts, which the exported graph holds; scored on a validation and a test set."""

import io
import json

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.tf_model.ensemble import build_and_export
from estimator_mnist.tf_model.ensemble_plan import EnsemblePlan, Member
from estimator_mnist.tf_model.ensemble_report import CPU_ONLY, LOGICAL_CPUS, devices_note
from estimator_mnist.tf_model.inference import Classifier
from estimator_mnist.tf_model.network import build_network
from estimator_mnist.sweep import records

NETWORKS = ("classic_cnn", "tutorial_cnn")


AVERAGE = "/ExponentialMovingAverage"


def _member_checkpoint(tmp_path, network: str, seed: int, averaged: bool = False) -> str:
    """A checkpoint as a trial leaves it: the network alone in its graph, random weights, and if `averaged`
    random moving averages of them as well (model.weight_average_decay > 0), which the member must be."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(seed)
        model = build_network(network)
        model(tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1]))
        saved = {w.op.name: w for w in model.weights}
        if averaged:
            saved.update({w.op.name + AVERAGE: tf.Variable(tf.random.normal(w.shape, stddev=0.05)) for w in model.weights})
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver(saved).save(session, str(tmp_path / network / "model.ckpt"), global_step=5)


def _own_probabilities(network: str, checkpoint: str, images, averaged: bool = False) -> np.ndarray:
    with tf.Graph().as_default():
        model = build_network(network)
        feed = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1])
        probabilities = tf.nn.softmax(model(feed, training=False))
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver({w.op.name + (AVERAGE if averaged else ""): w for w in model.weights}).restore(
                session, checkpoint)
            return session.run(probabilities, {feed: images})


@pytest.mark.parametrize("averaged", [(False, False), (True, False)], ids=["weights", "one_member_averaged"])
def test_members_of_two_networks_on_two_devices_export_as_one_model_of_their_weighted_average(tmp_path, averaged):
    checkpoints = [_member_checkpoint(tmp_path, n, seed, a) for (seed, n), a in zip(enumerate(NETWORKS, start=1), averaged)]
    # The first member picked twice, the second once, as the greedy selection may weight them.
    members = tuple(Member(f"trial-00{i}", {"model.network": n}, n, c, f"/device:CPU:{i}", 0.5, 0.6, weight=2 - i,
                           normalise_inputs=False)  # as _member_checkpoint trained them
                    for i, (n, c) in enumerate(zip(NETWORKS, checkpoints)))
    records.save(tmp_path, {"identity": {}, "trials": []})
    plan = EnsemblePlan(tmp_path, members, "unused", 32, logical_cpus=2, validation_examples=20)
    rng = np.random.default_rng(0)
    images = rng.random((50, 28, 28, 1), dtype=np.float32)
    own = [_own_probabilities(n, c, images, a) for n, c, a in zip(NETWORKS, checkpoints, averaged)]
    weighted = (2 * own[0] + own[1]) / 3
    labels = np.argmax(weighted, axis=1)  # labels the weighted average gets right, and the members less often
    data = {"validation": (images[:20], labels[:20]), "test": (images[20:], labels[20:])}

    out = io.StringIO()
    assert build_and_export(plan, out, data=data) == 0
    ensemble = json.loads((tmp_path / records.SWEEP_FILE).read_text())["ensemble"]
    assert [m["devices_in_graph"] for m in ensemble["members"]] == [["/device:CPU:0"], ["/device:CPU:1"]]
    assert ensemble["accuracy"] == 1.0 and ensemble["validation_accuracy"] == 1.0
    assert [m["weight"] for m in ensemble["members"]] == [2, 1] and ensemble["selection"] == "top"
    for member, probabilities in zip(ensemble["members"], own):
        hits = np.argmax(probabilities, axis=1) == labels
        assert member["validation_accuracy"] == round(float(np.mean(hits[:20])), 6)
        assert member["accuracy"] == round(float(np.mean(hits[20:])), 6)
    text = out.getvalue()
    assert "  validation accuracy 1.0000 (best member" in text
    assert "  test accuracy 1.0000 on the 30 test images (best member" in text
    assert LOGICAL_CPUS.format(devices="/device:CPU:0, /device:CPU:1") in text

    with Classifier(ensemble["export"]) as model:  # as predict loads it: one CPU, no device pins left
        served = model.probabilities(type("Item", (), {"encoded": None, "array": images})())
    np.testing.assert_allclose(served, weighted, atol=1e-5)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:  # the weights travel with the model
        tf.compat.v1.saved_model.load(session, ["serve"], ensemble["export"])
        assert session.run("ensemble/member_counts:0").tolist() == [2.0, 1.0]
    loaded = tf.saved_model.load(ensemble["export"])
    assert set(loaded.signatures) == {"serving_default", "images"}


def test_the_device_note_says_what_one_device_per_member_means():
    assert devices_note(["/device:CPU:0"] * 3) == CPU_ONLY and "the machine's cores" in CPU_ONLY
    assert "share those cores" in devices_note(["/device:CPU:0", "/device:CPU:1"])
    assert "a GPU of its own" in devices_note(["/device:GPU:0", "/device:GPU:1"])
    assert "share a device" in devices_note(["/device:GPU:0", "/device:GPU:1", "/device:GPU:0"])
