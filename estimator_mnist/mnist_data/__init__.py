"""MNIST on disk: preparing it once per machine with tensorflow-datasets, its IDX files, the decoded arrays
every task reads, and the train/validation/test splits.

Only `prepare` imports tensorflow_datasets (inside its functions); the rest is
NumPy, so the launcher can check that the data is there before TensorFlow loads.
It imports neither `tf_task` nor `tf_model`.
"""
