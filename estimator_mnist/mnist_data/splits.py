"""The three splits of MNIST a run uses, as row ranges of the decoded copy's two files. No TensorFlow.

MNIST ships a training set (60,000 images) and a test set (10,000). With
`data.validation_examples: N` above 0, the LAST N rows of the decoded
training copy (decoded.py: TFDS's order, the same bytes on every
machine that prepared it) are the validation split, and training reads only
the rows before them. The cut is made on the whole split before any task
shards it (data.py), so every task, host and strategy holds out the same N
images and no training shard ever holds one of them. With N = 0 nothing is
cut: training reads all 60,000 rows, as it always did.

Sweeps and ensembles choose on the validation split and only report the
test split (docs/sweeps.md), so the test accuracy they report was never
used to choose anything.
"""

from __future__ import annotations

from typing import Tuple

TRAIN, VALIDATION, TEST = "train", "validation", "test"
SOURCE = {TRAIN: "train", VALIDATION: "train", TEST: "test"}  # the decoded copy's file each split reads
ERR_TOO_MANY = ("data.validation_examples is {held_out} but the decoded training copy in {data_dir} has only {count} "
                "images; hold out fewer (at most {most})")


def rows(split: str, count: int, validation_examples: int) -> Tuple[int, int]:
    """[start, stop) of `split` among the `count` rows of its source file."""
    if split == TEST or not validation_examples:
        return 0, count
    cut = count - validation_examples
    return (0, cut) if split == TRAIN else (cut, count)


def check(count: int, validation_examples: int, data_dir) -> None:
    """A UsageError when holding out `validation_examples` of `count` training rows would leave none to train on."""
    if validation_examples and validation_examples >= count:
        from estimator_mnist.errors import UsageError  # pylint: disable=import-outside-toplevel

        raise UsageError(ERR_TOO_MANY.format(held_out=validation_examples, data_dir=data_dir, count=count,
                                             most=count - 1))
