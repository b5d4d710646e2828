"""A stand-in for a sweep trial (`estimator-mnist train` of one process), with scripted accuracies.

usage: python -m tests.process.fake_trial TRIAL_DIR ACCURACIES STEP_SECS EXIT_CODE [ignore_sigterm]

ACCURACIES is a comma list: the validation accuracy of the evaluation at
steps 10, 20, ... (the last one at max_steps is the final one). The test
accuracy written beside it runs the other way (1.5 - it), so that any choice
made on the test set would show. It writes the records a real trial writes:
<trial>/progress/chief-0.json and <trial>/model/eval_results.jsonl, then
exits with EXIT_CODE. With ignore_sigterm only SIGKILL stops it.
"""

import json
import os
import signal
import sys
import time

from estimator_mnist.config import TaskId
from estimator_mnist.model_files.progress import ProgressWriter, progress_path

STEPS_PER_EVALUATION = 10


def main(trial_dir: str, accuracies: str, step_secs: str, exit_code: str, *flags) -> int:
    if "ignore_sigterm" in flags:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    model_dir = os.path.join(trial_dir, "model")
    os.makedirs(model_dir, exist_ok=True)
    writer = ProgressWriter(progress_path(trial_dir, TaskId("chief", 0)), "chief:0", 64)
    step = 0
    for accuracy in [float(a) for a in accuracies.split(",")]:
        for _ in range(STEPS_PER_EVALUATION):
            time.sleep(float(step_secs) / STEPS_PER_EVALUATION)
            step += 1
            writer.step(step, 0.1)
        with open(os.path.join(model_dir, "eval_results.jsonl"), "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"global_step": step, "accuracy": round(1.5 - accuracy, 4), "loss": accuracy - 0.5,
                                     "validation_accuracy": accuracy, "validation_loss": 1 - accuracy,
                                     "export": None, "final": False, "time": time.time()}) + "\n")
    writer.finish(step)
    return int(exit_code)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
