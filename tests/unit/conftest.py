"""Unit tier: no real MNIST, no processes (but one fresh interpreter for the import check).

Two logical CPUs, so that in-graph replication across devices can be tested
on one CPU; this must run before TensorFlow initialises its runtime, hence at
collection time here.
"""

import tensorflow as tf

_CPUS = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_CPUS[0], [tf.config.LogicalDeviceConfiguration()] * 2)
