"""Run as a script by test_tf_subprocess.py: build the MultiWorkerMirrored strategy of a YAML and print
the timeout and communication hint of the all-reduce ops it makes, as "RESULT <json>".

It needs a process of its own: the strategy reads TF_CONFIG when it is built and must run in graph mode,
as under Estimator.
"""

import json
import os
import sys

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.plan.task_plan import apply_to_this_process, plan_task
from estimator_mnist.plan.task_spec import TaskSpec
from estimator_mnist.tf_task.__main__ import set_tf_config


def main() -> int:
    config = config_from_dict({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                               "strategy": {"name": "multi_worker_mirrored", "communication": "ring",
                                            "collective_timeout_secs": 42}}, "t")
    plan = plan_task(config, TaskId("worker", 0))
    apply_to_this_process(plan)
    set_tf_config(TaskSpec(config, plan))  # as the task's TensorFlow process does
    assert "TF_CONFIG" in os.environ
    import tensorflow as tf  # after the plan, as in a task

    from estimator_mnist.tf_task.strategy import build_train_strategy

    tf.compat.v1.disable_eager_execution()
    strategy = build_train_strategy(config, plan)
    with tf.Graph().as_default() as graph, strategy.scope():
        strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))
    ops = [op for op in graph.get_operations() if op.type.startswith("CollectiveReduce")]
    print("RESULT", json.dumps([[op.get_attr("timeout_seconds"), op.get_attr("communication_hint").decode()]
                                for op in ops]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
