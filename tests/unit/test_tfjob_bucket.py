"""`estimator-mnist tfjob` with model_dir: gs://BUCKET/PATH: no shared volume, MNIST from the image, credentials
the ways GKE's users give them (a Workload Identity ServiceAccount, or a key in a Secret), still valid against
Kubeflow's SDK models and the TFJob CRD's constraints; and each refusal of its flags, one line and exit 2."""

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from estimator_mnist import cli, storage
from estimator_mnist.config import load_config
from estimator_mnist.errors import UsageError
from estimator_mnist.kubeflow.pod_storage import (CREDENTIALS_ENV, ERR_GSA, ERR_GSA_ALONE, ERR_LOCAL_ONLY,
                                                  ERR_NO_CLAIM, ERR_NO_CREDENTIALS, ERR_OBJECT_NAME,
                                                  ERR_TWO_CREDENTIALS, GSA_ANNOTATION, IMAGE_DATA_DIR, SECRET_DIR,
                                                  SECRET_KEY, PodStorage)
from estimator_mnist.kubeflow.tfjob import manifest
from tests.unit.test_tfjob import pattern, read_back, sdk_schema
from tests.unit.tfjob_crd_schema import TFJOB

REPO = Path(__file__).resolve().parents[2]
BUCKET = "gs://mnist-runs/two-workers"
GSA = "trainer@my-project.iam.gserviceaccount.com"


def render(*overrides, **flags):
    config = load_config("config/two_workers.yaml", overrides or (f"model_dir={BUCKET}",))
    text = manifest(config, "{}", "config/two_workers.yaml", "registry.example/mnist:1", PodStorage(**flags),
                    "mnist", "team")
    return text, {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def pods(docs):
    """(replica kind, pod spec model) of every replica spec, read back through the SDK after both schemas."""
    job = docs["TFJob"]
    jsonschema.validate(job, sdk_schema("KubeflowOrgV1TFJob"))
    jsonschema.validate(job, TFJOB)
    model = read_back(job, "KubeflowOrgV1TFJob")
    return [(kind, spec.template.spec) for kind, spec in model.spec.tf_replica_specs.items()]


def flag_value(command, flag):
    return command[command.index(flag) + 1]


def test_workload_identity_needs_no_volume_and_writes_the_annotated_service_account():
    text, docs = render(service_account="mnist-trainer", gcp_service_account=GSA)
    account = docs["ServiceAccount"]
    assert account["metadata"] == {"name": "mnist-trainer", "namespace": "team", "annotations": {GSA_ANNOTATION: GSA}}
    assert list(docs) == ["ServiceAccount", "ConfigMap", "TFJob", "NetworkPolicy"]  # the account before its pods
    for _, pod in pods(docs):
        assert pod.service_account_name == "mnist-trainer"
        assert not pod.init_containers  # MNIST is in the image
        assert all(v.persistent_volume_claim is None and v.secret is None for v in pod.volumes)
        (trainer,) = pod.containers
        assert flag_value(trainer.command, "--model-dir") == BUCKET
        assert flag_value(trainer.command, "--data-dir") == IMAGE_DATA_DIR
        assert flag_value(trainer.command, "--run-dir").startswith("/mnt/estimator-mnist/")  # the pod's emptyDir
        assert CREDENTIALS_ENV not in {e.name for e in trainer.env}
    assert ("gcloud iam service-accounts add-iam-policy-binding " + GSA) in text
    assert "serviceAccount:my-project.svc.id.goog[team/mnist-trainer]" in text


def test_a_key_secret_is_mounted_and_named_by_google_application_credentials():
    text, docs = render(credentials_secret="gcs-key")
    assert "ServiceAccount" not in docs
    for _, pod in pods(docs):
        (secret,) = [v for v in pod.volumes if v.secret]
        assert secret.secret.secret_name == "gcs-key"
        (trainer,) = pod.containers
        (mount,) = [m for m in trainer.volume_mounts if m.name == secret.name]
        assert mount.mount_path == SECRET_DIR and mount.read_only
        assert {e.name: e.value for e in trainer.env}[CREDENTIALS_ENV] == f"{SECRET_DIR}/{SECRET_KEY}"
        assert pod.service_account_name is None
    assert f"kubectl create secret generic gcs-key --namespace team --from-file={SECRET_KEY}=" in text


def test_a_claim_beside_a_bucket_holds_run_dir_and_the_data_and_the_nodes_credentials_serve():
    _, docs = render(claim="mnist-data", service_account="default")
    for _, pod in pods(docs):
        assert [v.persistent_volume_claim.claim_name for v in pod.volumes if v.persistent_volume_claim] == ["mnist-data"]
        assert pod.init_containers[0].command[:2] == ["estimator-mnist", "prepare-data"]
        assert flag_value(pod.containers[0].command, "--model-dir") == BUCKET


def test_tfjob_makes_no_storage_call(monkeypatch, capsys):
    monkeypatch.setattr(storage, "check_bucket", lambda path: pytest.fail("tfjob contacted the storage"))
    assert cli.main(["tfjob", "--cluster", "config/two_workers.yaml", "--image", "i:1", "--set",
                     f"model_dir={BUCKET}", "--service-account", "default"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["ConfigMap", "TFJob", "NetworkPolicy"]


@pytest.mark.parametrize("flags, overrides, template", [
    ({}, ("model_dir=/data/model",), ERR_NO_CLAIM),
    ({}, (f"model_dir={BUCKET}",), ERR_NO_CREDENTIALS),
    ({"gcp_service_account": GSA}, (f"model_dir={BUCKET}",), ERR_GSA_ALONE),
    ({"service_account": "sa", "gcp_service_account": GSA, "credentials_secret": "key"}, (f"model_dir={BUCKET}",),
     ERR_TWO_CREDENTIALS),
    ({"service_account": "sa", "gcp_service_account": "trainer@gmail.com"}, (f"model_dir={BUCKET}",), ERR_GSA),
    ({"service_account": "Mnist_Trainer"}, (f"model_dir={BUCKET}",), ERR_OBJECT_NAME),
    ({"credentials_secret": "-key"}, (f"model_dir={BUCKET}",), ERR_OBJECT_NAME),
    ({"claim": "Data"}, ("model_dir=/data/model",), ERR_OBJECT_NAME),
    ({"claim": "data", "credentials_secret": "key"}, ("model_dir=/data/model",), ERR_LOCAL_ONLY),
], ids=["local-no-claim", "bucket-no-credentials", "gsa-alone", "two-credentials", "not-a-gsa",
        "bad-service-account", "bad-secret", "bad-claim", "secret-with-local-model-dir"])
def test_each_bad_combination_of_flags_is_refused(flags, overrides, template):
    with pytest.raises(UsageError, match=pattern(template)):
        render(*overrides, **flags)


@pytest.mark.parametrize("flags", [["--set", "model_dir=/data/model"],
                                   ["--set", f"model_dir={BUCKET}", "--gcp-service-account", GSA]])
def test_the_cli_refuses_in_one_line_with_exit_2_and_prints_nothing(flags, capsys):
    assert cli.main(["tfjob", "--cluster", "config/two_workers.yaml", "--image", "i:1", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1


def test_the_image_holds_mnist_where_the_pods_read_it():
    lines = (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines()
    assert f"ENV ESTIMATOR_MNIST_DATA_DIR={IMAGE_DATA_DIR}" in lines
    prepare = [i for i, line in enumerate(lines) if re.match(r"RUN estimator-mnist prepare-data\b", line)]
    assert prepare and lines.index("USER 1000") < prepare[0]  # prepared as the user the pods run as
    assert IMAGE_DATA_DIR in lines[prepare[0]]
