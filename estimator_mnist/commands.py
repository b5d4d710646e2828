"""What each `estimator-mnist` subcommand does, after cli.py has parsed its flags.

TensorFlow is imported only by the commands that run it (train,
prepare-data), and only after the input is validated and the task's plan is
applied, so bad input is rejected in well under a second.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys

from .errors import FAILURE_EXIT_CODE, PermanentFailure, UsageError

ERR_TRAIN_INPUT = ("train needs --cluster FILE (with --task TYPE:INDEX unless the file names a single trainer), or a "
                   "TF_CONFIG environment variable (as Kubeflow's TFJob sets it)")
PREPARE_LOG = "prepare-data.log"  # in data_dir: TensorFlow's and TFDS's output while preparing


def load(args):
    """The frozen config of --cluster with the --set overrides and the path flags."""
    from .config import load_config

    return load_config(args.cluster, getattr(args, "overrides", None) or (), **path_flags(args))


def path_flags(args) -> dict:
    return {key: getattr(args, key, None) for key in ("model_dir", "data_dir", "run_dir")}


def cmd_validate(args) -> int:
    config = load(args)
    tasks = ", ".join(str(t) for t in config.cluster.tasks())
    print(f"{args.cluster}: ok ({config.strategy}; tasks {tasks}; max_steps {config.training.max_steps})")
    return 0


def cmd_tf_config(args) -> int:
    from .topology import build_tf_config, parse_task

    config = load(args)
    print(json.dumps(build_tf_config(config.cluster, parse_task(args.task, config.cluster, args.cluster))))
    return 0


def _config_and_task(args):
    """(config, task, tf_config or None, operator, notes, own_cpus): from --cluster and --task, from the TF_CONFIG
    environment variable (the YAML supplies everything but the cluster), from Slurm's step environment under
    srun (slurm/environment.py), or a single-process job with none of them. `operator`: a cluster manager
    gave the task its GPUs (count, do not mask); `own_cpus`: the CPUs it gave the task alone, or None."""
    from .config import apply_overrides, config_from_dict, read_yaml
    from .topology import parse_task
    from .slurm.environment import from_slurm, in_slurm_step
    from .tf_config_env import from_tf_config, single_process

    if args.task is not None:
        if args.cluster is None:
            raise UsageError("train --task needs --cluster FILE, the YAML that defines the task")
        config = load(args)
        return config, parse_task(args.task, config.cluster, args.cluster), None, False, (), None
    data = apply_overrides(read_yaml(args.cluster) if args.cluster else {}, args.overrides or ())
    data.update({k: v for k, v in path_flags(args).items() if v is not None})
    label = args.cluster or "TF_CONFIG"
    env, own_cpus = os.environ.get("TF_CONFIG"), None
    if env:
        data, task, tf_config, operator, note = from_tf_config(data, env)
    elif args.cluster is None:
        raise UsageError(ERR_TRAIN_INPUT)
    elif in_slurm_step(os.environ):
        data, task, note, step = from_slurm(data, args.cluster, os.environ)
        tf_config, operator, own_cpus = None, step.gpus_by_slurm, step.cpus_per_task
    else:
        (data, task, note), tf_config, operator = single_process(data, args.cluster), None, False
    return config_from_dict(data, label), task, tf_config, operator, (note,) if note else (), own_cpus


def cmd_train(args) -> int:
    """The parent (task_process.py) without --ready-fd; the child that runs TensorFlow with it."""
    from .cpu import usable_cpus
    from .hosts import all_on_loopback
    from .task_plan import apply_to_this_process, plan_task

    config, task, tf_config, operator, notes, own_cpus = _config_and_task(args)
    for note in notes if args.ready_fd is None else ():  # the parent says it; its child reads the same input
        print(f"estimator-mnist: {note}", file=sys.stderr, flush=True)
    # The child plans from the CPUs its parent saw, not from the share the parent pinned itself (and it) to.
    cpu_set = tuple(int(c) for c in args.usable_cpus.split(",")) if args.usable_cpus else usable_cpus()
    plan = plan_task(config, task, tf_config, cpu_set=cpu_set, gpus_from_pod=operator, own_cpus=own_cpus)
    given_tf_config = os.environ.get("TF_CONFIG")  # the child reads the same input as this process did
    priority = apply_to_this_process(plan)  # before TensorFlow is imported: env, umask, CPU priority
    if args.ready_fd is not None:
        return _run_child(config, plan, priority, args.ready_fd)
    if not _start_allowed(args, config, task, tf_config, operator):
        return FAILURE_EXIT_CODE
    if not all_on_loopback(config.cluster):
        cluster = config.cluster
        ports = ", ".join(str(cluster.address(t)) for t in cluster.server_tasks())
        print(f"estimator-mnist: warning: TensorFlow's servers accept anyone who reaches {ports}, with no "
              "authentication: allow these ports only from the cluster's own hosts (firewall or private network)",
              file=sys.stderr, flush=True)
    from .task_process import run_task_process

    return run_task_process(args, plan, config.training.session_creation_timeout_secs,
                            config.training.preemption_grace_secs, given_tf_config, cpu_set,
                            (config.run_dir, config.model_dir), config.launcher.stall_timeout_secs)


def _start_allowed(args, config, task, tf_config, operator) -> bool:
    """Under a cluster manager (no --task), counts the start against the job's restart budget; False past it."""
    from . import checkpoints
    from .restart_budget import check_start, job_of

    manager_view = {"environment": "cloud", "cluster": tf_config["cluster"]} if operator and tf_config else None
    job = None if args.task is not None else job_of(os.environ, manager_view)
    try:
        incident = check_start(task, config.cluster, job, config.restart.max_restarts, config.model_dir,
                               checkpoints.latest_step(config.model_dir))
    except PermanentFailure as exc:
        print(f"estimator-mnist: error: {exc}", file=sys.stderr, flush=True)
        return False
    if incident is not None:
        print(f"estimator-mnist: restart {incident['number']}/{config.restart.max_restarts} of job {job.key} "
              f"({incident['what']}); the record: {config.model_dir}/restart_budget.json",
              file=sys.stderr, flush=True)
    return True


def _run_child(config, plan, priority, ready_fd) -> int:
    """Runs TensorFlow; a failure ends the process at once (TensorFlow's threads could hold up a normal exit)."""
    from .errors import RETRYABLE_EXIT_CODE, RetryableFailure

    # Python's cyclic garbage collector would scan every object TensorFlow's import creates, over and over
    # while their number grows, and free almost none: over a third of the import's time (docs/performance.md,
    # "What makes it fast"). run_task turns it back on. Pinned by tests/unit/test_startup_gc.py.
    gc.disable()
    from .runner import run_task
    from .teardown import exit_now

    try:
        return run_task(config, plan, priority, ready_fd)
    except RetryableFailure as exc:
        exit_now(f"error: {exc}", RETRYABLE_EXIT_CODE)
    except PermanentFailure as exc:
        exit_now(f"error: {exc}", FAILURE_EXIT_CODE)
    return FAILURE_EXIT_CODE  # not reached: exit_now does not return


def cmd_launch(args) -> int:
    from .launch import launch

    config = load(args)
    return launch(config, cluster_file=os.path.abspath(args.cluster), quiet=args.quiet, overrides=args.overrides or ())


def cmd_prepare_data(args) -> int:
    from .config import default_data_dir
    from .tf_noise import to_log_file

    data_dir = args.data_dir
    if data_dir is None and args.cluster:
        data_dir = load(args).data_dir
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    log_path = os.path.join(data_dir, PREPARE_LOG)
    with contextlib.ExitStack() as quiet:
        try:
            console = quiet.enter_context(to_log_file(log_path))
        except OSError:
            console = sys.stderr  # no log file (data_dir not writable): prepare_data names the problem
        from .data_prep import prepare_data

        def log(message):
            print(f"prepare-data: {message}", file=console, flush=True)

        try:
            done = prepare_data(data_dir, from_idx=args.from_idx, source=args.source, log=log)
        except UsageError:
            raise  # bad input: its one line says it all
        except BaseException:
            quiet.close()
            print(f"prepare-data: TensorFlow's own output is in {log_path}", file=sys.stderr, flush=True)
            raise
    print(done)
    return 0


def cmd_predict(args) -> int:
    from .predict import run

    return run(args.model, args.files, args.invert, args.json, args.top_k, sys.stdout, sys.stderr)


def cmd_serve(args) -> int:
    from .serve.server import run

    return run(args)


def cmd_summary(args) -> int:
    from .run_summary import print_summary

    return print_summary(args.run_dir, args.json, sys.stdout)


def cmd_tfjob(args) -> int:
    from pathlib import Path

    from .tfjob import manifest

    config = load(args)
    text = Path(args.cluster).read_text(encoding="utf-8")
    if args.overrides:
        import yaml

        from .config import apply_overrides, read_yaml

        text = (f"# {args.cluster} with {' '.join('--set ' + o for o in args.overrides)}\n"
                + yaml.safe_dump(apply_overrides(read_yaml(args.cluster), args.overrides), sort_keys=False))
    name = args.name or Path(args.cluster).stem.lower().replace("_", "-")
    print(manifest(config, text, args.cluster, args.image, args.volume_claim, name, args.namespace), end="")
    return 0


def cmd_slurm(args) -> int:
    from .slurm.batch_script import SbatchOptions, render

    options = SbatchOptions(job_name=args.job_name, partition=args.partition, time=args.time, account=args.account,
                            nodes=args.nodes, cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task,
                            data_shared=args.data_shared, extra=tuple(args.sbatch_options))
    print(render(load(args), args.cluster, args.overrides or (), options), end="")
    return 0


def cmd_keys(args) -> int:
    from .config import configuration_markdown, describe_keys

    print(configuration_markdown() if args.markdown else describe_keys(), end="\n" if not args.markdown else "")
    return 0


def cmd_sweep(args) -> int:
    from .sweep.run import build_plan, run_sweep

    plan = build_plan(args.cluster, args.param, samples=args.samples, seed=args.seed, parallel=args.parallel,
                      cores_per_trial=args.cores_per_trial, devices_text=args.devices, early_stop=args.early_stop,
                      sweep_dir=args.sweep_dir)
    return run_sweep(plan)


def cmd_ensemble(args) -> int:
    from .ensemble_plan import plan_ensemble
    from .tf_noise import before_import

    plan = plan_ensemble(args.sweep_dir, args.top, args.devices)  # every refusal before TensorFlow loads
    before_import()  # TensorFlow's start-up notices say nothing about the ensemble (tf_noise.py)
    from .ensemble import build_and_export

    return build_and_export(plan, sys.stdout)
