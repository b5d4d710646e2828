"""The DDP reference's data: the exact batches this trainer's input_fn gives each worker, as arrays.

PyTorch has no reader for the TFDS records, and the reference must see the
same images in the same order as the trainer and the Keras reference: so the
benchmark (in the package's venv, with TensorFlow) iterates `input_fn` for
each worker's input context, as Estimator and Keras call it, and saves what
it yields. The PyTorch side then only indexes arrays: its input pipeline
costs it less than the others' costs them, which favours the reference.

  shards(data_dir, workers=2, steps=600, batch=64, out_dir=D) -> [D/worker-0.npz, D/worker-1.npz]
  test_set(data_dir, out_dir=D) -> D/test.npz
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np


def _as_uint8(images) -> np.ndarray:
    # input_fn hands out k/255 as float32: scaling back and rounding recovers the stored byte exactly.
    return np.rint(np.asarray(images) * 255.0).astype(np.uint8)[..., 0]


def shards(data_dir: str, workers: int, steps: int, batch: int, out_dir: Path) -> List[Path]:
    """worker-<i>.npz with `images` uint8 [steps*batch, 28, 28] and `labels` int64, in input_fn's order."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel

    paths = []
    for index in range(workers):
        path = out_dir / f"worker-{index}-of-{workers}-{steps}x{batch}.npz"
        if not path.is_file():
            context = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=index,
                                                 num_replicas_in_sync=workers)
            dataset = input_fn(tf.estimator.ModeKeys.TRAIN, context, data_dir=data_dir,
                               batch_size_per_replica=batch).take(steps)
            images, labels = [], []
            for features, label in dataset.as_numpy_iterator():
                images.append(_as_uint8(features[IMAGE_KEY]))
                labels.append(label.astype(np.int64))
            np.savez(path, images=np.concatenate(images), labels=np.concatenate(labels))
        paths.append(path)
    return paths


def test_set(data_dir: str, out_dir: Path) -> Path:
    """test.npz: the whole 10k test split as input_fn's EVAL mode gives it."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from estimator_mnist.data import IMAGE_KEY, input_fn  # pylint: disable=import-outside-toplevel

    path = out_dir / "test.npz"
    if not path.is_file():
        images, labels = [], []
        for features, label in input_fn(tf.estimator.ModeKeys.EVAL, data_dir=data_dir,
                                        batch_size_per_replica=1).as_numpy_iterator():
            images.append(_as_uint8(features[IMAGE_KEY]))
            labels.append(label.astype(np.int64))
        np.savez(path, images=np.concatenate(images), labels=np.concatenate(labels))
    return path
