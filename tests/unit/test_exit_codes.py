"""The exit table: each kind of failure maps to its code, and errors name the peer to look at."""

import signal

import pytest

from estimator_mnist import errors
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.plan.peers import cause_of, named_in, peers_of
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import spec_environment
from estimator_mnist.supervise.task_parent import TaskParent

CONFIG = config_from_dict({"cluster": {"chief": ["192.0.2.1:2222"], "worker": ["192.0.2.2:2222"]}}, "t.yaml")
PLAN = plan_task(CONFIG, TaskId("chief", 0))


def test_the_codes_a_cluster_manager_acts_on():
    assert (errors.SUCCESS_EXIT_CODE, errors.FAILURE_EXIT_CODE, errors.USAGE_EXIT_CODE) == (0, 1, 2)
    # Kubernetes' ExitCode policy retries 128 and above; 130, 137 and 143 are signals' codes.
    assert errors.RETRYABLE_EXIT_CODE >= 128 and errors.RETRYABLE_EXIT_CODE not in (130, 137, 143)
    assert errors.INTERRUPTED_EXIT_CODE == 130


@pytest.mark.parametrize("returncode, stop_signal, expected", [
    (0, None, 0),
    (1, None, 1),
    (2, None, 2),
    (200, None, 200),
    (-signal.SIGKILL, None, 200),   # the OOM killer, a crash: restartable, never a SIGKILL seen from outside
    (-signal.SIGSEGV, None, 200),
    (-signal.SIGKILL, signal.SIGTERM, 200),  # told to stop by the cluster, killed after the grace period
    (-signal.SIGKILL, signal.SIGINT, 130),   # Ctrl-C, killed after the grace period: Ctrl-C stays Ctrl-C
    # The child decides its own code after a signal: the parent passes it through (changed on purpose:
    # (0, SIGINT) was 130, which reported a run whose work was saved as interrupted).
    (0, signal.SIGINT, 0),     # Ctrl-C after the final checkpoint: nothing was lost
    (0, signal.SIGTERM, 0),    # SIGTERM after the final checkpoint
    (1, signal.SIGTERM, 1),    # a permanent failure stays permanent
    (2, signal.SIGTERM, 2),    # bad input found while stopping is still bad input
    (200, signal.SIGTERM, 200),  # the child stopped with work left: retryable
    (130, signal.SIGINT, 130),   # the child was interrupted with work left
])
def test_the_parent_maps_the_child_s_fate(returncode, stop_signal, expected):
    parent = TaskParent(PLAN, session_timeout_secs=10)
    parent.stop_signal = stop_signal
    assert parent.exit_code(returncode) == expected


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_child_killed_after_its_grace_whose_work_was_saved_reports_0(stop_signal):
    """The parent killed it (MultiWorkerMirrored ignores SIGTERM, a teardown hung) after its final checkpoint
    (for the evaluator, its final evaluation): nothing is lost, so 0, not 200 or 130."""
    parent = TaskParent(PLAN, session_timeout_secs=10, saved=lambda: "the final checkpoint (step 10) is saved")
    parent.stop_signal = stop_signal
    assert parent.exit_code(-signal.SIGKILL) == 0


def test_a_child_that_died_of_a_signal_unasked_is_200_even_after_its_work_was_saved():
    """No stop was asked for: a crash, whatever is on disk, is for the restart to judge."""
    parent = TaskParent(PLAN, session_timeout_secs=10, saved=lambda: "the final checkpoint (step 10) is saved")
    assert parent.exit_code(-signal.SIGKILL) == 200


def test_a_tensorflow_error_names_its_peer_and_its_cause():
    peers = peers_of(PLAN.tf_config, "chief:0")
    assert peers == [("worker:0", "192.0.2.2:2222")]
    message = ("Graph execution error:\n\nDetected at node 'allreduce' defined at (most recent call last):\n"
               "  File \"train.py\", line 1\nCollective has timed out during execution.\n"
               "Error reported from /job:worker/replica:0/task:0\n\t [[{{node allreduce}}]]")
    assert named_in(message, peers) == ["worker:0 (192.0.2.2:2222)"]
    assert cause_of(message) == "Collective has timed out during execution."
    assert cause_of("Socket closed") == "Socket closed" and cause_of("") == ""


def test_usage_retryable_and_permanent_failures_are_one_line():
    for kind in (errors.UsageError, errors.RetryableFailure, errors.PermanentFailure):
        assert str(kind("a\n  b")) == "a b"


def test_the_child_never_inherits_a_tf_config():
    """The TensorFlow process sets its TF_CONFIG from its spec alone (tf_task/__main__.py)."""
    given = '{"cluster": {"worker": ["w0:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator"}}'
    assert spec_environment({"TF_CONFIG": given, "CUDA_VISIBLE_DEVICES": "1"}) == {"CUDA_VISIBLE_DEVICES": "1"}


@pytest.mark.parametrize("stop_signal, expected", [(signal.SIGTERM, 200), (signal.SIGINT, 130)])
def test_a_parent_stopped_before_its_child_started_exits_with_the_stop_s_code(stop_signal, expected):
    parent = TaskParent(PLAN, session_timeout_secs=10, start_gate=lambda: False)
    parent.stop_signal = stop_signal
    read, write = __import__("os").pipe()
    assert parent.run(["false"], write, read) == expected
