"""The input pipeline: MNIST as tensorflow-datasets prepared it, sharded per worker.

Estimator does not shard for you under MultiWorkerMirroredStrategy: it hands
`input_fn` an `input_context` and expects the function to call `shard()`.
Tasks never download; `estimator-mnist prepare-data` does that once per
machine, and writes the decoded copy of TFDS's splits that tasks read
(mnist_data/decoded.py): no PNG decoding, and no tensorflow_datasets import, in a task.
"""

from __future__ import annotations

import tensorflow as tf

from estimator_mnist.mnist_data import decoded as decoded_mnist, splits
from estimator_mnist.mnist_data.arrays import split_files, split_rows

IMAGE_KEY = "image"
TRAIN_SPLIT = splits.TRAIN
EVAL_SPLIT = splits.TEST
VALIDATION_SPLIT = splits.VALIDATION


def load_split(split: str, data_dir: str, validation_examples: int = 0) -> tf.data.Dataset:
    """(uint8 image [28,28,1], int64 label) pairs of a prepared split (splits.py), in TFDS's order. Never downloads."""
    source = splits.SOURCE[split]
    images_file, labels_file = split_files(source, data_dir)
    count = decoded_mnist.counts(data_dir)[source]
    start, stop = split_rows(split, count, validation_examples, data_dir)

    @tf.autograph.experimental.do_not_convert  # see _to_features
    def read_whole_split(_):
        # One read of each file (47 MB for train), then examples are slices of it.
        images = tf.reshape(tf.io.decode_raw(tf.io.read_file(images_file), tf.uint8), [-1, 28, 28, 1])
        labels = tf.cast(tf.io.decode_raw(tf.io.read_file(labels_file), tf.uint8), tf.int64)
        if (start, stop) != (0, count):  # without a validation split, the graph is the one it always was
            images, labels = images[start:stop], labels[start:stop]
        return images, labels

    return tf.data.Dataset.from_tensors(0).map(read_whole_split).unbatch()


# tf.data would have AutoGraph parse and rewrite these map functions, which have no
# Python control flow: 0.06 s before every task's first step. Pinned by
# tests/unit/test_data.py::test_autograph_leaves_the_map_functions_alone.
@tf.autograph.experimental.do_not_convert
def _to_features(images, labels):
    # Runs on whole batches: one vectorised cast per step instead of one per image.
    return {IMAGE_KEY: tf.cast(images, tf.float32) / 255.0}, tf.cast(labels, tf.int32)


def input_fn(mode, input_context=None, *, data_dir, batch_size_per_replica, eval_batch_size=1000,
             shuffle_buffer=10000, seed=0, make_dataset=None, validation_examples=0, eval_split=EVAL_SPLIT):
    """Builds the dataset for one input pipeline.

    `input_context` must keep this exact name: Estimator passes it only to
    functions with a parameter called `input_context`. `make_dataset(split)`
    injects the (image, label) pairs of a split ("train", "validation" or
    "test") instead of the prepared MNIST, for tests; it is called here because
    Estimator builds the pipeline inside its own graph.
    Training reads the training split less its last `validation_examples`
    rows (splits.py); evaluation reads `eval_split`: the test split, or those rows.
    """
    training = mode == tf.estimator.ModeKeys.TRAIN
    split = TRAIN_SPLIT if training else eval_split
    dataset = make_dataset(split) if make_dataset is not None else load_split(split, data_dir, validation_examples)
    if not training:
        # Evaluation always sees its whole split (the 10k test images, or the validation rows), unsharded, once.
        return dataset.batch(eval_batch_size).map(_to_features).prefetch(tf.data.AUTOTUNE)

    pipeline_id, batch_size = 0, batch_size_per_replica
    if input_context is not None:
        # Shard first, before any shuffling, so that pipelines see disjoint examples; the validation rows are
        # already cut off, so no shard holds one.
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        pipeline_id = input_context.input_pipeline_id
        batch_size = input_context.get_per_replica_batch_size(
            batch_size_per_replica * input_context.num_replicas_in_sync)
    # The uint8 shard (about 24 MB for all of MNIST) fits in memory: decode once.
    dataset = dataset.cache()
    # Seeded per pipeline: reproducible, yet every worker shuffles its shard differently.
    dataset = dataset.shuffle(shuffle_buffer, seed=seed + pipeline_id, reshuffle_each_iteration=True)
    # Training runs until max_steps, not for a number of epochs.
    dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(_to_features, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)

