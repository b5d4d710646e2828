"""Run as a script by test_sweep.py: a sweep of stand-in trials (fake_trial.py), to be stopped with Ctrl-C.

usage: python sweep_driver.py BASE_YAML SWEEP_DIR SCRIPT [SCRIPT ...]

Trial i runs `fake_trial.py <its dir> SCRIPT[i]`, where SCRIPT is
"ACCURACIES STEP_SECS EXIT_CODE [ignore_sigterm]"; the sweep sweeps
model.dropout over as many values as there are scripts, two at a time.
"""

import sys
from pathlib import Path

from estimator_mnist.sweep.run import build_plan, run_sweep

FAKE = str(Path(__file__).parent / "fake_trial.py")


def main(base: str, sweep_dir: str, *scripts: str) -> int:
    dropouts = ",".join(str(i / 10) for i in range(len(scripts)))
    plan = build_plan(base, [f"model.dropout={dropouts}"], parallel=2, sweep_dir=sweep_dir, early_stop="median",
                      allowed=[0, 1], gpus=[])

    def command(trial):
        return [sys.executable, FAKE, str(trial.directory), *scripts[int(trial.name.split("-")[-1])].split()]

    return run_sweep(plan, command_for=command, poll_secs=0.2, stop_grace_secs=2)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
