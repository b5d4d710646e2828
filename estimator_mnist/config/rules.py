"""Cross-field rules: what one section allows depends on another (strategy and roles, devices, checkpoints).

Each rule refuses a combination that would fail or mislead later, with a
one-line `UsageError` naming the file, the key and the fix. No TensorFlow.
"""

from __future__ import annotations

import dataclasses

from estimator_mnist.errors import UsageError
from estimator_mnist.config.schema import IN_GRAPH_STRATEGIES, PS_STRATEGIES, STRATEGIES, ClusterConfig, StrategyConfig, TaskSettings
from estimator_mnist.config.values import ERR_MISSING_KEY, ERR_RANGE, as_mapping, coerce, device_index, parse_values

ERR_STRATEGY_ROLES = "{file}: strategy '{strategy}' {problem}; {fix}"
ERR_STRATEGY_KEY = "{file}: strategy.{key} applies to strategy {owners} only, not '{strategy}'; remove it or change strategy.name"
ERR_TASK_SELECTOR = "{file}: tasks.{selector} names no task of this cluster; use 'all', a role ({roles}) or a task ({tasks})"
ERR_NCCL_NO_GPU = "{file}: {key} is nccl but {who} has no GPU ({why}); use {fix}"
ERR_R2A = "{file}: strategy.replicas_to_aggregate is {got} but the cluster has only {replicas} training replicas (chief + workers); use at most {replicas}"


def parse_strategy(file, raw) -> StrategyConfig:
    """A name, or a mapping with `name` and keys that belong to that strategy."""
    if raw is None:
        return StrategyConfig()
    mapping = as_mapping(file, {"name": raw} if isinstance(raw, str) else raw, "strategy")
    if "name" not in mapping:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="strategy.name", hint=f"one of {', '.join(STRATEGIES)}"))
    fields = {f.name: f for f in dataclasses.fields(StrategyConfig)}
    name = coerce(file, "strategy.name", mapping["name"], fields["name"])
    parsed = parse_values(file, mapping, StrategyConfig, "strategy")
    for key in mapping:
        owners = fields[key].metadata.get("strategies")
        if owners and name not in owners:
            raise UsageError(ERR_STRATEGY_KEY.format(file=file, key=key, owners=" or ".join(owners), strategy=name))
    return StrategyConfig(**parsed)


def _roles_error(file, strategy, problem, fix):
    return UsageError(ERR_STRATEGY_ROLES.format(file=file, strategy=strategy, problem=problem, fix=fix))


def check_strategy_roles(file, strategy: StrategyConfig, cluster: ClusterConfig) -> None:
    """Each strategy's roles: the ones it needs are required and the others refused."""
    name = strategy.name
    if name == "multi_worker_mirrored" and cluster.ps:
        raise _roles_error(file, name, "does not use parameter servers but cluster.ps is set",
                           "remove cluster.ps (variables are mirrored on every worker), or use strategy parameter_server")
    if name in PS_STRATEGIES and not cluster.ps:
        raise _roles_error(file, name, "keeps the variables on parameter servers but cluster.ps is empty",
                           "add cluster.ps: ['host:port']")
    if name == "parameter_server_sync" and not cluster.chief:
        raise _roles_error(file, name, "needs a chief (Estimator's own ps replication requires one; it trains too)",
                           "move one address from cluster.worker to cluster.chief")
    if name in IN_GRAPH_STRATEGIES and (cluster.ps or cluster.worker):
        extra = "cluster.ps" if cluster.ps else "cluster.worker"
        raise _roles_error(file, name, f"runs one training process on one machine but {extra} is set",
                           "keep only cluster.chief (and the evaluator), or use multi_worker_mirrored "
                           "for several machines")
    if name == "parameter_server_sync" and strategy.replicas_to_aggregate is not None \
            and strategy.replicas_to_aggregate > cluster.num_workers:
        raise UsageError(ERR_R2A.format(file=file, got=strategy.replicas_to_aggregate, replicas=cluster.num_workers))


def parse_tasks(file, raw, cluster: ClusterConfig):
    """`tasks:` as (selector, settings) pairs, least specific first, so later ones win."""
    mapping = as_mapping(file, raw, "tasks")
    tasks = [str(t) for t in cluster.tasks()]
    roles = sorted({t.type for t in cluster.tasks()})
    parsed = []
    for selector, overrides in mapping.items():
        if selector != "all" and selector not in roles and selector not in tasks:
            raise UsageError(ERR_TASK_SELECTOR.format(file=file, selector=selector, roles=", ".join(roles),
                                                      tasks=", ".join(tasks)))
        key = f"tasks.{selector}"
        parsed.append((selector, tuple(parse_values(file, as_mapping(file, overrides, key), TaskSettings, key).items())))
    specificity = {"all": 0, **{r: 1 for r in roles}, **{t: 2 for t in tasks}}
    return tuple(sorted(parsed, key=lambda item: specificity[item[0]]))


def check_checkpoints(file, training, cluster: ClusterConfig) -> None:
    if training.save_checkpoints_steps > training.max_steps:
        raise UsageError(ERR_RANGE.format(file=file, key="training.save_checkpoints_steps",
                                          bound=f"at most training.max_steps ({training.max_steps})",
                                          got=training.save_checkpoints_steps))
    if training.trace_step > training.max_steps:
        raise UsageError(ERR_RANGE.format(file=file, key="training.trace_step",
                                          bound=f"at most training.max_steps ({training.max_steps}), or 0 (off)",
                                          got=training.trace_step))
    if cluster.evaluator is not None and training.keep_checkpoint_max < 2:
        # Each save deletes the oldest checkpoint beyond the limit: with 1 kept,
        # that is the very checkpoint the evaluator may be reading.
        raise UsageError(ERR_RANGE.format(file=file, key="training.keep_checkpoint_max",
                                          bound="at least 2 when the cluster has an evaluator (with 1, each save "
                                                "deletes the checkpoint the evaluator may be reading)",
                                          got=training.keep_checkpoint_max))


def _check_nccl_trainers(config) -> None:
    file, strategy = config.source, config.strategy
    if strategy.name == "multi_worker_mirrored" and strategy.communication == "nccl":
        for task in config.cluster.tasks():
            if task.is_trainer and config.task_settings(task).gpus == ():
                raise UsageError(ERR_NCCL_NO_GPU.format(file=file, key="strategy.communication", who=f"task {task}",
                                                        why="its gpus is []", fix="communication: ring or auto"))


def in_graph_devices(strategy: StrategyConfig):
    """The devices the YAML names for mirrored/one_device ('auto' names none)."""
    if strategy.name == "one_device":
        return () if strategy.device == "auto" else (strategy.device,)
    return strategy.devices or ()


def check_devices(config) -> None:
    """Refusals that follow from the devices a task is given, when the YAML tells them."""
    _check_nccl_trainers(config)
    file, strategy = config.source, config.strategy
    if strategy.name not in IN_GRAPH_STRATEGIES:
        return
    gpus = config.task_settings(config.cluster.chief_task).gpus
    devices = in_graph_devices(strategy)
    kinds = [device_index(d) for d in devices]
    if strategy.name == "mirrored" and strategy.cross_device_ops == "nccl" and devices \
            and all(kind == "cpu" for kind, _ in kinds):
        raise UsageError(ERR_NCCL_NO_GPU.format(file=file, key="strategy.cross_device_ops", who="strategy.devices",
                                                why="only CPU devices are listed",
                                                fix="cross_device_ops: auto or reduction_to_one_device"))
    key = "strategy.devices" if strategy.name == "mirrored" else "strategy.device"
    for (kind, index), device in zip(kinds, devices):
        if kind == "gpu" and gpus is not None and index >= len(gpus):
            raise UsageError(ERR_RANGE.format(
                file=file, key=key, got=device,
                bound=f"one of the {len(gpus)} GPU(s) the chief sees, /gpu:0 to /gpu:{len(gpus) - 1} "
                      f"(tasks.chief.gpus is {list(gpus)}; indices count from 0 after masking)"
                if gpus else "a CPU device, because the chief's gpus is [] (no GPU visible)"))
