"""Starting a local cluster and supervising it: processes, group, monitor, supervisor, restarts, report,
and launcher (the `launch` command). No TensorFlow."""

from estimator_mnist.supervise.launch.launcher import Launcher, launch

__all__ = ["Launcher", "launch"]
