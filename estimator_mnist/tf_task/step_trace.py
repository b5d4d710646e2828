"""`training.trace_step`: one local step of a trainer, every op with its start and duration, as a Chrome trace.

Where a step's time goes is not in any kernel table: oneDNN's verbose lines
(benchmarks/onednn_kernels.py) give the kernels, not the waits between them.
TensorFlow records both when a `session.run` asks for a full trace, so the
trainer asks for one on its local step N and writes it to
<run_dir>/traces/<task>-step-<N>.json, which chrome://tracing and
ui.perfetto.dev open and benchmarks/step_timeline.py reads. Only that step
pays the tracing (a few milliseconds); N counts this trainer's own steps, so
every trainer traces the same synchronous step.

The events are TensorFlow's step stats as they are: TensorFlow's own
converter (`tensorflow.python.client.timeline`) spreads the ops over invented
lanes and drops each op's label, which for a transfer of the
all-reduce (RecvBuf) is the only place its size is given ("[3.1MB] ...").
"""

from __future__ import annotations

import re

import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.config import TaskId
from estimator_mnist.tasklog import log

TRACES_DIR = "traces"


def trace_path(directory: str, task: TaskId, step: int) -> str:
    return storage.join(directory, TRACES_DIR, f"{task.type}-{task.index}-step-{step}.json")


# "classic_cnn/conv2d/Relu = _MklNativeFusedConv2D(...)", after an optional "[mklcpu 6.1MB 6.1MB] ".
_OP_TYPE = re.compile(r"= ([\w>]+)\(")


def chrome_trace(step_stats) -> dict:
    """Chrome trace events of a StepStats: one process per device, the thread id TensorFlow records (0 for every
    op of a cluster's graph in TF 2.15), and each op's type (as its name), node name and label (as arguments)."""
    events = []
    for pid, device in enumerate(step_stats.dev_stats):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": device.device}})
        for node in device.node_stats:
            op_type = _OP_TYPE.search(node.timeline_label)
            events.append({"ph": "X", "cat": "Op", "pid": pid, "tid": node.thread_id,
                           "name": op_type.group(1) if op_type else node.node_name,
                           "ts": node.all_start_micros, "dur": node.all_end_rel_micros,
                           "args": {"name": node.node_name, "label": node.timeline_label}})
    return {"traceEvents": events}


class StepTraceHook(tf.compat.v1.train.SessionRunHook):
    """Asks TensorFlow for a full trace of local step `step` and writes it to `path` (Chrome's trace format)."""

    def __init__(self, step: int, path: str):
        self._step, self._path = step, path
        self._local_step = 0  # steps begun by this trainer

    def before_run(self, run_context):
        self._local_step += 1
        if self._local_step != self._step:
            return None
        return tf.compat.v1.train.SessionRunArgs(
            fetches=None, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE))

    def after_run(self, run_context, run_values):
        if self._local_step != self._step or run_values.run_metadata is None:
            return
        # Whole or not at all (a reader never sees half a trace), on a disk or a bucket alike.
        storage.write_json(self._path, chrome_trace(run_values.run_metadata.step_stats))
        log(f"traced local step {self._step}: {self._path} (open it in chrome://tracing or ui.perfetto.dev, or "
            f"summarise it with benchmarks/step_timeline.py)")
