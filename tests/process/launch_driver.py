"""Run as a script by test_supervision.py: a launcher whose tasks ignore SIGTERM, to be stopped with Ctrl-C.

usage: python launch_driver.py RUN_DIR [BEHAVIOUR]   (the fake tasks' behaviour, default hang_ignoring_sigterm)
"""

import sys
from pathlib import Path

from estimator_mnist.config import config_from_dict
from estimator_mnist.supervise.launch import Launcher

FAKE = str(Path(__file__).parent / "fake_task.py")


def main(run_dir: str, behaviour: str = "hang_ignoring_sigterm") -> int:
    # preemption_grace_secs: after a SIGTERM the tasks get this long (plus the backstop) before a SIGKILL; these
    # hang, so it is waited out (30 s at the default 25).
    config = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
                               "training": {"max_steps": 100, "save_checkpoints_steps": 50,
                                            "preemption_grace_secs": 2},
                               "launcher": {"grace_secs": 1}, "run_dir": run_dir}, "c.yaml")

    def command(task):
        return [sys.executable, FAKE, behaviour, run_dir, config.model_dir, str(task), "100"]

    return Launcher(config, "c.yaml", command_for=command).run()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
