"""Kubeflow's TFJob: the manifest `estimator-mnist tfjob` writes for a cluster file (tfjob.py). No TensorFlow."""
