"""Run by test_benchmarks.py as a module: checks that benchmarks/ddp_data.py saves exactly the batches
input_fn gives each of 2 workers (3 steps of 4), and prints "same".

  python -m tests.e2e.ddp_data_probe DATA_DIR OUT_DIR
"""

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from estimator_mnist.tf_task.data import IMAGE_KEY, input_fn
from tests.helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from ddp_data import shards  # noqa: E402  pylint: disable=wrong-import-position


def main(data_dir: str, out_dir: str) -> int:
    for index, path in enumerate(shards(data_dir, 2, 3, 4, Path(out_dir))):
        saved = np.load(path)
        context = tf.distribute.InputContext(2, index, 2)
        batches = list(input_fn(tf.estimator.ModeKeys.TRAIN, context, data_dir=data_dir,
                                batch_size_per_replica=4).take(3).as_numpy_iterator())
        assert saved["images"].dtype == np.uint8 and saved["images"].shape == (12, 28, 28)
        np.testing.assert_array_equal(saved["images"].astype(np.float32) / 255.0,
                                      np.concatenate([f[IMAGE_KEY] for f, _ in batches])[..., 0])
        np.testing.assert_array_equal(saved["labels"], np.concatenate([labels for _, labels in batches]))
    print("same")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
