"""The moving average of the weights: kept by training, under a strategy too, scored by the evaluator, held by the
export; off with model.weight_average_decay=0."""

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.tf_model.export import export_checkpoint
from estimator_mnist.tf_model.averages import average_name, has_averages
from tests.unit.fakes import tiny_estimator

SUFFIX = "/ExponentialMovingAverage"  # TF's own name for an average: tools that know EMA checkpoints find it


def _weights_and_averages(checkpoint):
    reader = tf.train.load_checkpoint(checkpoint)
    names = [n for n, _ in tf.train.list_variables(checkpoint) if n.startswith("classic_cnn/")
             and n.endswith(("kernel", "bias"))]
    return ({n: reader.get_tensor(n) for n in names},
            {n: reader.get_tensor(n + SUFFIX) for n in names if reader.has_tensor(n + SUFFIX)})


@pytest.mark.parametrize("warmup", [8, 2])
def test_the_average_starts_as_the_weights_then_follows_them_by_the_warmed_up_decay(tmp_path, warmup):
    config, estimator, train_spec, _ = tiny_estimator(
        tmp_path, training={"batch_size_per_replica": 8, "max_steps": 3, "save_checkpoints_steps": 1,
                            "keep_checkpoint_max": 10}, model={"weight_average_warmup": warmup})
    assert config.model.weight_average_decay == pytest.approx(0.99)  # the default
    estimator.train(train_spec.input_fn, max_steps=3)
    model_dir = config.model_dir
    weights = [_weights_and_averages(f"{model_dir}/model.ckpt-{step}") for step in (1, 2, 3)]
    (w1, a1), (w2, a2), (w3, a3) = weights
    assert set(a1) == set(w1) and len(w1) == 8  # 4 layers: kernels and biases
    for name in w1:
        np.testing.assert_allclose(a1[name], w1[name], rtol=1e-6, err_msg=name)  # step 1: a copy
        assert not np.allclose(w2[name], w1[name]), f"{name} did not train"
        # d = min(decay, (n - 1) / (n + w)): 1/(2+w) after step 2, 2/(3+w) after step 3 (w=8: 0.1, then 2/11)
        d2, d3 = 1 / (2 + warmup), 2 / (3 + warmup)
        np.testing.assert_allclose(a2[name], d2 * a1[name] + (1 - d2) * w2[name], rtol=1e-5, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(a3[name], d3 * a2[name] + (1 - d3) * w3[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_no_average_with_decay_zero(tmp_path):
    config, estimator, train_spec, _ = tiny_estimator(tmp_path, model={"weight_average_decay": 0.0})
    estimator.train(train_spec.input_fn, max_steps=2)
    weights, averages = _weights_and_averages(estimator.latest_checkpoint())
    assert weights and not averages
    assert not has_averages(estimator.latest_checkpoint(), list(weights))


def _zero_the_averages(checkpoint):
    """Rewrites the checkpoint with every average set to 0: a network restored from them outputs logits of 0."""
    reader = tf.train.load_checkpoint(checkpoint)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        variables = [tf.Variable(np.zeros_like(value) if name.endswith(SUFFIX) else value, name=name)
                     for name, value in ((n, reader.get_tensor(n)) for n, _ in tf.train.list_variables(checkpoint))]
        session.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver(variables).save(session, checkpoint)


@pytest.fixture(scope="module")
def zeroed_averages(tmp_path_factory):
    """(its folder, a checkpoint of 2 steps trained with averages, every average then set to 0): read, never
    written, by both cases below, so it is trained once."""
    tmp_path = tmp_path_factory.mktemp("zeroed_averages")
    _, estimator, train_spec, _ = tiny_estimator(tmp_path, model={"weight_average_decay": 0.99})
    estimator.train(train_spec.input_fn, max_steps=2)
    checkpoint = estimator.latest_checkpoint()
    _zero_the_averages(checkpoint)
    assert has_averages(checkpoint, list(_weights_and_averages(checkpoint)[0]))
    return checkpoint


@pytest.mark.parametrize("decay, scores_the_average", [(0.99, True), (0.0, False)])
def test_evaluation_and_export_use_the_average_when_training_kept_one(tmp_path, zeroed_averages, decay,
                                                                      scores_the_average):
    checkpoint = zeroed_averages  # the checkpoint holds averages either way; the config says whether to use them
    _, scorer, _, eval_spec = tiny_estimator(tmp_path, model={"weight_average_decay": decay})

    metrics = scorer.evaluate(eval_spec.input_fn, checkpoint_path=checkpoint)
    assert metrics["global_step"] == 2
    uniform = np.log(10.0)  # the cross-entropy of logits of 0
    assert (metrics["loss"] == pytest.approx(uniform, rel=1e-6)) == scores_the_average

    exported = tf.saved_model.load(export_checkpoint(ModelConfig(weight_average_decay=decay), checkpoint,
                                                     str(tmp_path / f"export{decay}")))
    probabilities = exported.signatures["images"](images=tf.random.uniform([4, 28, 28, 1]))["probabilities"].numpy()
    assert np.allclose(probabilities, 0.1, atol=1e-6) == scores_the_average


def test_the_average_is_kept_under_a_two_replica_strategy(tmp_path):
    """In replica context an update needs an aggregation: ONLY_FIRST_REPLICA, as every replica holds the same weights."""
    from tests.unit.test_model import _one_sgd_step  # pylint: disable=import-outside-toplevel

    mirrored = tf.compat.v1.distribute.MirroredStrategy(
        devices=["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    _, model_dir = _one_sgd_step(tmp_path, "two", mirrored, 4)
    weights, averages = _weights_and_averages(tf.train.latest_checkpoint(model_dir))
    assert set(averages) == set(weights) and weights
    for name in weights:
        np.testing.assert_allclose(averages[name], weights[name], rtol=1e-6, err_msg=name)  # one step: a copy
    assert not any("replica_1" in n for n, _ in tf.train.list_variables(model_dir))


def test_average_names_are_tensorflows():
    assert average_name("classic_cnn/dense/kernel") == "classic_cnn/dense/kernel" + SUFFIX
