"""A stand-in for `estimator-mnist train`, to test the launcher's supervision without TensorFlow.

usage: python -m tests.process.fake_task BEHAVIOUR RUN_DIR MODEL_DIR TASK MAX_STEPS [PORT]

It writes the same progress records as a real trainer (estimator_mnist.model_files.progress)
and, for the chief, checkpoint index files. Behaviours ending in _once act up on
their first start only (a marker file in MODEL_DIR remembers it) and then behave
like the role's *_ok behaviour.
"""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from estimator_mnist.config import TaskId
from estimator_mnist.plan.task_plan import apply_to_this_process
from estimator_mnist.plan.task_spec import read_spec
from estimator_mnist.model_files.preemption_mark import write_mark
from estimator_mnist.model_files.progress import ProgressWriter, progress_path
from estimator_mnist.supervise.process_group import spec_file

ONCE = {"chief_fails_once": ("fail_soon", "chief_ok"), "chief_stalls_once": ("silent_forever", "chief_ok"),
        "evaluator_fails_once": ("exit_now", "evaluator_ok"), "worker_stops_once": ("stop_itself", "worker_ok")}


class Fake:
    def __init__(self, argv):
        self.behaviour, self.run_dir, self.model_dir, self.task = argv[:4]
        self.max_steps = int(argv[4])
        self.port = int(argv[5]) if len(argv) > 5 else 0
        os.makedirs(self.model_dir, exist_ok=True)
        role, index = self.task.split(":")
        self.task_id = TaskId(role, int(index))
        self.writer = ProgressWriter(progress_path(self.run_dir, self.task_id), self.task,
                                     examples_per_step=64)

    def first_time(self, name) -> bool:
        marker = os.path.join(self.model_dir, f".fake-{name}")
        if os.path.exists(marker):
            return False
        open(marker, "w").close()
        return True

    def train(self, steps, delay=0.05):
        for step in range(1, steps + 1):
            self.writer.step(step, 1.0 / step)
            time.sleep(delay / 10)
        self.writer.finish(steps)

    def write_checkpoint(self, step):
        for suffix in (".index", ".data-00000-of-00001"):
            open(os.path.join(self.model_dir, f"model.ckpt-{step}{suffix}"), "w").close()
        with open(os.path.join(self.model_dir, "checkpoint"), "w") as handle:
            handle.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')

    def evaluate(self, final_only_when_ok: bool):
        path = os.path.join(self.model_dir, "checkpoint")
        while True:
            text = open(path).read() if os.path.exists(path) else ""
            if f"ckpt-{self.max_steps}" in text and final_only_when_ok:
                record = {"global_step": self.max_steps, "accuracy": 0.97, "loss": 0.1, "checkpoint": "x",
                          "export": os.path.join(self.model_dir, "export", "1"), "final": True, "time": time.time()}
                with open(os.path.join(self.model_dir, "eval_results.jsonl"), "a") as handle:
                    handle.write(json.dumps(record) + "\n")
                return
            time.sleep(0.2)

    def listen_until_released(self):
        # Like a TF server: listen on every interface, then check loopback works from inside.
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", self.port))
        server.listen()
        socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
        open(os.path.join(self.model_dir, "listening"), "w").close()
        while not os.path.exists(os.path.join(self.model_dir, "release")):
            self.writer.step(0, 1.0)  # progress, so no stall
            time.sleep(0.2)


def preempted_times(fake, times):
    """Preempted at each of its first `times` starts, each after progress: the stop step saved and marked, as
    tf_task/preemption.py does, then 200; after that, the chief's own run."""
    done = len([n for n in os.listdir(fake.model_dir) if n.startswith(".fake-preempted-")])
    if done >= times:
        fake.train(fake.max_steps)
        fake.write_checkpoint(fake.max_steps)
        return
    open(os.path.join(fake.model_dir, f".fake-preempted-{done}"), "w").close()
    step = (done + 1) * 10
    fake.train(step)
    fake.write_checkpoint(step)
    write_mark(fake.model_dir, step, fake.task)
    sys.exit(200)


def ignore_sigterm():
    # Like MultiWorkerMirrored workers: SIGTERM does not stop them.
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))


def hang(fake):
    ignore_sigterm()
    fake.train(20)
    while True:
        time.sleep(1)


def silent(_fake):
    ignore_sigterm()
    while True:
        time.sleep(1)


def apply_plan_as_train_does(run_dir: str, task: TaskId) -> None:
    """`train` applies its spec's plan to itself before anything else; its stand-in does the same, with the
    spec `launch` wrote for it (the newest of that name, supervise/process_group.spec_file, under RUN_DIR)."""
    specs = sorted(Path(run_dir).rglob(spec_file(Path(), task).name), key=lambda p: p.stat().st_mtime)
    if specs:
        apply_to_this_process(read_spec(str(specs[-1])).plan)


def main(argv) -> int:
    fake = Fake(argv)
    apply_plan_as_train_does(fake.run_dir, fake.task_id)
    behaviour = fake.behaviour
    if behaviour in ONCE:
        behaviour = ONCE[behaviour][0] if fake.first_time(behaviour) else ONCE[behaviour][1]
    env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "TF_CONFIG")}
    umask = os.umask(0)
    os.umask(umask)
    print(f"fake task {behaviour} pid={os.getpid()} umask={umask:03o} env={json.dumps(env)}", flush=True)
    actions = {
        "chief_ok": lambda f: (f.train(f.max_steps), f.write_checkpoint(f.max_steps)),
        "worker_ok": lambda f: f.train(f.max_steps),
        "hang_ignoring_sigterm": hang,
        "save_then_hang": lambda f: (f.train(f.max_steps), f.write_checkpoint(f.max_steps), hang(f)),
        "silent_forever": silent,
        "fail_soon": lambda f: (f.train(20, delay=0.1), sys.exit(200)),
        "fail_permanently": lambda f: (f.train(20, delay=0.1), sys.exit(1)),
        "exit_now": lambda f: sys.exit(200),
        "chief_slow": lambda f: (f.train(f.max_steps, delay=1.0), f.write_checkpoint(f.max_steps)),
        # SIGSTOPped as by a user or a debugger: alive, its port open, taking no steps.
        "stop_itself": lambda f: (f.train(10), os.kill(os.getpid(), signal.SIGSTOP)),
        "chief_listens": lambda f: (f.listen_until_released(), f.train(f.max_steps), f.write_checkpoint(f.max_steps)),
        "chief_preempted_4_times": lambda f: preempted_times(f, 4),
        "evaluator_ok": lambda f: (ignore_sigterm(), f.evaluate(True)),
        "evaluator_never_final": lambda f: (ignore_sigterm(), f.evaluate(False)),
    }
    if behaviour not in actions:
        return f"unknown behaviour {behaviour}"
    actions[behaviour](fake)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
