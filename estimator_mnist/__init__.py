"""Distributed MNIST training with TensorFlow Estimator and tf.distribute."""

__version__ = "0.1.0"
