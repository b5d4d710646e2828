"""`train` as a task of an srun step, with a SIGTERM that lands inside its first `import yaml` (found in a Slurm e2e
run: the stop's own config load then met a half-imported yaml and exited 1). Run by test_slurm_task_start.py."""

import importlib.abc
import os
import signal
import sys

from estimator_mnist.supervise import slurm_task_end


class SignalInsideYaml(importlib.abc.MetaPathFinder):
    """SIGTERM to this process as yaml/__init__ imports yaml.cyaml, if train's stop handler is installed then."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "yaml.cyaml" and signal.getsignal(signal.SIGTERM) is slurm_task_end._raise_stop:  # pylint: disable=protected-access
            os.kill(os.getpid(), signal.SIGTERM)
        return None


if __name__ == "__main__":
    assert "yaml" not in sys.modules
    sys.meta_path.insert(0, SignalInsideYaml())
    from estimator_mnist.cli import main

    sys.exit(main(sys.argv[1:]))
