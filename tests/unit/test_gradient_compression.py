"""strategy.gradient_compression: 16-bit all-reduce, float32 update, wired from the YAML to the optimizer."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import planned
from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import UsageError
from estimator_mnist.tf_task.gradient_compression import compress_gradients

W0 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
# One row per replica (conftest gives this process two logical CPUs).
INPUTS = np.array([[1.0, 2.0], [0.25, -1.0]], np.float32)
LEARNING_RATE = 0.01


def one_mirrored_step(compression, optimizer_class=tf.compat.v1.train.GradientDescentOptimizer, loss_scale=False):
    """(weights after one step of two replicas, {dtype of every AddN that summed the replicas})."""
    with tf.Graph().as_default() as graph:
        strategy = tf.compat.v1.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
        with strategy.scope():
            weights = tf.compat.v1.get_variable("w", initializer=tf.constant(W0), use_resource=True)

            def step():
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                x = tf.gather(tf.constant(INPUTS), [replica])
                loss = tf.reduce_sum(tf.square(tf.matmul(x, weights)))
                optimizer = compress_gradients(optimizer_class(LEARNING_RATE), compression)
                if loss_scale:
                    optimizer = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(optimizer, 128.0)
                return optimizer.minimize(loss, var_list=[weights])

            train = strategy.group(strategy.extended.call_for_each_replica(step))
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            result = session.run(weights)
        summed = {op.get_attr("T") for op in graph.get_operations() if op.type == "AddN"}
    return result, summed


def expected_after_one_step():
    # d/dW sum((xW)^2) = 2 x^T (xW), summed over the two replicas' rows.
    gradient = sum(2.0 * np.outer(x, x @ W0) for x in INPUTS)
    return W0 - LEARNING_RATE * gradient


def test_without_compression_the_replicas_sum_float32():
    weights, summed = one_mirrored_step("none")
    assert summed == {tf.float32}
    np.testing.assert_allclose(weights, expected_after_one_step(), rtol=1e-6)


@pytest.mark.parametrize("compression, wire", [("bf16", tf.bfloat16), ("fp16", tf.float16)])
def test_compression_sums_in_16_bits_and_updates_float32_weights(compression, wire):
    weights, summed = one_mirrored_step(compression)
    assert summed == {wire}
    assert weights.dtype == np.float32
    # One rounding of each summed gradient to 16 bits: bfloat16 keeps 8 bits of mantissa, float16 11.
    tolerance = LEARNING_RATE * 16 * (2 ** -8 if compression == "bf16" else 2 ** -11)
    np.testing.assert_allclose(weights, expected_after_one_step(), atol=tolerance)
    assert not np.allclose(weights, W0)


def test_compression_reaches_adams_slots_and_the_loss_scale_optimizer():
    reference, _ = one_mirrored_step("none", tf.compat.v1.train.AdamOptimizer)
    weights, summed = one_mirrored_step("fp16", tf.compat.v1.train.AdamOptimizer, loss_scale=True)
    assert tf.float16 in summed
    np.testing.assert_allclose(weights, reference, atol=1e-4)


def test_the_yaml_key_reaches_the_model_fn(tmp_path):
    config = config_from_dict({"cluster": {"chief": ["localhost:1"]}, "model_dir": str(tmp_path),
                               "strategy": {"name": "mirrored", "gradient_compression": "bf16"}}, "test.yaml")
    estimator = runner.build_estimator(config, planned(config, TaskId("chief", 0)))
    assert estimator.params["gradient_compression"] == "bf16"


def test_compression_is_refused_where_nothing_is_all_reduced():
    with pytest.raises(UsageError, match=re.escape("strategy.gradient_compression")):
        config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
                          "strategy": {"name": "parameter_server", "gradient_compression": "fp16"}}, "test.yaml")


def test_an_unknown_compression_lists_the_valid_ones():
    with pytest.raises(UsageError, match=r"strategy\.gradient_compression.*none, fp16, bf16"):
        config_from_dict({"cluster": {"chief": ["localhost:1"]},
                          "strategy": {"name": "mirrored", "gradient_compression": "int8"}}, "test.yaml")
