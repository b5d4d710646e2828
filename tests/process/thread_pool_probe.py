"""Run as a script by test_tf_subprocess.py: plan a task with the given intra-op threads, start TensorFlow
as `train` does (configure_devices, then the first log line's device listing, then a graph session from
the task's session config), run convolutions for a while, and print the cores the process kept busy,
as "RESULT <cores>".

It needs a process of its own: TensorFlow sizes one process-wide pool of intra-op threads when it
creates its first CPU device, and never again.
"""

import os
import sys
import time

from estimator_mnist.config import TaskId, config_from_dict


def main() -> int:
    intra = int(sys.argv[1])
    config = config_from_dict({"cluster": {"chief": ["localhost:1"]}, "strategy": "one_device",
                               "tasks": {"all": {"intra_op_threads": intra, "inter_op_threads": 1}}}, "t")
    from estimator_mnist.plan.task_plan import apply_to_this_process, plan_task

    plan = plan_task(config, TaskId("chief", 0))
    apply_to_this_process(plan)
    import tensorflow as tf  # after the plan, as in a task

    from estimator_mnist.tf_task.strategy import configure_devices, session_config

    configure_devices(plan)
    tf.config.list_logical_devices()  # runner.first_log_line lists them before any session exists
    with tf.Graph().as_default():
        images = tf.random.uniform([256, 28, 28, 32])
        kernel = tf.random.uniform([5, 5, 32, 64])
        total = tf.reduce_sum(tf.nn.conv2d(images, kernel, 1, "SAME"))
        with tf.compat.v1.Session(config=session_config(config, plan)) as session:
            session.run(total)  # warm-up: kernels chosen, buffers allocated
            cpu0, wall0 = time.process_time(), time.monotonic()
            while time.monotonic() - wall0 < 2.0:
                session.run(total)
            cores = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    print(f"RESULT {cores:.2f} cpus={len(os.sched_getaffinity(0))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
