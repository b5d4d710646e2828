"""Runs an exported SavedModel (export.py) on the files `predict` read: bytes to one signature, arrays to the other.

Loaded with the TF1 loader into a session, as TensorFlow Serving does, so
that `--invert` can feed the graph's `invert:0` tensor, which the bytes
signature leaves out to keep the single input Serving's b64 rows need.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from estimator_mnist.errors import UsageError
from estimator_mnist.tf_model.export import BYTES_INPUT, BYTES_SIGNATURE, IMAGES_INPUT, IMAGES_SIGNATURE, INVERT_TENSOR

ERR_OLD_EXPORT = ("{export}: this export has no '{signature}' signature (it was written by an earlier version, "
                  "which took float images only); train or evaluate again to export both signatures")
ERR_UNDECODABLE = "{file}: TensorFlow cannot decode it as an image (PNG, JPEG, GIF or BMP): {reason}"
BATCH = 1000


class Classifier:
    def __init__(self, export_dir: str):
        self._export_dir = export_dir
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        meta = tf.compat.v1.saved_model.loader.load(self._session, [tf.saved_model.SERVING], export_dir)
        self._signatures = meta.signature_def
        self._callables = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._session.close()

    @property
    def signatures(self):
        """The export's SignatureDefs, by name."""
        return self._signatures

    def run(self, signature: str, inputs: dict) -> dict:
        """Every output of `signature` for {input name: array}. A callable made once per signature runs it: no
        Python-side feed checks, so a wrong shape or dtype gets TensorFlow's own error, as from Serving."""
        if signature not in self._callables:
            definition = self._signatures[signature]
            names = sorted(definition.inputs)
            outputs = sorted(definition.outputs)
            run = self._session.make_callable([definition.outputs[name].name for name in outputs],
                                              [definition.inputs[name].name for name in names])
            self._callables[signature] = (names, outputs, run)
        names, outputs, run = self._callables[signature]
        return dict(zip(outputs, run(*[inputs[name] for name in names])))

    def _tensors(self, signature: str, input_key: str):
        if signature not in self._signatures:
            raise UsageError(ERR_OLD_EXPORT.format(export=self._export_dir, signature=signature))
        definition = self._signatures[signature]
        return definition.inputs[input_key].name, definition.outputs["probabilities"].name

    def probabilities(self, item, invert: str = "auto") -> np.ndarray:
        """[N, 10] for one file's images."""
        if item.encoded is not None:
            feed, fetch = self._tensors(BYTES_SIGNATURE, BYTES_INPUT)
            try:
                return self._session.run(fetch, {feed: [item.encoded], INVERT_TENSOR: invert})
            except tf.errors.InvalidArgumentError as exc:
                # TF's message is "Graph execution error:", then the decoder's reason, then the node.
                lines = [line.strip() for line in exc.message.splitlines()
                         if line.strip() and not line.strip().startswith("[[") and "execution error" not in line]
                reason = lines[0] if lines else type(exc).__name__
                raise UsageError(ERR_UNDECODABLE.format(file=item.file, reason=reason)) from None
        feed, fetch = self._tensors(IMAGES_SIGNATURE, IMAGES_INPUT)
        return np.concatenate([self._session.run(fetch, {feed: item.array[i:i + BATCH]})
                               for i in range(0, len(item.array), BATCH)] or [np.zeros((0, 10), np.float32)])
