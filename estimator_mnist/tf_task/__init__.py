"""Inside a TensorFlow training task: everything that runs in the process `train` starts for TensorFlow.

The runner, the roles (trainer, ps, evaluator), model_fn, input_fn, the
strategy, the hooks, preemption, teardown, weight averaging and the
TensorFlow work-arounds. Its entry point (`python -m estimator_mnist.tf_task`)
takes one TaskSpec and nothing else: no YAML, no argv flags, no TF_CONFIG of
the caller's. It may import `estimator_mnist.tf_model` (the network, the
export) and everything before TensorFlow. Outside it, only `train`'s parent
(supervise/task_parent.py) names it, by TF_PROCESS_MODULE; this file imports
nothing, so naming it loads no TensorFlow.
"""

TF_PROCESS_MODULE = __name__  # a task's TensorFlow process: python -m estimator_mnist.tf_task (__main__.py)
