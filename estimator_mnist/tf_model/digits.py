"""Any picture of a digit made into an MNIST digit, as graph ops, so that every export carries it.

MNIST's digits were made this way (LeCun et al.): the digit in white on
black, its bounding box scaled to fit 20x20 keeping its aspect ratio, with
anti-aliasing, then placed in 28x28 so that its centre of mass sits at the
centre. A photo or a drawing goes through the same steps here; since the
steps live inside the exported graph, `estimator-mnist predict` and a
TensorFlow Serving client that sends the encoded image get the same answer.

Decoding is TensorFlow's own (PNG, JPEG, GIF, BMP; 8 or 16 bits; grey,
grey+alpha, RGB, RGBA, palette). `invert`: "auto" inverts dark-on-light
pictures (judged by the border, which is background in any sane picture of
one digit), "yes" always, "no" never.
"""

from __future__ import annotations

import tensorflow as tf

SIZE = 28  # MNIST's image side
BOX = 20  # the side the digit's bounding box is scaled to fit
CENTRE = SIZE / 2.0  # where MNIST's centres of mass sit, in pixel indices (measured: 14.0 and 14.0 on the test set)
INK_LEVEL = 0.06  # ink fainter than this (after the background is taken off) is noise: JPEG, paper, a tint
INVERT_MODES = ("auto", "yes", "no")


def _intensity(decoded: tf.Tensor) -> tf.Tensor:
    """[H, W] in [0, 1] from a decoded float image of 1-4 channels.

    A picture with transparent parts is a digit painted on nothing: its
    opacity is the ink, whatever the colour it was painted in.
    """
    channels = tf.shape(decoded)[2]
    rgb = tf.cond(channels >= 3, lambda: decoded[:, :, :3], lambda: tf.tile(decoded[:, :, :1], [1, 1, 3]))
    grey = tf.image.rgb_to_grayscale(rgb)[:, :, 0]
    alpha = tf.cond(tf.equal(channels % 2, 0), lambda: decoded[:, :, -1], lambda: tf.ones_like(grey))
    return tf.cond(tf.reduce_min(alpha) < 0.5, lambda: alpha, lambda: grey)


def _ink(intensity: tf.Tensor, invert: tf.Tensor) -> tf.Tensor:
    """White-on-black ink in [0, 1]: inverted if asked (or if the border is light), background taken off, stretched."""
    border = tf.concat([intensity[0, :], intensity[-1, :], intensity[:, 0], intensity[:, -1]], axis=0)
    background = tf.sort(border)[tf.size(border) // 2]  # the median: a digit touching the border does not move it
    middle = (tf.reduce_min(intensity) + tf.reduce_max(intensity)) / 2.0
    flip = tf.logical_or(tf.equal(invert, "yes"), tf.logical_and(tf.equal(invert, "auto"), background > middle))
    value = tf.cond(flip, lambda: 1.0 - intensity, lambda: intensity)
    background = tf.cond(flip, lambda: 1.0 - background, lambda: background)
    top = tf.reduce_max(value)
    ink = tf.clip_by_value((value - background) / tf.maximum(top - background, 1e-6), 0.0, 1.0)
    return tf.where(ink >= INK_LEVEL, ink, tf.zeros_like(ink))


def _centred(ink: tf.Tensor) -> tf.Tensor:
    """[28, 28, 1]: the bounding box of the ink scaled to fit 20x20, its centre of mass at the centre."""
    rows = tf.where(tf.reduce_any(ink > 0, axis=1))[:, 0]
    cols = tf.where(tf.reduce_any(ink > 0, axis=0))[:, 0]
    top, left = tf.cast(rows[0], tf.int32), tf.cast(cols[0], tf.int32)
    height, width = tf.cast(rows[-1], tf.int32) - top + 1, tf.cast(cols[-1], tf.int32) - left + 1
    box = tf.image.crop_to_bounding_box(ink[:, :, None], top, left, height, width)
    scale = BOX / tf.cast(tf.maximum(height, width), tf.float32)
    new_size = tf.maximum(1, tf.cast(tf.round(tf.cast(tf.stack([height, width]), tf.float32) * scale), tf.int32))
    digit = tf.clip_by_value(tf.image.resize(box, new_size, method="bilinear", antialias=True), 0.0, 1.0)
    mass = tf.maximum(tf.reduce_sum(digit), 1e-6)
    y = tf.reduce_sum(digit[:, :, 0] * tf.cast(tf.range(new_size[0]), tf.float32)[:, None]) / mass
    x = tf.reduce_sum(digit[:, :, 0] * tf.cast(tf.range(new_size[1]), tf.float32)[None, :]) / mass
    # A digit whose mass sits far off its box's centre would leave the field: it stops at the edge instead.
    offset_y = tf.clip_by_value(tf.cast(tf.round(CENTRE - y), tf.int32), 0, SIZE - new_size[0])
    offset_x = tf.clip_by_value(tf.cast(tf.round(CENTRE - x), tf.int32), 0, SIZE - new_size[1])
    return tf.image.pad_to_bounding_box(digit, offset_y, offset_x, SIZE, SIZE)


def mnist_digit(decoded: tf.Tensor, invert: tf.Tensor) -> tf.Tensor:
    """[28, 28, 1] float in [0, 1] from one decoded float image [H, W, C]; a blank picture stays blank."""
    ink = _ink(_intensity(decoded), invert)
    return tf.cond(tf.reduce_any(ink > 0), lambda: _centred(ink), lambda: tf.zeros([SIZE, SIZE, 1]))


def from_encoded(image_bytes: tf.Tensor, invert: tf.Tensor) -> tf.Tensor:
    """[N, 28, 28, 1] from a [N] batch of encoded images. A file TensorFlow cannot decode fails the batch."""

    def one(contents):
        decoded = tf.io.decode_image(contents, dtype=tf.float32, expand_animations=False)
        return mnist_digit(decoded, invert)

    return tf.map_fn(one, image_bytes, fn_output_signature=tf.TensorSpec([SIZE, SIZE, 1], tf.float32))
