"""Starting a local cluster and supervising it: processes, group, monitor, supervisor, restarts, report,
and launcher (the `launch` command). No TensorFlow."""

from .launcher import Launcher, launch

__all__ = ["Launcher", "launch"]
