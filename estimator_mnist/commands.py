"""What each `estimator-mnist` subcommand does, after cli.py has parsed its flags.

TensorFlow is imported only by the commands that run it (prepare-data,
predict, ensemble, serve), and only after their input is checked; `train`
never imports it: it resolves its task's TaskSpec and hands it to its
TensorFlow process (supervise/task_parent.py). Bad input is rejected in well under a
second.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from estimator_mnist.errors import FAILURE_EXIT_CODE, UsageError

ERR_SPEC_ALONE = "train --spec FILE takes no other input flags (got {flags}): the spec holds the whole task"
NOTE_OFFLINE = ("{file}: not checked offline: that the bucket of model_dir {url} exists and that this machine has "
                "credentials for it (launch, train and slurm check both before any task starts)")
PREPARE_LOG = "prepare-data.log"  # in data_dir: TensorFlow's and TFDS's output while preparing


def load(args):
    """The frozen config of --cluster with the --set overrides and the path flags."""
    from estimator_mnist.config import load_config

    return load_config(args.cluster, getattr(args, "overrides", None) or (), **path_flags(args))


def path_flags(args) -> dict:
    return {key: getattr(args, key, None) for key in ("model_dir", "data_dir", "run_dir")}


def cmd_validate(args) -> int:
    config = load(args)
    tasks = ", ".join(str(t) for t in config.cluster.tasks())
    print(f"{args.cluster}: ok ({config.strategy}; tasks {tasks}; max_steps {config.training.max_steps})")
    from estimator_mnist.storage import is_bucket

    if is_bucket(config.model_dir):
        print(NOTE_OFFLINE.format(file=args.cluster, url=config.model_dir))
    return 0


def preflight(config) -> None:
    """Before any task starts or anything is written: a gs:// model_dir's bucket exists and this process's
    credentials reach it (storage.check_bucket: exit 2 for either, exit 1 when access is refused)."""
    from estimator_mnist.storage import check_bucket

    check_bucket(config.model_dir)


def cmd_tf_config(args) -> int:
    """The TF_CONFIG part of the task's TaskSpec: what its TensorFlow process sets, from the same resolution."""
    spec = resolve(args).spec()
    if spec.tf_config is None:
        print(f"estimator-mnist: {spec.plan.task} runs {spec.config.strategy.name} in one process, with no cluster: "
              "its TensorFlow process sets no TF_CONFIG", file=sys.stderr, flush=True)
        print("{}")
        return 0
    print(json.dumps(spec.tf_config))
    return 0


def resolve(args):
    """train's and tf-config's ResolvedTask: --cluster, --task, --set and the path flags, TF_CONFIG or Slurm."""
    from estimator_mnist.plan.task_source import resolve_task

    return resolve_task(args.cluster, getattr(args, "task", None), tuple(getattr(args, "overrides", None) or ()),
                        path_flags(args), os.environ)


def cmd_train(args) -> int:
    """Resolves the task's TaskSpec once (or reads the one `launch` wrote), then runs its TensorFlow process. Under
    srun a SIGTERM may come before train's parent takes its signals (while the task waits for its peers' ports):
    that is a stop asked for, said as the parent says it (slurm_task_end.py), never a failure of its own."""
    from estimator_mnist.plan.slurm_source import in_slurm_step
    from estimator_mnist.supervise.slurm_task_end import StopAsked, stop_raises, stopped_before_start

    try:
        with stop_raises(args.spec is None and in_slurm_step(os.environ)):
            spec = _train_spec(args)
    except StopAsked as stop:
        return stopped_before_start(load(args), os.environ, stop.signum)
    if isinstance(spec, int):
        return spec
    from estimator_mnist.supervise.task_parent import run_task_process

    return run_task_process(spec)


def _train_spec(args):
    """The task's TaskSpec, its plan applied to this process; or the exit code of a start refused."""
    from estimator_mnist.plan.hosts import all_on_loopback
    from estimator_mnist.plan.task_plan import apply_to_this_process

    if args.spec is not None:
        given = [flag for flag, value in (("--cluster", args.cluster), ("--task", args.task), ("--set", args.overrides),
                                          *((f"--{k.replace('_', '-')}", v) for k, v in path_flags(args).items()))
                 if value]
        if given:
            raise UsageError(ERR_SPEC_ALONE.format(flags=", ".join(given)))
        from estimator_mnist.plan.task_spec import read_spec

        spec, resolved = read_spec(args.spec), None
    else:
        resolved = resolve(args)
        spec = resolved.spec()
    for note in spec.notes:
        print(f"estimator-mnist: {note}", file=sys.stderr, flush=True)
    # The one place the plan is applied, before anything else: env, cores, umask, CPU priority; the task's
    # TensorFlow process inherits them.
    apply_to_this_process(spec.plan)
    preflight(spec.config)
    if resolved is not None:
        from estimator_mnist.supervise.manager_start import start_allowed

        if not start_allowed(resolved, os.environ):
            return FAILURE_EXIT_CODE
    config = spec.config
    if not all_on_loopback(config.cluster):
        cluster = config.cluster
        ports = ", ".join(str(cluster.address(t)) for t in cluster.server_tasks())
        print(f"estimator-mnist: warning: TensorFlow's servers accept anyone who reaches {ports}, with no "
              "authentication: allow these ports only from the cluster's own hosts (firewall or private network)",
              file=sys.stderr, flush=True)
    return spec


def cmd_launch(args) -> int:
    from estimator_mnist.supervise.launch import launch

    config = load(args)
    preflight(config)
    return launch(config, cluster_file=os.path.abspath(args.cluster), quiet=args.quiet)


def cmd_prepare_data(args) -> int:
    from estimator_mnist.config import default_data_dir
    from estimator_mnist.startup_noise import to_log_file

    data_dir = args.data_dir
    if data_dir is None and args.cluster:
        data_dir = load(args).data_dir
    if args.data_dir is not None:
        from estimator_mnist.config.load import refuse_url

        refuse_url(args.data_dir, "--data-dir", "data_dir")
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    log_path = os.path.join(data_dir, PREPARE_LOG)
    with contextlib.ExitStack() as quiet:
        try:
            console = quiet.enter_context(to_log_file(log_path))
        except OSError:
            console = sys.stderr  # no log file (data_dir not writable): prepare_data names the problem
        from estimator_mnist.mnist_data.prepare import prepare_data

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
    from estimator_mnist.tf_model.predict import run

    return run(args.model, args.files, args.invert, args.json, args.top_k, sys.stdout, sys.stderr)


def cmd_serve(args) -> int:
    from estimator_mnist.tf_model.serve.server import run

    return run(args)


def cmd_summary(args) -> int:
    from estimator_mnist.supervise.run_summary import print_summary

    return print_summary(args.run_dir, args.json, sys.stdout)


def cmd_tfjob(args) -> int:
    from pathlib import Path

    from estimator_mnist.kubeflow.pod_storage import PodStorage
    from estimator_mnist.kubeflow.tfjob import manifest

    config = load(args)
    text = Path(args.cluster).read_text(encoding="utf-8")
    if args.overrides:
        import yaml

        from estimator_mnist.config import apply_overrides, read_yaml

        text = (f"# {args.cluster} with {' '.join('--set ' + o for o in args.overrides)}\n"
                + yaml.safe_dump(apply_overrides(read_yaml(args.cluster), args.overrides), sort_keys=False))
    name = args.name or Path(args.cluster).stem.lower().replace("_", "-")
    # No preflight here: the pods reach the bucket with their own credentials (the flags), not this machine's,
    # and each checks it before its task starts.
    storage = PodStorage(claim=args.volume_claim, service_account=args.service_account,
                         gcp_service_account=args.gcp_service_account, credentials_secret=args.credentials_secret)
    print(manifest(config, text, args.cluster, args.image, storage, name, args.namespace), end="")
    return 0


def cmd_slurm(args) -> int:
    from estimator_mnist.slurm.batch_script import SbatchOptions, render

    options = SbatchOptions(job_name=args.job_name, partition=args.partition, time=args.time, account=args.account,
                            nodes=args.nodes, cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task,
                            data_shared=args.data_shared, extra=tuple(args.sbatch_options))
    config = load(args)
    text = render(config, args.cluster, args.overrides or (), options)  # every refusal of the flags first
    preflight(config)  # the login node's credentials are the job's own: a bucket missing is found before sbatch
    print(text, end="")
    return 0


def cmd_keys(args) -> int:
    from estimator_mnist.config import configuration_markdown, describe_keys

    print(configuration_markdown() if args.markdown else describe_keys(), end="\n" if not args.markdown else "")
    return 0


def cmd_timeouts(args) -> int:
    from estimator_mnist.config.timeouts_text import describe_timeouts, timeouts_markdown

    print(timeouts_markdown() if args.markdown else describe_timeouts(), end="\n" if not args.markdown else "")
    return 0


def cmd_sweep(args) -> int:
    from estimator_mnist.sweep.run import build_plan, run_sweep

    slurm = args.slurm or args.array_task
    if slurm and args.devices:
        from estimator_mnist.slurm.sweep_script import ERR_LOCAL_ONLY

        raise UsageError(ERR_LOCAL_ONLY.format(flag="--devices", instead="--cores-per-trial and --gpus-per-trial"))
    plan = build_plan(args.cluster, args.param, samples=args.samples, seed=args.seed, parallel=args.parallel,
                      cores_per_trial=args.cores_per_trial, devices_text=args.devices, early_stop=args.early_stop,
                      sweep_dir=args.sweep_dir, slurm=slurm)
    if args.array_task:
        from estimator_mnist.sweep.array_task import run_array_task

        return run_array_task(plan)
    if args.slurm:
        from estimator_mnist.slurm.sweep_script import DEFAULT_MEMORY, ArrayOptions
        from estimator_mnist.sweep.run import array_script

        options = ArrayOptions(parallel=args.parallel, cpus=args.cores_per_trial or 1, memory=args.mem_per_trial or DEFAULT_MEMORY,
                               gpus=args.gpus_per_trial or 0, job_name=args.job_name, partition=args.partition,
                               time=args.time, account=args.account, extra=tuple(args.sbatch_options))
        print(array_script(plan, _sweep_args(args, plan), options), end="")
        return 0
    given = [flag for flag in ("mem_per_trial", "gpus_per_trial", "job_name", "partition", "time", "account",
                               "sbatch_options") if getattr(args, flag)]
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')}: goes with --slurm (a sweep on this machine has no Slurm "
                         "job); add --slurm, or leave it out")
    return run_sweep(plan)


def _sweep_args(args, plan) -> list:
    """The flags that make the same sweep again, in each array task (absolute paths: it runs elsewhere)."""
    flags = ["--cluster", os.path.abspath(args.cluster), *(a for p in args.param for a in ("--param", p)),
             "--seed", str(args.seed), "--early-stop", args.early_stop, "--sweep-dir", str(plan.sweep_dir)]
    return flags + (["--samples", str(args.samples)] if args.samples is not None else [])


def cmd_sweep_status(args) -> int:
    from estimator_mnist.sweep.status import status_text

    print(status_text(args.sweep_dir))
    return 0


def cmd_ensemble(args) -> int:
    from estimator_mnist.tf_model.ensemble_plan import plan_ensemble
    from estimator_mnist.startup_noise import before_import

    plan = plan_ensemble(args.sweep_dir, args.top, args.devices)  # every refusal before TensorFlow loads
    before_import()  # TensorFlow's start-up notices say nothing about the ensemble (startup_noise.py)
    from estimator_mnist.tf_model.ensemble import build_and_export

    return build_and_export(plan, sys.stdout)
