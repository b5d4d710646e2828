"""The SavedModel every evaluation exports: two signatures over one network, ready for TensorFlow Serving.

- `serving_default` takes `image_bytes`, a batch of encoded images (PNG,
  JPEG, ...), and makes MNIST digits of them inside the graph (digits.py),
  so a Serving REST request `{"instances": [{"b64": "..."}]}` works as is;
- `images` takes `images`, float [N, 28, 28, 1] in [0, 1], as MNIST is.

Both return `class_ids`, `probabilities` and `logits`. The graph also holds
a scalar string `invert:0` ("auto" unless fed), which `estimator-mnist
predict --invert` feeds; it is left out of the signature so that the bytes
signature keeps one input, the shape Serving's b64 rows need.

The export is written here rather than by Estimator's exporters, which name
any second signature "<input>:<output>" and cannot give it its own inputs.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Callable, Dict

import tensorflow as tf

from estimator_mnist import checkpoints
from estimator_mnist.tf_model import digits
from estimator_mnist.tf_model.averages import restore_map

BYTES_SIGNATURE, IMAGES_SIGNATURE = "serving_default", "images"
BYTES_INPUT, IMAGES_INPUT = "image_bytes", "images"
INVERT_TENSOR = "invert:0"
OUTPUTS = ("class_ids", "probabilities", "logits")


def _outputs(logits: tf.Tensor) -> Dict[str, tf.Tensor]:
    logits = tf.cast(logits, tf.float32)
    return {"class_ids": tf.argmax(logits, axis=1, output_type=tf.int32),
            "probabilities": tf.nn.softmax(logits), "logits": logits}


def signature_defs(logits_of: Callable[[tf.Tensor], tf.Tensor]) -> dict:
    """Both signatures in the current graph; `logits_of(images)` builds the network (once, then reuses it)."""
    image_bytes = tf.compat.v1.placeholder(tf.string, [None], name=BYTES_INPUT)
    invert = tf.compat.v1.placeholder_with_default("auto", [], name=INVERT_TENSOR.split(":")[0])
    images = tf.compat.v1.placeholder(tf.float32, [None, digits.SIZE, digits.SIZE, 1], name=IMAGES_INPUT)
    predict = tf.compat.v1.saved_model.predict_signature_def
    return {
        BYTES_SIGNATURE: predict({BYTES_INPUT: image_bytes}, _outputs(logits_of(digits.from_encoded(image_bytes, invert)))),
        IMAGES_SIGNATURE: predict({IMAGES_INPUT: images}, _outputs(logits_of(images))),
    }


def _new_export_dir(export_base: str) -> str:
    # Serving loads the numerically greatest subdirectory: a second export in the same second takes the next number.
    stamp = int(time.time())
    while tf.io.gfile.exists(os.path.join(export_base, str(stamp))):
        stamp += 1
    return os.path.join(export_base, str(stamp))


def write_saved_model(export_base: str, build: Callable[[], dict], restore: Callable[[tf.compat.v1.Session], None],
                      session_config=None, clear_devices: bool = False) -> str:
    """Builds the graph (`build()` returns the signatures), restores its variables, writes <export_base>/<timestamp>.

    Written under a temporary name and renamed, so that Serving, which polls
    the base directory, never loads a half-written export; through TensorFlow's
    own file systems, so that export_base may be a gs:// URL (where a rename
    is a copy then a delete of each object: GCS has no rename). `clear_devices`
    leaves the graph's device placements out of the export, so that it loads
    on a machine without those devices.
    """
    export_dir = _new_export_dir(export_base)
    temporary = os.path.join(export_base, f"temp-{os.path.basename(export_dir)}")
    if tf.io.gfile.exists(temporary):
        tf.io.gfile.rmtree(temporary)
    with tf.Graph().as_default() as graph:
        signatures = build()
        with tf.compat.v1.Session(graph=graph, config=session_config) as session:
            restore(session)
            builder = tf.compat.v1.saved_model.Builder(temporary)
            builder.add_meta_graph_and_variables(session, [tf.saved_model.SERVING], signature_def_map=signatures,
                                                 strip_default_attrs=True, clear_devices=clear_devices)
            builder.save()
    tf.io.gfile.rename(temporary, export_dir)
    return export_dir


def export_checkpoint(model_config, checkpoint_path: str, export_base: str) -> str:
    """One trained network, from one checkpoint, as a SavedModel with both signatures; returns its directory."""
    from estimator_mnist.tf_model.network import build_network  # pylint: disable=import-outside-toplevel

    def build():
        # float32 whatever precision trained it: the variables are float32, and so is any machine that serves it.
        network = build_network(model_config.network, "float32", model_config.dropout, model_config.normalise_inputs)
        return signature_defs(lambda images: network(images, training=False))

    def restore(session):
        # The moving average the trainers kept, where they kept one (weight_average.py): what the evaluator scored.
        weights = tf.compat.v1.global_variables()
        averaged = bool(model_config.weight_average_decay)
        tf.compat.v1.train.Saver(restore_map([w.op.name for w in weights], weights, averaged)).restore(
            session, checkpoint_path)

    return write_saved_model(export_base, build, restore)


def keep_newest(export_base: str, count: int) -> None:
    for old in checkpoints.exports_in(export_base)[:-count] if count > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
