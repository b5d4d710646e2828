"""A by-hand check of the whole gs:// path on this machine, with figures (not a test: the e2e tests run the product
itself): TensorFlow's Estimator trains 5 steps, evaluates, exports and resumes on a bucket of the GCS test server
(tests/gcs_server.py), then TF's own GCS retries are timed under 503s injected by the proxy, at TF's default
retry settings (1 s first delay, doubling to 32 s, plus up to 1 s of jitter, 10 retries: gcs_file_system.cc).

    .venv/bin/python benchmarks/gcs_estimator_check.py              # about a minute
    .venv/bin/python benchmarks/gcs_estimator_check.py --exhaust    # also a read that never succeeds: ~3.5 min more
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import REPO
from cpu_facts import cpu_kind, cpu_model
from tests.gcs_server import GcsServer  # noqa: E402  (common.py put the repository on the path)

PROBE = Path(__file__).resolve().parent / "gcs_estimator_probe.py"
PROBE_TIMEOUT_SECS = 600


def run_probe(gcs: GcsServer, *args: str) -> dict:
    env = {**os.environ, **gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(PROBE), *args], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=PROBE_TIMEOUT_SECS)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{PROBE.name} {' '.join(args)} failed ({result.returncode}): {result.stderr[-3000:]}")
    outcome = json.loads(lines[0][len("RESULT "):])
    outcome["process_secs"] = round(time.monotonic() - started, 2)
    return outcome


def retry_case(gcs: GcsServer, bucket: str, label: str, mode: str, name: str, **fault) -> None:
    if mode == "read":
        gcs.put_object(bucket, name, b"retried read")
    gcs.proxy.reset()
    armed = gcs.proxy.inject(503, name=name, **fault)
    outcome = run_probe(gcs, mode, f"gs://{bucket}/{name}")
    requests = [f"{r.method} {r.host}" for r in gcs.proxy.seen() if r.names(name)]
    print(f"{label}: {json.dumps(outcome)}; 503s answered {armed.hits}, requests {len(requests)}: {requests}")


def main() -> int:
    print(f"CPU: {cpu_model()} ({cpu_kind()})")
    with GcsServer() as gcs:
        bucket = gcs.create_bucket()
        outcome = run_probe(gcs, "estimator", f"gs://{bucket}/model")
        print(f"estimator on gs://: {json.dumps(outcome)}")
        local = Path(gcs.workdir) / "local-model"
        print(f"estimator on local disk: {json.dumps(run_probe(gcs, 'estimator', str(local)))}")
        retry_case(gcs, bucket, "read, 3 x 503 on its first GETs", "read", "r3", times=3, method="GET")
        retry_case(gcs, bucket, "write, 3 x 503 on starting the upload (POST)", "write", "w3p", times=3,
                   method="POST")
        retry_case(gcs, bucket, "write, 3 x 503 on the upload's data (PUT)", "write", "w3u", times=3, method="PUT")
        if "--exhaust" in sys.argv:
            retry_case(gcs, bucket, "read, 503 for ever", "read", "down", times=10_000, method="GET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
