"""A prepared split as NumPy arrays, and the decoded files and rows behind it (no TensorFlow).

input_fn (tf_task/data.py) reads the same files and rows with tf.data;
ensembles and the benchmarks take whole splits as arrays.
"""

from __future__ import annotations

import numpy as np

from estimator_mnist.errors import UsageError
from estimator_mnist.mnist_data import decoded as decoded_mnist, splits
from estimator_mnist.mnist_data.prepare import ERR_NOT_PREPARED


def split_files(split: str, data_dir: str):
    reason = decoded_mnist.problem(data_dir, splits=(split,))
    if reason is not None:
        raise UsageError(ERR_NOT_PREPARED.format(data_dir=data_dir, reason=reason))
    return tuple(str(path) for path in decoded_mnist.files(data_dir, split))


def split_rows(split: str, count: int, validation_examples: int, data_dir) -> tuple:
    if split != splits.TEST:
        splits.check(count, validation_examples, data_dir)
    return splits.rows(split, count, validation_examples)


def load_split_numpy(split: str, data_dir: str, validation_examples: int = 0):
    """(uint8 images [N,28,28,1], int64 labels [N]) of a prepared split (splits.py), in TFDS's order, as numpy."""
    images_file, labels_file = split_files(splits.SOURCE[split], data_dir)
    images = np.fromfile(images_file, np.uint8).reshape(-1, 28, 28, 1)
    start, stop = split_rows(split, len(images), validation_examples, data_dir)
    return images[start:stop], np.fromfile(labels_file, np.uint8).astype(np.int64)[start:stop]
