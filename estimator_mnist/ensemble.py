"""`estimator-mnist ensemble`: the K best trials of a sweep as ONE graph, one network per device, exported as one
SavedModel with the signatures of a single model (export.py), so `predict` and Serving take it unchanged.

This is in-graph replication, the classic material's pattern for ensembles:
one client builds one graph that holds every member, each under its own name
scope and pinned to its own device, restores each from its trial's final
checkpoint (the variable names a member had when it trained alone, or those
of the moving average its trial kept and scored, are mapped onto its copy in
this graph), and averages their probabilities. The
ensemble's logits are the log of that average, so its `probabilities`
output is the average itself and its `class_ids` their argmax.

The whole 10k test set goes through the very graph and session that are
then exported, members and ensemble scored together. The export leaves the
device placements out (clear_devices), so it serves on a machine with fewer
devices than the one that built it; the placement used here is recorded in
sweep.json. Not run on a GPU: this project's machines have none (docs/sweeps.md).
"""

from __future__ import annotations

import time
from typing import Dict, List

import numpy as np
import tensorflow as tf

from . import digits
from .ensemble_plan import EnsemblePlan, Member
from .export import signature_defs, write_saved_model
from .model import build_network
from .sweep import records
from .tf_workarounds import pin_unplaced
from .weight_average import has_averages, restore_map


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
        self.networks = [build_network(member.network, "float32") for member in self.members]
        self.member_probabilities: List[tf.Tensor] = []

    def logits(self, images: tf.Tensor) -> tf.Tensor:
        probabilities = []
        graph = tf.compat.v1.get_default_graph()
        for member, network in zip(self.members, self.networks):
            # "name/" re-enters the same scope on every call instead of a new "name_1".
            with tf.device(member.device), tf.compat.v1.name_scope(scope_of(member) + "/"):
                probabilities.append(tf.nn.softmax(tf.cast(network(images, training=False), tf.float32)))
            pin_unplaced(graph, scope_of(member) + "/", member.device)
        self.member_probabilities = probabilities  # the last call's: the `images` signature's
        with tf.compat.v1.name_scope("ensemble/"):
            average = tf.add_n(probabilities) / float(len(probabilities))
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


def load_test_set(data_dir: str):
    """The whole 10k test split as numpy: float images in [0, 1] and int labels."""
    from .data import EVAL_SPLIT, load_split_numpy  # pylint: disable=import-outside-toplevel

    images, labels = load_split_numpy(EVAL_SPLIT, data_dir)
    return images.astype(np.float32) / 255.0, labels


def score(session, graph_parts, images, labels, batch: int) -> Dict[str, float]:
    """Accuracy of each member and of the ensemble, on the same images through the same session."""
    feed, member_tensors, ensemble_tensor = graph_parts
    hits = np.zeros(len(member_tensors) + 1)
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch]
        outputs = session.run(member_tensors + [ensemble_tensor], {feed: chunk})
        truth = labels[start:start + batch]
        hits += [np.sum(np.argmax(p, axis=1) == truth) for p in outputs]
    return {"members": list(hits[:-1] / len(images)), "ensemble": float(hits[-1] / len(images))}


def build_and_export(plan: EnsemblePlan, out, data=None) -> int:
    """Builds, restores, scores and exports the ensemble; `data` (images, labels) replaces the test set in tests."""
    images, labels = data if data is not None else load_test_set(plan.data_dir)
    facts = {}

    def build():
        graph = EnsembleGraph(plan.members)
        signatures = signature_defs(graph.logits)
        facts["graph"] = graph
        sig = signatures["images"]
        facts["parts"] = (sig.inputs["images"].name, graph.member_probabilities, sig.outputs["probabilities"].name)
        return signatures

    def restore_and_score(session):
        graph = facts["graph"]
        graph.restore(session)
        facts["devices"] = graph.devices_used(session.graph)
        facts["scores"] = score(session, facts["parts"], images, labels, plan.eval_batch_size)
        facts["labels"] = labels

    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    config.device_count["CPU"] = plan.logical_cpus
    export = write_saved_model(str(plan.export_base), build, restore_and_score, session_config=config,
                               clear_devices=True)
    return report(plan, facts, export, out)


def report(plan: EnsemblePlan, facts: dict, export: str, out) -> int:
    scores = facts["scores"]
    members = [{"trial": m.trial, "values": m.values, "device": m.device, "devices_in_graph": facts["devices"][m.trial],
                "accuracy": round(acc, 6), "sweep_accuracy": m.sweep_accuracy, "checkpoint": m.checkpoint}
               for m, acc in zip(plan.members, scores["members"])]
    result = {"top": len(plan.members), "accuracy": round(scores["ensemble"], 6), "members": members,
              "export": export, "time": time.time(), "test_images": len(facts["labels"])}
    record = records.read_sweep(plan.sweep_dir)
    record["ensemble"] = result
    records.save(plan.sweep_dir, record)
    width = max(len(m.trial) for m in plan.members)
    print(f"{'member':<{width}}  {'device':<14}  accuracy  values", file=out)
    for m in members:
        values = " ".join(f"{k}={v}" for k, v in m["values"].items())
        print(f"{m['trial']:<{width}}  {m['device']:<14}  {m['accuracy']:.4f}    {values}", file=out)
    best = max(m["accuracy"] for m in members)
    print(f"ensemble of {len(members)}: accuracy {result['accuracy']:.4f} on the {len(facts['labels']):,} test images "
          "(best member "
          f"{best:.4f})", file=out)
    print(f"export: {export}\n  use it: estimator-mnist predict --model {plan.export_base} FILE...", file=out)
    return 0
