"""The default run (config/local.yaml: a chief, a worker and an evaluator) with model_dir on a bucket against the
same run on the local disk: time to 99.2% after the first step, the step it is first evaluated at, and how long
the chief takes to save a checkpoint, median of --runs runs each, local and bucket alternating.

The bucket is the tests' real GCS API server (fake-gcs-server) behind their loopback HTTPS proxy
(tests/gcs_server.py): TensorFlow's own gs:// file system and the storage layer talk HTTPS to it as to GCS, on
this machine, so the figures count the requests' own cost (TLS, a connection per TensorFlow request, the
proxy) and no network's. A checkpoint's save is the time between Estimator's "before saving" and "after saving"
lines in the chief's log. The last line, RESULT time_to_992_local=... time_to_992_bucket=... step_992_local=...
step_992_bucket=... save_ms_local=... save_ms_bucket=... runs=..., goes to the results file too.

    python benchmarks/gcs_model_dir.py --runs 3
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from common import DEFAULT_CONFIG, Shape, benchmark_parser, run_launch, write_json
from results import figures_of, record_run
from tests.gcs_server import GcsServer  # noqa: E402  (common.py put the repository on the path)

from estimator_mnist.supervise.run_summary import collect

SAVE = re.compile(r"^(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ INFO Calling checkpoint listeners "
                  r"(?P<edge>before|after) saving checkpoint (?P<step>\d+)")


def save_times_ms(run_dir: Path) -> list:
    """Each checkpoint save of the chief, in ms, from its log."""
    started, times = {}, []
    for log in sorted(run_dir.glob("logs/*/chief-0.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = SAVE.match(line)
            if not match:
                continue
            when = datetime.strptime(match["when"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if match["edge"] == "before":
                started[match["step"]] = when
            elif match["step"] in started:
                times.append(1000 * (when - started.pop(match["step"])))
    return times


def one_run(workdir: Path, data_dir, model_dir, env) -> dict:
    overrides = [f"model_dir={model_dir}"] if model_dir else []
    run = run_launch(workdir, "bucket_" if model_dir else "local_", DEFAULT_CONFIG, overrides,
                     Shape(chief=1, workers=1, evaluator=True), data_dir, timeout=900, env=env).check("a run")
    facts = collect(str(run.run_dir))
    hit = facts["seconds_to_accuracy"]["0.992"]
    saves = save_times_ms(run.run_dir)
    return {"time_to_992": hit and round(hit["seconds"], 1), "step_992": hit and hit["step"],
            "save_ms": round(statistics.median(saves)) if saves else None, "saves": len(saves),
            "final_accuracy": facts["accuracy"], "seconds_to_exit": round(run.exited - run.launched, 1)}


def median(runs, key):
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if len(values) == len(runs) else None


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    parser.add_argument("--data-dir", default=None, help="a prepared MNIST (default: the config's)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gcs_model_dir_"))
    with GcsServer(workdir / "gcs") as gcs:
        local_env = dict(os.environ)
        os.environ.update(gcs.env())  # this process reads the bucket's records too (collect)
        bucket_env = dict(os.environ)
        bucket = gcs.create_bucket()
        runs = {"local": [], "bucket": []}
        for number in range(args.runs):
            runs["local"].append(one_run(workdir, args.data_dir, None, local_env))
            runs["bucket"].append(one_run(workdir, args.data_dir, f"gs://{bucket}/run-{number}", bucket_env))
            print(f"run {number + 1}: local {runs['local'][-1]}\n       bucket {runs['bucket'][-1]}", flush=True)
    if args.json:
        write_json(args.json, runs)
    line = ("RESULT " + " ".join(f"{key}_{kind}={median(runs[kind], key)}" for key in ("time_to_992", "step_992",
                                                                                       "save_ms")
                                 for kind in ("local", "bucket")) + f" runs={args.runs}")
    record_run(args, "gcs_model_dir", figures_of(line))
    print(line, flush=True)


if __name__ == "__main__":
    main()
