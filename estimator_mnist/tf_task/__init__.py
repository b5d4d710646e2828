"""Inside a TensorFlow training task: everything that runs in the process `train` starts for TensorFlow.

The runner, the roles (trainer, ps, evaluator), model_fn, input_fn, the
strategy, the hooks, preemption, teardown, weight averaging and the
TensorFlow work-arounds. Its entry point (`python -m estimator_mnist.tf_task`)
takes one TaskSpec and nothing else: no YAML, no argv flags, no TF_CONFIG of
the caller's. It may import `estimator_mnist.tf_model` (the network, the
export) and everything before TensorFlow; nothing outside it imports it
except `train`'s child start-up.
"""
