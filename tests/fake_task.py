"""A stand-in for `estimator-mnist train`, to test the launcher's supervision without TensorFlow.

usage: fake_task.py BEHAVIOUR MODEL_DIR MAX_STEPS
"""

import json
import os
import signal
import sys
import time

behaviour, model_dir, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(model_dir, exist_ok=True)
print(f"fake task {behaviour} pid={os.getpid()}", flush=True)


def ignore_sigterm():
    # Like MultiWorkerMirrored workers: SIGTERM does not stop them.
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))


def train(steps, delay=0.05):
    for step in range(0, steps + 1, 10):
        print(f"INFO loss = {1.0 / (step + 1):.4f}, step = {step} (0.1 sec)", flush=True)
        time.sleep(delay)


def write_checkpoint(step):
    for suffix in (".index", ".data-00000-of-00001"):
        open(os.path.join(model_dir, f"model.ckpt-{step}{suffix}"), "w").close()
    with open(os.path.join(model_dir, "checkpoint"), "w") as handle:
        handle.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')


if behaviour == "chief_ok":
    train(max_steps)
    write_checkpoint(max_steps)
elif behaviour == "worker_ok":
    train(max_steps)
elif behaviour == "hang_ignoring_sigterm":
    ignore_sigterm()
    train(20)
    while True:
        time.sleep(1)
elif behaviour == "fail_soon":
    train(20, delay=0.1)
    sys.exit(3)
elif behaviour == "silent_forever":
    ignore_sigterm()
    while True:
        time.sleep(1)
elif behaviour in ("evaluator_ok", "evaluator_never_final"):
    ignore_sigterm()
    path = os.path.join(model_dir, "checkpoint")
    while True:
        try:
            text = open(path).read()
        except OSError:
            text = ""
        if f"ckpt-{max_steps}" in text and behaviour == "evaluator_ok":
            record = {"global_step": max_steps, "accuracy": 0.97, "loss": 0.1, "checkpoint": "x",
                      "export": os.path.join(model_dir, "export", "1"), "final": True, "time": time.time()}
            with open(os.path.join(model_dir, "eval_results.jsonl"), "a") as handle:
                handle.write(json.dumps(record) + "\n")
            break
        time.sleep(0.2)
else:
    sys.exit(f"unknown behaviour {behaviour}")
