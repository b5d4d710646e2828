"""TensorFlow 2.15's own gs:// file system against the tests' GCS API server (tests/gcs_server.py), in a process of
its own (its environment is read when TF first touches gs://): `python -m tests.process.gcs_tf_probe BUCKET
MISSING_BUCKET` prints one line, RESULT {step: outcome}, for test_gcs_server.py to judge. The faults are armed by
the test before this starts, each on objects of its own name (faults/...)."""

from __future__ import annotations

import json
import sys
import time

import tensorflow as tf

BIG = 3 * (1 << 20) + 17  # past one 256 KiB block and TF's 1 MiB read-ahead: several ranged reads


def outcome(step) -> dict:
    """{"ok": value} or {"error": TF's error class name, "message": its first 300 characters}, and seconds."""
    started = time.monotonic()
    try:
        result = {"ok": step()}
    except tf.errors.OpError as error:
        result = {"error": type(error).__name__, "message": error.message[:300]}
    result["secs"] = round(time.monotonic() - started, 3)
    return result


def read(path: str):
    with tf.io.gfile.GFile(path, "rb") as file:
        return file.read().decode("latin-1")


def write(path: str, data: bytes) -> None:
    with tf.io.gfile.GFile(path, "wb") as file:
        file.write(data)


def gfile_steps(root: str) -> dict:
    big = bytes(range(256)) * (BIG // 256) + b"x" * (BIG % 256)
    return {
        "makedirs": outcome(lambda: tf.io.gfile.makedirs(f"{root}/dir/sub")),
        "write": outcome(lambda: write(f"{root}/dir/a.txt", b"hello gcs")),
        "write_empty": outcome(lambda: write(f"{root}/dir/empty", b"")),
        "stat_empty": outcome(lambda: tf.io.gfile.stat(f"{root}/dir/empty").length),
        "read": outcome(lambda: read(f"{root}/dir/a.txt")),
        "write_big": outcome(lambda: write(f"{root}/dir/big.bin", big)),
        "read_big_equal": outcome(lambda: tf.io.gfile.GFile(f"{root}/dir/big.bin", "rb").read() == big),
        "listdir": outcome(lambda: sorted(tf.io.gfile.listdir(f"{root}/dir"))),
        "rename": outcome(lambda: tf.io.gfile.rename(f"{root}/dir/a.txt", f"{root}/dir/b.txt")),
        "exists_old": outcome(lambda: tf.io.gfile.exists(f"{root}/dir/a.txt")),
        "read_new": outcome(lambda: read(f"{root}/dir/b.txt")),
        "glob": outcome(lambda: sorted(tf.io.gfile.glob(f"{root}/dir/*.txt"))),
        "remove": outcome(lambda: tf.io.gfile.remove(f"{root}/dir/b.txt")),
        "exists_removed": outcome(lambda: tf.io.gfile.exists(f"{root}/dir/b.txt")),
    }


def checkpoint_steps(root: str) -> dict:
    variable = tf.Variable(tf.range(1000, dtype=tf.float32))
    checkpoint = tf.train.Checkpoint(v=variable)
    saved = outcome(lambda: checkpoint.save(f"{root}/ckpt/model"))

    def restore():
        variable.assign(tf.zeros([1000]))
        checkpoint.restore(tf.train.latest_checkpoint(f"{root}/ckpt")).assert_consumed()
        return float(tf.reduce_sum(variable))

    return {"checkpoint_save": saved, "checkpoint_restore": outcome(restore)}


def fault_steps(root: str, missing_bucket: str) -> dict:
    return {
        "read_after_503s": outcome(lambda: read(f"{root}/faults/flaky-503")),
        "read_after_429s": outcome(lambda: read(f"{root}/faults/throttled-429")),
        "read_denied": outcome(lambda: read(f"{root}/faults/denied-read")),
        "write_denied": outcome(lambda: write(f"{root}/faults/denied-write", b"x")),
        "read_after_stall": outcome(lambda: read(f"{root}/faults/stalled")),
        "read_while_down": outcome(lambda: read(f"{root}/faults/down")),
        "missing_bucket_exists": outcome(lambda: tf.io.gfile.exists(f"gs://{missing_bucket}/model")),
        "missing_bucket_write": outcome(lambda: write(f"gs://{missing_bucket}/model/x", b"x")),
    }


def main() -> int:
    bucket, missing_bucket = sys.argv[1], sys.argv[2]
    root = f"gs://{bucket}"
    results = {**gfile_steps(root), **checkpoint_steps(root), **fault_steps(root, missing_bucket)}
    print("RESULT " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
