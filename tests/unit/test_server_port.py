"""A port taken between its choice and TensorFlow's bind (tf_task/runner.py): TF 2.15's UnknownError "Could not
start gRPC server" becomes one retryable line (200) naming the port."""

import socket

import tensorflow as tf

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import RetryableFailure
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.tf_task.runner import SERVER_NOT_STARTED, server_failure


def test_a_server_whose_port_is_taken_is_200_with_one_line_naming_the_port():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_from_dict({"cluster": {"chief": [f"localhost:{port}"], "worker": ["localhost:1"]}}, "c.yaml")
        plan = plan_task(config, TaskId("chief", 0), cores=2)
        try:
            tf.distribute.Server(tf.train.ClusterSpec(plan.tf_config["cluster"]), job_name="chief", task_index=0)
        except tf.errors.UnknownError as exc:
            assert SERVER_NOT_STARTED in exc.message
            failure = server_failure(plan, exc)
        else:
            raise AssertionError(f"TensorFlow's server started on port {port}, which another socket listens on")
    assert isinstance(failure, RetryableFailure) and "\n" not in str(failure)  # cli.py: exit 200
    assert str(failure).startswith(f"task chief:0: TensorFlow could not listen on port {port} (localhost:{port}: "
                                   "Could not start gRPC server, the port was taken by another process); exiting with "
                                   "200 (retryable)")
