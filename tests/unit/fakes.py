"""Stand-ins for MNIST in the unit tier: small arrays shaped like the prepared dataset."""

import numpy as np
import tensorflow as tf


def fake_mnist(count=64, seed=0):
    """(uint8 image, label) pairs shaped like prepared MNIST; the label is drawn in the image."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=count).astype(np.int64)
    images = rng.randint(0, 40, size=(count, 28, 28, 1)).astype(np.uint8)
    for i, label in enumerate(labels):
        images[i, 2 * label:2 * label + 6, 4:24, 0] = 255
    return images, labels


def dataset_of(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, labels))


def tiny_estimator(tmp_path, **sections):
    """(config, estimator, train_spec, eval_spec) of a chief-only run of 4 steps of 8 fake images, checkpoints
    every 2; `sections` add or replace config sections (e.g. evaluation={...})."""
    from estimator_mnist.tf_task import runner  # pylint: disable=import-outside-toplevel
    from estimator_mnist.config import TaskId, config_from_dict  # pylint: disable=import-outside-toplevel

    images, labels = fake_mnist(64)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"]},
        "training": {"batch_size_per_replica": 8, "max_steps": 4, "save_checkpoints_steps": 2},
        "model_dir": str(tmp_path / "model"), **sections,
    }, "test")
    from tests.helpers import planned  # pylint: disable=import-outside-toplevel

    estimator = runner.build_estimator(config, planned(config, TaskId("chief", 0)))
    train_spec, eval_spec = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels))
    return config, estimator, train_spec, eval_spec
