"""Run as `python -m tests.serve_exports BASE EXPORTS DIGITS_FOLDER DIGITS [--hang-first]` by tests/serve_helpers.py:
stand-in exports with random weights (seed 1, 2, ...) written as the evaluator writes them, each newer than the one
before, and PNG digits to send; prints the exports and the PNG files as JSON. With --hang-first, every model call
of the first export hangs: its outputs wait on a dequeue from a queue nothing fills, which only closing its
session (unloading it) ends, as a model call that hangs in a real graph would."""

import json
import sys
from pathlib import Path

import numpy as np


def export(export_base: str, seed: int, hang: bool = False) -> str:
    import tensorflow as tf

    from estimator_mnist.tf_model.export import signature_defs, write_saved_model
    from estimator_mnist.tf_model.network import build_network

    def build():
        tf.compat.v1.set_random_seed(seed)
        network = build_network("tutorial_cnn")
        never = tf.queue.FIFOQueue(1, tf.float32, shapes=[]).dequeue() if hang else 0.0
        return signature_defs(lambda images: network(images, training=False) + never)

    return write_saved_model(export_base, build, lambda s: s.run(tf.compat.v1.global_variables_initializer()))


def digits(folder: str, count: int) -> list:
    """Strokes of various lengths and slants, dark on light as a drawing is; the floats are MNIST's way round."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    Path(folder).mkdir(parents=True, exist_ok=True)
    files, floats = [], []
    for index in range(count):
        image = np.zeros((28, 28), np.uint8)
        top, left = rng.integers(3, 10), rng.integers(6, 18)
        for row in range(top, top + rng.integers(10, 18)):
            column = left + (row - top) * rng.integers(0, 2) // 2
            image[row, column:column + 3] = 255
        if index % 2:
            image[top:top + 3, left:left + rng.integers(6, 12)] = 255
        files.append(str(Path(folder) / f"{index:03d}.png"))
        tf.io.write_file(files[-1], tf.io.encode_png(255 - image[:, :, None]))
        floats.append(image[:, :, None].astype(np.float32) / 255.0)
    np.save(Path(folder) / "digits.npy", np.stack(floats))
    return files


if __name__ == "__main__":
    base, exports, folder, count = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    hang_first = "--hang-first" in sys.argv[5:]
    print(json.dumps({"exports": [export(base, seed, hang_first and seed == 1) for seed in range(1, exports + 1)],
                      "files": digits(folder, count)}))
