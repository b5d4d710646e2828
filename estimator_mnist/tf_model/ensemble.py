"""`estimator-mnist ensemble`: trials of a sweep as ONE graph, one network per device, exported as one SavedModel
with the signatures of a single model (export.py), so `predict` and Serving take it unchanged.

This is in-graph replication, the classic material's pattern for ensembles:
one client builds one graph that holds every member, each under its own name
scope and pinned to its own device, restores each from its trial's final
checkpoint (the variable names a member had when it trained alone, or those
of the moving average its trial kept and scored, are mapped onto its copy in
this graph), and averages their probabilities, each weighted by its count
(`ensemble/member_counts`, a constant of the exported graph). The
ensemble's logits are the log of that average, so its `probabilities`
output is the average itself and its `class_ids` their argmax.

Which members, and their counts: by default the greedy selection with
replacement of ensemble_selection.py over every finished trial, on their
probabilities for the validation split (never the test set); with --top K,
the K best trials by the sweep's ranking, one count each. The validation
split and the whole 10k test set then go through the very graph and session
that are exported, members and ensemble scored together; only the test
figures are reported as test results. The export leaves the device
placements out (clear_devices), so it serves on a machine with fewer
devices than the one that built it; the placement used here is recorded in
sweep.json (ensemble_report.py says what it means on CPUs and GPUs).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np
import tensorflow as tf

from estimator_mnist.tf_model import digits
from estimator_mnist.mnist_data import splits
from estimator_mnist.tf_model.ensemble_plan import EnsemblePlan, Member, placed
from estimator_mnist.tf_model.ensemble_report import report
from estimator_mnist.tf_model.ensemble_selection import greedy_selection
from estimator_mnist.tf_model.export import signature_defs, write_saved_model
from estimator_mnist.tf_model.network import build_network
from estimator_mnist.tf_model.averages import has_averages, restore_map


def training_names(network: str) -> List[str]:
    """The variable names a network has when it is the only one in its graph, as its trial's checkpoint holds them."""
    with tf.Graph().as_default():
        model = build_network(network, "float32")
        model(tf.compat.v1.placeholder(tf.float32, [None, digits.SIZE, digits.SIZE, 1]))
        return [w.op.name for w in model.weights]


def scope_of(member: Member) -> str:
    return member.trial.replace("-", "_")


class EnsembleGraph:
    """The members' networks in the current graph; `logits(images)` applies every member on its device."""

    def __init__(self, members):
        self.members = list(members)
        self.networks = [build_network(member.network, "float32", normalise_inputs=member.normalise_inputs)
                         for member in self.members]
        self.member_probabilities: List[tf.Tensor] = []
        with tf.compat.v1.name_scope("ensemble/"):
            # The weights are part of the model: whoever loads the export can read them back.
            self.counts = tf.constant([float(m.weight) for m in self.members], name="member_counts")

    def logits(self, images: tf.Tensor) -> tf.Tensor:
        probabilities = []
        graph = tf.compat.v1.get_default_graph()
        for member, network in zip(self.members, self.networks):
            # "name/" re-enters the same scope on every call instead of a new "name_1".
            with tf.device(member.device), tf.compat.v1.name_scope(scope_of(member) + "/"):
                probabilities.append(tf.nn.softmax(tf.cast(network(images, training=False), tf.float32)))
            _pin_unplaced(graph, scope_of(member) + "/", member.device)
        self.member_probabilities = probabilities  # the last call's: the `images` signature's
        with tf.compat.v1.name_scope("ensemble/"):
            average = tf.tensordot(self.counts, tf.stack(probabilities), axes=1) / tf.reduce_sum(self.counts)
            # log of the average, so that the outputs' softmax gives back exactly the average
            return tf.math.log(tf.maximum(average, np.finfo(np.float32).tiny))

    def restore(self, session) -> None:
        for member, network in zip(self.members, self.networks):
            names = training_names(member.network)
            # A trial that kept a moving average of its weights was scored on it: the member is that average.
            averaged = has_averages(member.checkpoint, names)
            saver = tf.compat.v1.train.Saver(var_list=restore_map(names, network.weights, averaged))
            saver.restore(session, member.checkpoint)

    def devices_used(self, graph) -> Dict[str, List[str]]:
        """Each member's devices, read back from the graph's ops."""
        found = {}
        for member in self.members:
            prefix = scope_of(member) + "/"
            found[member.trial] = sorted({op.device for op in graph.get_operations()
                                          if op.name.startswith(prefix) and op.device})
        return found


def load_images(split: str, data_dir: str, validation_examples: int = 0):
    """A whole split (splits.py) as numpy: float images in [0, 1] and int labels."""
    from estimator_mnist.mnist_data.arrays import load_split_numpy  # pylint: disable=import-outside-toplevel

    images, labels = load_split_numpy(split, data_dir, validation_examples)
    return images.astype(np.float32) / 255.0, labels


def load_test_set(data_dir: str):
    """The whole 10k test split as numpy: float images in [0, 1] and int labels."""
    return load_images(splits.TEST, data_dir)


def probabilities_of(session, feed, tensors, images, batch: int) -> List[np.ndarray]:
    """Each tensor's probabilities for every image, in batches through the same session."""
    outputs = [[] for _ in tensors]
    for start in range(0, len(images), batch):
        for collected, value in zip(outputs, session.run(tensors, {feed: images[start:start + batch]})):
            collected.append(value)
    return [np.concatenate(collected) for collected in outputs]


def _session_config(plan: EnsemblePlan):
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    config.device_count["CPU"] = plan.logical_cpus
    return config


def candidate_probabilities(plan: EnsemblePlan, images) -> List[np.ndarray]:
    """Every candidate's probabilities for `images` (the validation split), for the selection."""
    with tf.Graph().as_default() as graph:
        ensemble = EnsembleGraph(plan.members)
        feed = tf.compat.v1.placeholder(tf.float32, [None, digits.SIZE, digits.SIZE, 1])
        ensemble.logits(feed)
        with tf.compat.v1.Session(graph=graph, config=_session_config(plan)) as session:
            ensemble.restore(session)
            return probabilities_of(session, feed, ensemble.member_probabilities, images, plan.eval_batch_size)


def select(plan: EnsemblePlan, validation) -> tuple:
    """(members with their counts, the Selection or None): greedy on the validation split, or every member (--top)."""
    if not plan.greedy:
        return plan.members, None
    selection = greedy_selection(candidate_probabilities(plan, validation[0]), validation[1])
    chosen = [dataclasses.replace(m, weight=count) for m, count in zip(plan.members, selection.counts) if count]
    return placed(chosen, plan.devices), selection


def build_and_export(plan: EnsemblePlan, out, data=None) -> int:
    """Selects, builds, restores, scores and exports the ensemble; `data` ({split: (images, labels)}) replaces MNIST
    in tests. The validation split is scored only when the trials hold one out."""
    if data is None:
        data = {splits.TEST: load_test_set(plan.data_dir)}
        if plan.validation_examples:
            data[splits.VALIDATION] = load_images(splits.VALIDATION, plan.data_dir, plan.validation_examples)
    members, selection = select(plan, data.get(splits.VALIDATION))
    facts = {"members": members, "selection": selection, "images": {k: len(v[1]) for k, v in data.items()}}

    def build():
        graph = EnsembleGraph(members)
        signatures = signature_defs(graph.logits)
        facts["graph"] = graph
        sig = signatures["images"]
        facts["parts"] = (sig.inputs["images"].name, graph.member_probabilities + [sig.outputs["probabilities"].name])
        return signatures

    def restore_and_score(session):
        graph = facts["graph"]
        graph.restore(session)
        facts["devices"] = graph.devices_used(session.graph)
        feed, tensors = facts["parts"]
        facts["scores"] = {}
        for split, (images, labels) in data.items():
            outputs = probabilities_of(session, feed, tensors, images, plan.eval_batch_size)
            facts["scores"][split] = [float(np.mean(np.argmax(p, axis=1) == labels)) for p in outputs]

    export = write_saved_model(str(plan.export_base), build, restore_and_score, session_config=_session_config(plan),
                               clear_devices=True)
    return report(plan, facts, export, out)


def _pin_unplaced(graph, prefix: str, device: str) -> None:
    """Places the ops of a member's scope that came out without a device on the member's device.

    TF 2.15: Keras creates a layer's variables (and their initializers and
    reads) under tf.init_scope, which drops the enclosing tf.device, so every
    member's weights would go wherever the placer puts unplaced ops (the first
    GPU): each member would then read its weights across devices at every
    call. Pinned by test_sweep_run.py's check of each member's devices.
    """
    for op in graph.get_operations():
        if op.name.startswith(prefix) and not op.device:
            op._set_device(device)  # pylint: disable=protected-access  (no public setter in TF 2.15)
