"""`estimator-mnist tfjob`: the Kubernetes objects that run a cluster file under Kubeflow's training-operator.

From the same YAML as `launch`: a ConfigMap holding the YAML, a
`kubeflow.org/v1` TFJob with one replica spec per role, and a NetworkPolicy
that lets only the job's own pods reach the gRPC ports (TensorFlow's servers
have no authentication). The objects are built with Kubeflow's own SDK
models (kubeflow-training 1.9, whose types are generated from the operator's
API) and Kubernetes' client models, then printed as YAML documents.

What the operator (v1.9) needs, from its source: the container named
`tensorflow`, its port named `tfjob-port` (the operator builds every host
in TF_CONFIG as `<job>-<type>-<index>.<namespace>.svc:<that port>`), and a
restart policy per replica spec; `ExitCode` retries exit codes of 128 and
above (this product's 200) and fails on 1-127. It retries by deleting the
failed pod and creating a new one, so `runPolicy.backoffLimit`, which sums
the restart counts of the running pods' containers, never bounds those
retries: the tasks count them themselves (restart_budget.py), keyed by the
ESTIMATOR_MNIST_JOB_ID set here (the TFJob's UID is not visible to its pods:
the downward API has no ownerReferences).
"""

from __future__ import annotations

import re
import uuid

from estimator_mnist.config import Config, TaskId
from estimator_mnist.errors import UsageError
from estimator_mnist.kubeflow import pod_storage
from estimator_mnist.kubeflow.pod_storage import PodStorage
from estimator_mnist.supervise.restart_budget import JOB_ID_ENV

KINDS = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
CONTAINER, PORT_NAME, DEFAULT_PORT = "tensorflow", "tfjob-port", 2222
JOB_LABEL = "training.kubeflow.org/job-name"  # the operator puts it on every pod of the job
CONFIG_DIR, CONFIG_KEY = "/etc/estimator-mnist", "cluster.yaml"
IMAGE_UID = 1000  # the Dockerfile's user
MAX_NAME = 51  # "<name>-evaluator-0" must stay a pod name (DNS-1123) and "<name>-<type>-<i>" a service name (63)
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

ERR_NAME = ("--name {name!r} is not a DNS-1035 label of at most {limit} characters (lower-case letters, digits and "
            "'-', starting with a letter, ending with a letter or digit); the operator names pods "
            "<name>-<type>-<index> from it")
ERR_PER_TASK = ("{file}: tasks.{task} differs from tasks.{role} ({keys}); a TFJob replica spec is the same for every "
                "{role} task, so give the setting to tasks.{role} instead")
ERR_NO_SDK = ("tfjob needs Kubeflow's SDK (kubeflow-training 1.9): install it with "
              "pip install -c constraints.txt -e '.[k8s]'")


def check_name(name: str) -> None:
    if len(name) > MAX_NAME or not _DNS_1035.match(name):
        raise UsageError(ERR_NAME.format(name=name, limit=MAX_NAME))


def check_uniform_tasks(config: Config, file: str) -> None:
    """Every task of a role must have the settings of the role: one replica spec serves them all."""
    for role in KINDS:
        tasks = [t for t in config.cluster.tasks() if t.type == role]
        first = config.task_settings(TaskId(role, 0))
        for task in tasks[1:]:
            settings = config.task_settings(task)
            if settings != first:
                keys = ", ".join(k for k in vars(first) if getattr(first, k) != getattr(settings, k))
                raise UsageError(ERR_PER_TASK.format(file=file, task=task, role=role, keys=keys))


def _port(config: Config, role: str) -> int:
    if role == "evaluator":
        return DEFAULT_PORT  # it runs no server; the operator would add this port anyway
    return config.cluster.address(TaskId(role, 0)).port


def job_id(namespace: str, name: str) -> str:
    """The job's identity for its restart budget: a new one for every rendering, so a resubmission starts afresh."""
    return f"{namespace}/{name}/{uuid.uuid4().hex[:12]}"


def _pod(config: Config, role: str, name: str, image: str, storage: PodStorage, client, job: str):
    gpus = config.task_settings(TaskId(role, 0)).gpus
    limits = {"nvidia.com/gpu": str(len(gpus))} if gpus else None
    parts = pod_storage.pod_parts(storage, client)
    mounts = [client.V1VolumeMount(name="cluster-yaml", mount_path=CONFIG_DIR, read_only=True), *parts["mounts"]]
    paths = pod_storage.path_flags(storage, config, name)
    trainer = client.V1Container(
        name=CONTAINER, image=image, volume_mounts=mounts,
        command=["estimator-mnist", "train", "--cluster", f"{CONFIG_DIR}/{CONFIG_KEY}", *paths],
        env=[client.V1EnvVar(name=JOB_ID_ENV, value=job), *parts["env"]],
        ports=[client.V1ContainerPort(name=PORT_NAME, container_port=_port(config, role), protocol="TCP")],
        resources=client.V1ResourceRequirements(limits=limits) if limits else None)
    # prepare-data takes a lock on the volume, so every pod can run it: the first prepares, the others wait.
    # Without a claim the image holds MNIST (prepared when it was built): nothing to prepare.
    prepare = [client.V1Container(name="prepare-data", image=image, volume_mounts=mounts[:2],
                                  command=["estimator-mnist", "prepare-data", "--data-dir", paths[-1]])
               ] if storage.claim else None
    volumes = [client.V1Volume(name="cluster-yaml", config_map=client.V1ConfigMapVolumeSource(name=f"{name}-cluster")),
               *parts["volumes"]]
    # The image runs as uid 1000 (Dockerfile); fsGroup makes the claimed volume writable for it.
    return client.V1PodTemplateSpec(spec=client.V1PodSpec(
        containers=[trainer], init_containers=prepare, volumes=volumes, service_account_name=parts["service_account"],
        security_context=client.V1PodSecurityContext(run_as_user=IMAGE_UID, fs_group=IMAGE_UID)))


def build_objects(config: Config, yaml_text: str, file: str, image: str, storage: PodStorage, name: str,
                  namespace: str) -> list:
    """[ServiceAccount (with --gcp-service-account),] ConfigMap, TFJob and NetworkPolicy as SDK model objects.
    UsageError for what a TFJob cannot express, and for flags that contradict model_dir or each other."""
    check_name(name)
    check_uniform_tasks(config, file)
    pod_storage.check(storage, config, file)
    try:
        from kubeflow.training import models  # pylint: disable=import-outside-toplevel
        from kubernetes import client  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise UsageError(ERR_NO_SDK) from None
    restart = config.restart
    policy = "ExitCode" if restart.policy == "on_failure" else "Never"
    counts = {role: sum(1 for t in config.cluster.tasks() if t.type == role) for role in KINDS}
    job = job_id(namespace, name)
    specs = {KINDS[role]: models.KubeflowOrgV1ReplicaSpec(
                 replicas=count, restart_policy=policy, template=_pod(config, role, name, image, storage, client, job))
             for role, count in counts.items() if count}
    run_policy = models.KubeflowOrgV1RunPolicy(
        clean_pod_policy="Running",  # nothing runs on after success; finished pods keep their logs
        # It bounds in-place container restarts only (none under ExitCode, whose pods are re-created);
        # restart.max_restarts is enforced by the tasks themselves (restart_budget.py).
        backoff_limit=restart.max_restarts if restart.policy == "on_failure" else 0)
    job = models.KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1", kind="TFJob", metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        spec=models.KubeflowOrgV1TFJobSpec(tf_replica_specs=specs, run_policy=run_policy))
    config_map = client.V1ConfigMap(api_version="v1", kind="ConfigMap", data={CONFIG_KEY: yaml_text},
                                    metadata=client.V1ObjectMeta(name=f"{name}-cluster", namespace=namespace))
    ports = sorted({_port(config, role) for role, count in counts.items() if count and role != "evaluator"})
    own_pods = client.V1LabelSelector(match_labels={JOB_LABEL: name})
    network = client.V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=client.V1ObjectMeta(name=f"{name}-grpc", namespace=namespace),
        spec=client.V1NetworkPolicySpec(
            pod_selector=own_pods, policy_types=["Ingress"],
            ingress=[client.V1NetworkPolicyIngressRule(
                _from=[client.V1NetworkPolicyPeer(pod_selector=own_pods)],
                ports=[client.V1NetworkPolicyPort(protocol="TCP", port=p) for p in ports])]))
    account = pod_storage.service_account(storage, namespace, client)
    return ([account] if account else []) + [config_map, job, network]


def manifest(config: Config, yaml_text: str, file: str, image: str, storage, name: str, namespace: str) -> str:
    """The objects as YAML documents, ready for `kubectl apply -f -`. `storage`: a PodStorage, or the name of
    the volume claim alone."""
    import yaml  # pylint: disable=import-outside-toplevel

    storage = storage if isinstance(storage, PodStorage) else PodStorage(claim=storage)
    objects = build_objects(config, yaml_text, file, image, storage, name, namespace)
    from kubernetes.client import ApiClient  # pylint: disable=import-outside-toplevel

    dicts = [ApiClient().sanitize_for_serialization(o) for o in objects]

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value):  # the YAML in the ConfigMap stays readable: a literal block, not an escaped string
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    header = (f"# Generated by `estimator-mnist tfjob` from {file}: run it under Kubeflow's training-operator with\n"
              f"#   kubectl apply -f <this file>\n"
              f"# Under restartPolicy ExitCode the operator re-creates failed pods, which backoffLimit does not count:\n"
              f"# the tasks enforce restart.max_restarts themselves, per {JOB_ID_ENV} (render anew to resubmit):\n"
              f"# a preemption (SIGTERM, the checkpoint of the stop step saved) never counts; max_restarts bounds\n"
              f"# the failures in a row without a newer checkpoint, then every task exits 1 (model_dir/restart_budget.json).\n"
              + pod_storage.header(storage, config, namespace))
    return header + yaml.dump_all(dicts, Dumper=Dumper, sort_keys=False, default_flow_style=False)
