"""`launch`: a local cluster started and seen through. group (each task's spec and process), monitor (progress from
the tasks' records), supervisor (the loop), restarts (what a failure costs), report (console lines and
run_summary.json), launcher (the command). The processes themselves: ../process_group.py. No TensorFlow."""

from estimator_mnist.supervise.launch.launcher import Launcher, launch

__all__ = ["Launcher", "launch"]
