"""`estimator-mnist tfjob`: the objects for every shipped config, read back through Kubeflow's SDK models and
checked against a schema generated from those models and against one written from the operator's documented
constraints (tfjob_crd_schema.py), and each refusal."""

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.unit.tfjob_crd_schema import TFJOB
from estimator_mnist.config import TaskId, load_config
from estimator_mnist.errors import UsageError
from estimator_mnist.supervise.restart_budget import JOB_ID_ENV
from estimator_mnist.kubeflow.tfjob import (CONTAINER, DEFAULT_PORT, ERR_NAME, ERR_NO_SDK, ERR_PER_TASK, JOB_LABEL, KINDS,
                                   MAX_NAME, PORT_NAME, manifest)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(str(p.relative_to(REPO)) for p in (REPO / "config").glob("*.yaml"))


def pattern(template):
    return ".*".join(re.escape(part) for part in re.split(r"\{[a-z_!r]+\}", template))


def sdk_schema(type_name: str) -> dict:
    """A JSON schema of a Kubeflow SDK type (generated from the operator's OpenAPI spec): every field's
    JSON name and type, and no field the API does not have."""
    from kubeflow.training import models

    if type_name in ("str", "datetime", "date"):
        return {"type": "string"}
    if type_name in ("int", "float"):
        return {"type": "integer" if type_name == "int" else "number"}
    if type_name == "Quantity":  # Kubernetes' resource quantity: "2", "500Mi" or a number
        return {"type": ["string", "integer", "number"]}
    if type_name == "bool":
        return {"type": "boolean"}
    if type_name == "object":
        return {}
    if type_name.startswith("list["):
        return {"type": "array", "items": sdk_schema(type_name[5:-1])}
    if type_name.startswith("dict(str, "):
        return {"type": "object", "additionalProperties": sdk_schema(type_name[10:-1])}
    model = getattr(models, type_name)
    return {"type": "object", "additionalProperties": False,
            "properties": {model.attribute_map[attr]: sdk_schema(kind) for attr, kind in model.openapi_types.items()}}


def render(config_file, *overrides, name="mnist", restart=None):
    config = load_config(config_file, overrides)
    text = manifest(config, Path(config_file).read_text(), config_file, "registry.example/mnist:1", "mnist-data",
                    name, "team")
    return config, {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def read_back(document: dict, type_name: str):
    """Deserialises the document with the SDK, as the Kubernetes client reads the API server's answer."""
    from kubeflow.training import ApiClient

    class Answer:
        data = json.dumps(document)

    return ApiClient().deserialize(Answer(), type_name)


@pytest.mark.parametrize("config_file", SHIPPED)
def test_every_shipped_config_becomes_a_tfjob_the_operator_can_run(config_file):
    config, docs = render(config_file)
    job = docs["TFJob"]
    jsonschema.validate(job, sdk_schema("KubeflowOrgV1TFJob"))
    jsonschema.validate(job, TFJOB)  # the operator's documented constraints, written independently of the SDK
    model = read_back(job, "KubeflowOrgV1TFJob")
    assert model.api_version == "kubeflow.org/v1" and model.kind == "TFJob" and model.metadata.name == "mnist"
    counts = {}
    for task in config.cluster.tasks():
        counts[KINDS[task.type]] = counts.get(KINDS[task.type], 0) + 1
    assert {kind: spec.replicas for kind, spec in model.spec.tf_replica_specs.items()} == counts
    for kind, spec in model.spec.tf_replica_specs.items():
        role = next(r for r, k in KINDS.items() if k == kind)
        assert spec.restart_policy == ("ExitCode" if config.restart.policy == "on_failure" else "Never")
        (container,) = spec.template.spec.containers
        assert container.name == CONTAINER
        assert [(p.name, p.container_port) for p in container.ports] == [(PORT_NAME, DEFAULT_PORT if role == "evaluator"
                                                                          else config.cluster.address(TaskId(role, 0)).port)]
        assert container.command[:4] == ["estimator-mnist", "train", "--cluster", "/etc/estimator-mnist/cluster.yaml"]
        assert spec.template.spec.init_containers[0].command[:2] == ["estimator-mnist", "prepare-data"]
        assert spec.template.spec.volumes[1].persistent_volume_claim.claim_name == "mnist-data"
        (job_id,) = [e.value for e in container.env if e.name == JOB_ID_ENV]
        assert re.fullmatch(r"team/mnist/[0-9a-f]{12}", job_id)  # the restart budget's key: the same in every pod of the job
        assert {e.value for s in model.spec.tf_replica_specs.values() for e in s.template.spec.containers[0].env} \
            == {job_id}
    assert model.spec.run_policy.clean_pod_policy == "Running"
    assert model.spec.run_policy.backoff_limit == (config.restart.max_restarts
                                                  if config.restart.policy == "on_failure" else 0)
    # The pods read the same YAML.
    assert yaml.safe_load(docs["ConfigMap"]["data"]["cluster.yaml"]) == yaml.safe_load(Path(config_file).read_text())
    network = docs["NetworkPolicy"]
    assert network["spec"]["podSelector"] == {"matchLabels": {JOB_LABEL: "mnist"}}
    (rule,) = network["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {JOB_LABEL: "mnist"}}}]
    servers = {config.cluster.address(TaskId(t.type, 0)).port for t in config.cluster.tasks() if not t.is_evaluator}
    assert {p["port"] for p in rule["ports"]} == servers


def test_never_restart_and_gpus(tmp_path):
    config, docs = render("config/two_workers.yaml", "restart.policy=never", "tasks.worker.gpus=[0,1]")
    specs = docs["TFJob"]["spec"]["tfReplicaSpecs"]
    assert specs["Worker"]["restartPolicy"] == "Never" and docs["TFJob"]["spec"]["runPolicy"]["backoffLimit"] == 0
    limits = specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "2"}
    assert "resources" not in specs["Evaluator"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("name", ["Mnist", "9mnist", "mnist-", "mnist_job", "m" * (MAX_NAME + 1)])
def test_a_name_the_operator_cannot_use_is_refused(name):
    with pytest.raises(UsageError, match=pattern(ERR_NAME)):
        render("config/local.yaml", name=name)
    render("config/local.yaml", name="m" * MAX_NAME)


def test_a_per_task_setting_a_replica_spec_cannot_hold_is_refused():
    with pytest.raises(UsageError, match=pattern(ERR_PER_TASK)) as caught:
        render("config/ps_sync_backup.yaml", "tasks.worker:1.step_delay_ms=500")
    assert "tasks.worker:1 differs from tasks.worker (step_delay_ms)" in str(caught.value)


def test_without_the_sdk_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "kubeflow.training", None)
    with pytest.raises(UsageError, match=re.escape(ERR_NO_SDK)):
        render("config/local.yaml")


def test_the_cli_prints_apply_ready_yaml_and_refuses_with_exit_2(capsys):
    from estimator_mnist import cli

    assert cli.main(["tfjob", "--cluster", "config/two_workers.yaml", "--image", "i:1", "--volume-claim", "c",
                     "--set", "training.max_steps=50", "--set", "training.save_checkpoints_steps=25"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TFJob", "NetworkPolicy"]
    assert docs[1]["metadata"]["name"] == "two-workers"
    assert yaml.safe_load(docs[0]["data"]["cluster.yaml"])["training"]["max_steps"] == 50
    assert cli.main(["tfjob", "--cluster", "config/local.yaml", "--image", "i", "--volume-claim", "c",
                     "--name", "Bad"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_generated_schema_catches_a_misspelt_field_and_a_wrong_type():
    _, docs = render("config/local.yaml")
    job = docs["TFJob"]
    schema = sdk_schema("KubeflowOrgV1TFJob")
    misspelt = json.loads(json.dumps(job))
    misspelt["spec"]["tfReplicaSpecs"]["Chief"]["restart_policy"] = "ExitCode"
    wrong_type = json.loads(json.dumps(job))
    wrong_type["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    for bad in (misspelt, wrong_type):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def _changed(job: dict, change) -> dict:
    copy = json.loads(json.dumps(job))
    change(copy["spec"])
    return copy


@pytest.mark.parametrize("what, change", [
    ("a replica type the operator does not know", lambda s: s["tfReplicaSpecs"].update(Trainer=s["tfReplicaSpecs"]["Worker"])),
    ("a restart policy that is not one of the four", lambda s: s["tfReplicaSpecs"]["Chief"].update(restartPolicy="Retry")),
    ("a misspelt replica spec field", lambda s: s["tfReplicaSpecs"]["Chief"].update(restart_policy="ExitCode")),
    ("replicas as a string", lambda s: s["tfReplicaSpecs"]["Worker"].update(replicas="2")),
    ("no container named tensorflow", lambda s: s["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
     .update(name="trainer")),
    ("a Chief and a Master", lambda s: s["tfReplicaSpecs"].update(Master=s["tfReplicaSpecs"]["Chief"])),
    ("a clean-pod policy that does not exist", lambda s: s["runPolicy"].update(cleanPodPolicy="Finished")),
    ("backoffLimit beyond int32", lambda s: s["runPolicy"].update(backoffLimit=2**31)),
])
def test_the_crd_schema_catches_what_the_operator_would_refuse(what, change):
    _, docs = render("config/local.yaml")
    jsonschema.validate(docs["TFJob"], TFJOB)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_changed(docs["TFJob"], change), TFJOB)


def test_the_image_installs_the_way_the_readme_does():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"\*\*Install by hand\*\*.*?```bash\n(.*?)```", readme, re.S).group(1)
    by_hand = [line.strip() for line in block.splitlines() if "pip install" in line]
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines()
    image = [line[len("RUN "):].strip() for line in dockerfile if line.startswith("RUN ") and "pip install" in line]
    assert image == by_hand and len(image) == 2
    assert "-c constraints.txt" in image[-1]  # the tested versions, as run_local.sh and run_tests.sh install them
    assert any(line.startswith("FROM python:3.11") for line in dockerfile)  # TF 2.15 needs Python 3.9-3.11
