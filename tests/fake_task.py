"""A stand-in for `estimator-mnist train`, to test the launcher's supervision without TensorFlow.

usage: fake_task.py BEHAVIOUR MODEL_DIR MAX_STEPS [PORT]

Behaviours ending in _once act up on their first start only (a marker file in
MODEL_DIR remembers it) and then behave like the role's *_ok behaviour.
"""

import json
import os
import signal
import sys
import time

behaviour, model_dir, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
port = int(sys.argv[4]) if len(sys.argv) > 4 else None
os.makedirs(model_dir, exist_ok=True)
print(f"fake task {behaviour} pid={os.getpid()}", flush=True)


def first_time(name):
    marker = os.path.join(model_dir, f".fake-{name}")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


ONCE = {"chief_fails_once": ("fail_soon", "chief_ok"), "chief_stalls_once": ("silent_forever", "chief_ok"),
        "evaluator_fails_once": ("exit_now", "evaluator_ok")}
if behaviour in ONCE:
    behaviour = ONCE[behaviour][0] if first_time(behaviour) else ONCE[behaviour][1]


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
elif behaviour == "exit_now":
    sys.exit(3)
elif behaviour == "chief_listens":
    import socket

    # Like a TF server: listen on every interface, then check loopback works from inside.
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen()
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    open(os.path.join(model_dir, "listening"), "w").close()
    while not os.path.exists(os.path.join(model_dir, "release")):
        print("INFO loss = 1.0, step = 0 (0.1 sec)", flush=True)  # progress, so no stall
        time.sleep(0.2)
    train(max_steps)
    write_checkpoint(max_steps)
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
