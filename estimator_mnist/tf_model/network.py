"""The CNN itself: the layers that training (tf_task/model.py), the export and ensembles build.

One definition, so that an export restores exactly the weights training
saved. No training, no optimizer: those are model_fn's.
"""

from __future__ import annotations

import tensorflow as tf

NUM_CLASSES = 10
# The mean and standard deviation of MNIST's training pixels, scaled to [0, 1].
PIXEL_MEAN, PIXEL_STD = 0.1307, 0.3081


def build_network(name: str, precision: str = "float32", dropout: float = 0.0,
                  normalise_inputs: bool = False) -> tf.keras.Model:
    """The network; with a mixed precision the layers compute in 16 bits and keep float32 variables.

    The logits always come out in float32: softmax and cross-entropy in 16
    bits lose the small probabilities the loss is made of. With
    `normalise_inputs` the first layer maps the [0, 1] pixels to mean 0 and
    standard deviation 1 over MNIST's training set (model.normalise_inputs):
    a constant layer, no weights, so whatever builds the network (training,
    evaluation, the export, ensembles) normalises the same way.
    """
    layers = tf.keras.layers
    dtype = tf.keras.mixed_precision.Policy(precision) if precision != "float32" else None
    # float32, whatever the precision: the network's input is float32 pixels.
    first = [layers.Rescaling(1.0 / PIXEL_STD, offset=-PIXEL_MEAN / PIXEL_STD, name="normalise_inputs")] \
        if normalise_inputs else []
    if name == "classic_cnn":
        # The classic distributed-MNIST network.
        stack = first + [
            layers.Conv2D(32, 5, padding="same", activation="relu", dtype=dtype),
            layers.MaxPooling2D(2, dtype=dtype),
            layers.Conv2D(64, 5, padding="same", activation="relu", dtype=dtype),
            layers.MaxPooling2D(2, dtype=dtype),
            layers.Flatten(dtype=dtype),
            layers.Dense(500, activation="relu", dtype=dtype),
            *([layers.Dropout(dropout, dtype=dtype)] if dropout else []),
            layers.Dense(NUM_CLASSES, dtype=dtype),
        ]
    elif name == "tutorial_cnn":
        stack = first + [
            layers.Conv2D(32, 3, activation="relu", dtype=dtype),
            layers.MaxPooling2D(2, dtype=dtype),
            layers.Flatten(dtype=dtype),
            layers.Dense(64, activation="relu", dtype=dtype),
            *([layers.Dropout(dropout, dtype=dtype)] if dropout else []),
            layers.Dense(NUM_CLASSES, dtype=dtype),
        ]
    else:
        raise ValueError(f"unknown network {name!r}")
    if dtype is not None:
        stack.append(layers.Activation("linear", dtype="float32", name="float32_logits"))
    return tf.keras.Sequential(stack, name=name)
