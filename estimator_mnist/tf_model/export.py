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

import contextlib
import time
from typing import Callable, Dict

import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.model_files import exports, layout
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
    while storage.exists(layout.export_dir(export_base, stamp)):
        stamp += 1
    return layout.export_dir(export_base, stamp)


def publish(temporary: str, export_dir: str) -> None:
    """The finished export under its final name. Where the store moves atomically (a disk: one rename) Serving
    never sees half of it. Elsewhere (a bucket, where a move is a copy and a delete per object) saved_model.pb
    moves last: an export without it is no export to Serving nor to exports_in, so no reader loads one whose
    variables are still on the way. The store is asked (storage.has_atomic_move), not the path's scheme."""
    if storage.has_atomic_move(temporary):
        storage.move(temporary, export_dir)
        return
    for name in sorted(storage.listdir(temporary), key=lambda n: n == layout.SAVED_MODEL_FILE):
        storage.move(storage.join(temporary, name), storage.join(export_dir, name))
    # Left: the temporary directory's own marker object, which TF's gs:// makes for each directory and no listing
    # of it names; the export base listed a temp-<ts> for each export (tests/unit/test_export_storage.py).
    storage.rmtree(temporary)


def write_saved_model(export_base: str, build: Callable[[], dict], restore: Callable[[tf.compat.v1.Session], None],
                      session_config=None, clear_devices: bool = False) -> str:
    """Builds the graph (`build()` returns the signatures), restores its variables, writes <export_base>/<timestamp>.

    Written under a temporary name and renamed, so that Serving, which polls
    the base directory, never loads a half-written export. `clear_devices`
    leaves the graph's device placements out of the export, so that it loads
    on a machine without those devices.
    """
    export_dir = _new_export_dir(export_base)
    temporary = layout.temporary_export(export_base, storage.basename(export_dir))
    storage.rmtree(temporary)  # a stop half-way through an earlier export of the same second
    with tf.Graph().as_default() as graph:
        signatures = build()
        with tf.compat.v1.Session(graph=graph, config=session_config) as session:
            restore(session)
            builder = tf.compat.v1.saved_model.Builder(temporary)
            builder.add_meta_graph_and_variables(session, [tf.saved_model.SERVING], signature_def_map=signatures,
                                                 strip_default_attrs=True, clear_devices=clear_devices)
            builder.save()
    publish(temporary, export_dir)
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
    for old in exports.exports_in(export_base)[:-count] if count > 0 else []:
        # saved_model.pb first: a reader never takes one whose variables are half removed for an export.
        with contextlib.suppress(OSError):  # housekeeping: an old export left costs space, not correctness
            storage.remove(layout.saved_model_file(old), missing_ok=True)
            storage.rmtree(old)
