"""The in-graph preprocessing every export carries: any picture of a digit made into an MNIST digit."""

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.tf_model import digits


def mnist_like():
    """A uint8 [28,28,1] '7': box 20 high, centre of mass at (14, 14), anti-aliased edges like MNIST's."""
    image = np.zeros((28, 28), np.float32)
    image[4, 8:21] = 1.0  # the bar
    for row in range(5, 24):  # the stem, leaning left
        col = 20 - (row - 5) * 8 // 19
        image[row, col - 1:col + 1] = 1.0
    image = tf.nn.avg_pool2d(image[None, :, :, None], 2, 1, "SAME")[0].numpy()  # soft edges
    mass = image[..., 0].sum()
    rows, cols = np.indices((28, 28))
    shift = (round(14 - (image[..., 0] * rows).sum() / mass), round(14 - (image[..., 0] * cols).sum() / mass))
    return (np.roll(image, shift, axis=(0, 1)) * 255).astype(np.uint8)


def run(encoded, invert="auto"):
    return digits.from_encoded(tf.constant(encoded), tf.constant(invert)).numpy()


def centre_of_mass(digit):
    rows, cols = np.indices(digit.shape[:2])
    mass = digit[..., 0].sum()
    return (digit[..., 0] * rows).sum() / mass, (digit[..., 0] * cols).sum() / mass


@pytest.fixture(scope="module")
def reference():
    image = mnist_like()
    return image, run([tf.io.encode_png(image).numpy()])[0]


def test_an_mnist_digit_passes_nearly_unchanged(reference):
    image, made = reference
    assert made.shape == (28, 28, 1) and made.dtype == np.float32
    assert np.abs(made - image / 255.0).mean() < 0.05  # (real MNIST test digits: 0.0007, docs/using_the_model.md)
    assert np.allclose(centre_of_mass(made), (14, 14), atol=0.6)


def variants(image):
    big = tf.image.resize(image, [84, 84]).numpy()
    colour = np.concatenate([40 + image * 0.7, 120 + image * 0.0, 230 - image * 0.8], axis=-1)
    transparent = np.concatenate([np.full_like(image, 200), np.full_like(image, 30), image, image], axis=-1)
    yield "inverted", tf.io.encode_png(255 - image)
    yield "3x larger, dark on light, JPEG", tf.io.encode_jpeg(255 - big.astype(np.uint8), quality=90)
    yield "coloured", tf.io.encode_png(colour.astype(np.uint8))
    yield "painted on a transparent canvas", tf.io.encode_png(transparent.astype(np.uint8))
    yield "16 bits", tf.io.encode_png(image.astype(np.uint16) * 257)
    canvas = np.zeros((100, 60, 1), np.uint8)
    canvas[60:88, 5:33] = image
    yield "small and off-centre on a large canvas", tf.io.encode_png(canvas)


@pytest.mark.parametrize("index", range(6))
def test_pictures_of_the_digit_become_the_same_mnist_digit(reference, index):
    image, made = reference
    name, encoded = list(variants(image))[index]
    result = run([encoded.numpy()])[0]
    assert np.abs(result - made).mean() < 0.05, name
    assert np.allclose(centre_of_mass(result), (14, 14), atol=0.6), name


def test_invert_yes_and_no_override_the_border_rule(reference):
    image, made = reference
    dark_on_light = tf.io.encode_png(255 - image).numpy()
    assert np.abs(run([dark_on_light], "yes")[0] - made).mean() < 0.02
    # The wrong way round, the digit is darker than the background, which is taken off: nothing is left.
    assert not run([dark_on_light], "no")[0].any()
    assert not run([tf.io.encode_png(image).numpy()], "yes")[0].any()


def test_a_blank_picture_stays_blank_and_a_batch_keeps_its_order(reference):
    image, made = reference
    blank = tf.io.encode_png(np.full((28, 28, 1), 200, np.uint8)).numpy()
    out = run([blank, tf.io.encode_png(image).numpy()])
    assert not out[0].any() and np.abs(out[1] - made).mean() < 1e-6


def test_a_file_that_is_no_image_fails_the_decoder():
    with pytest.raises(tf.errors.InvalidArgumentError):
        run([b"not an image"])
