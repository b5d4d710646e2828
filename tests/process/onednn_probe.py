"""Prints whether TensorFlow computes with oneDNN in a process that applied a worker's plan first, as `train` does.

  python tests/process/onednn_probe.py   ->   RESULT True|False
"""

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.plan.task_plan import apply_to_this_process, plan_task

CONFIG = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]}}, "onednn_probe.yaml")

if __name__ == "__main__":
    apply_to_this_process(plan_task(CONFIG, TaskId("worker", 0), x86=True))
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=import-outside-toplevel

    print("RESULT", _pywrap_util_port.IsMklEnabled())
