"""model.normalise_inputs: a first layer without weights, built alike by training, the evaluator and the export."""

import numpy as np
import tensorflow as tf

from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.tf_model.export import export_checkpoint
from estimator_mnist.tf_model.network import build_network
from tests.unit.fakes import tiny_estimator


def test_normalised_inputs_are_a_first_layer_without_weights():
    plain, normalised = build_network("classic_cnn"), build_network("classic_cnn", normalise_inputs=True)
    for network in (plain, normalised):
        network.build((None, 28, 28, 1))
    # The same weights, named alike: a checkpoint fits either network.
    assert [w.shape.as_list() for w in normalised.weights] == [w.shape.as_list() for w in plain.weights]
    first = normalised.layers[0]
    assert isinstance(first, tf.keras.layers.Rescaling) and not first.weights
    pixels = tf.constant([[0.1307], [0.1307 + 0.3081], [0.0]])  # MNIST's mean, a standard deviation above, black
    np.testing.assert_allclose(first(pixels).numpy().ravel(), [0.0, 1.0, -0.1307 / 0.3081], atol=1e-6)


def test_the_export_normalises_as_training_did(tmp_path):
    # No moving average: predict (model_fn) and the export then restore the same weights.
    model = {"weight_average_decay": 0.0}
    config, estimator, train_spec, _ = tiny_estimator(tmp_path, model=model)
    assert config.model.normalise_inputs  # the default
    estimator.train(train_spec.input_fn, max_steps=2)
    images = np.random.RandomState(0).uniform(size=(4, 28, 28, 1)).astype(np.float32)
    predicted = np.stack([p["logits"] for p in estimator.predict(
        lambda: tf.data.Dataset.from_tensor_slices(images).batch(4), yield_single_examples=True)])
    exported = {}
    for normalise in (True, False):
        directory = export_checkpoint(ModelConfig(normalise_inputs=normalise, weight_average_decay=0.0),
                                      estimator.latest_checkpoint(), str(tmp_path / f"export_{normalise}"))
        signature = tf.saved_model.load(directory).signatures["images"]
        exported[normalise] = signature(images=tf.constant(images))["logits"].numpy()
    np.testing.assert_allclose(exported[True], predicted, rtol=1e-4, atol=1e-5)
    assert not np.allclose(exported[False], predicted, atol=1e-3)
