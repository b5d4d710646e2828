"""The DDP reference's data: the exact batches this trainer's input_fn gives each worker, as arrays.

PyTorch has no reader for the TFDS records, and the reference must see the
same images in the same order as the trainer and the Keras reference: so the
benchmark (in the package's venv, with TensorFlow) iterates `input_fn` for
each worker's input context, as Estimator and Keras call it, and saves what
it yields. The PyTorch side then only indexes arrays: its input pipeline
costs it less than the others' costs them, which favours the reference.

  shards(data_dir, workers=2, steps=600, batch=64, out_dir=D) -> [D/worker-0-of-2-600x64.npz, D/worker-1-of-2-600x64.npz]
  test_set(data_dir, out_dir=D) -> D/test.npz
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import tensorflow as tf

from estimator_mnist.tf_task.data import IMAGE_KEY, input_fn


def _as_uint8(images) -> np.ndarray:
    # input_fn hands out k/255 as float32: scaling back and rounding recovers the stored byte exactly.
    return np.rint(np.asarray(images) * 255.0).astype(np.uint8)[..., 0]


def _save(path: Path, dataset) -> Path:
    """path.npz with `images` uint8 [N, 28, 28] and `labels` int64, in the dataset's order (once: kept if there)."""
    if not path.is_file():
        images, labels = [], []
        for features, label in dataset.as_numpy_iterator():
            images.append(_as_uint8(features[IMAGE_KEY]))
            labels.append(label.astype(np.int64))
        np.savez(path, images=np.concatenate(images), labels=np.concatenate(labels))
    return path


def shards(data_dir: str, workers: int, steps: int, batch: int, out_dir: Path) -> List[Path]:
    """worker-<i>-of-<workers>-<steps>x<batch>.npz: the `steps` batches input_fn gives worker i."""
    return [_save(out_dir / f"worker-{index}-of-{workers}-{steps}x{batch}.npz",
                  input_fn(tf.estimator.ModeKeys.TRAIN,
                           tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=index,
                                                      num_replicas_in_sync=workers),
                           data_dir=data_dir, batch_size_per_replica=batch).take(steps))
            for index in range(workers)]


def test_set(data_dir: str, out_dir: Path) -> Path:
    """test.npz: the whole 10k test split as input_fn's EVAL mode gives it."""
    return _save(out_dir / "test.npz", input_fn(tf.estimator.ModeKeys.EVAL, data_dir=data_dir, batch_size_per_replica=1))
