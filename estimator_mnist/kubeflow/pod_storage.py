"""Where the pods of `estimator-mnist tfjob` keep model_dir, run_dir and the data, and the credentials they
reach a bucket with. No TF.

Two shapes:
- **a local model_dir:** every pod mounts one ReadWriteMany PersistentVolumeClaim (`--volume-claim`) holding
  model_dir, run_dir and MNIST, which an init container prepares there (under a lock);
- **model_dir: gs://BUCKET/PATH:** no shared volume. model_dir, and every record another pod reads
  (Config.records_dir), are in the bucket; run_dir (this pod's logs) is an emptyDir of the pod; MNIST is the
  image's own copy, prepared when the image was built (Dockerfile: ESTIMATOR_MNIST_DATA_DIR). A claim may still
  be given: it then holds run_dir and the data as before, and only model_dir is in the bucket.
The credentials are given the ways GKE's users give them: a Kubernetes ServiceAccount bound to a Google
service account by Workload Identity (`--service-account`, with `--gcp-service-account` this command writes the
ServiceAccount annotated `iam.gke.io/gcp-service-account`), or a service account key in a Secret, mounted and
named by GOOGLE_APPLICATION_CREDENTIALS (`--credentials-secret`), which Google's client and TensorFlow's gs://
file system both read. The training-operator (v1.9, createNewPod) copies the replica spec's pod template and
only adds labels and TF_CONFIG, so these fields reach every pod as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from estimator_mnist.config import Config
from estimator_mnist.errors import UsageError
from estimator_mnist.storage.urls import is_bucket

MOUNT = "/mnt/estimator-mnist"
IMAGE_DATA_DIR = "/opt/tensorflow_datasets"  # the Dockerfile's ESTIMATOR_MNIST_DATA_DIR, prepared at build time
SECRET_DIR, SECRET_KEY = "/var/secrets/google", "key.json"
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
GSA_ANNOTATION = "iam.gke.io/gcp-service-account"
# A Kubernetes object name (DNS-1123 subdomain), as ServiceAccounts and Secrets are named.
_OBJECT_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Google service account's e-mail: NAME@PROJECT.iam.gserviceaccount.com (NAME 6-30 characters).
_GSA = re.compile(r"^(?P<account>[a-z][-a-z0-9]{4,28}[a-z0-9])@(?P<project>[a-z][-a-z0-9.:]*[a-z0-9])"
                  r"\.iam\.gserviceaccount\.com$")

ERR_NO_CLAIM = ("{file}: model_dir {model_dir!r} is a local path, so every pod must mount it: give --volume-claim "
                "PVC (a ReadWriteMany PersistentVolumeClaim), or set model_dir: gs://BUCKET/PATH to need no shared "
                "volume")
ERR_NO_CREDENTIALS = ("{file}: model_dir {model_dir} is a bucket, and the pods need credentials for it: give "
                      "--service-account KSA (Workload Identity; add --gcp-service-account GSA to have the "
                      "ServiceAccount written) or --credentials-secret SECRET (a key file in a Secret); "
                      "--service-account default keeps the namespace's default account (the nodes' own credentials)")
ERR_LOCAL_ONLY = ("{flag}: goes with a gs:// model_dir, and {file}'s model_dir {model_dir!r} is a local path on the "
                  "claimed volume; leave it out, or set model_dir: gs://BUCKET/PATH")
ERR_GSA_ALONE = ("--gcp-service-account: goes with --service-account KSA, the Kubernetes ServiceAccount it "
                 "annotates for Workload Identity; add --service-account")
ERR_TWO_CREDENTIALS = ("--gcp-service-account and --credentials-secret give the pods two credentials (Workload "
                       "Identity and a key file, which would win); give one")
ERR_OBJECT_NAME = ("{flag} {value!r} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at "
                   "most 253 characters, starting and ending with a letter or digit)")
ERR_GSA = ("--gcp-service-account {value!r} is not a Google service account's e-mail address; write it as "
           "NAME@PROJECT.iam.gserviceaccount.com")


@dataclass(frozen=True)
class PodStorage:
    """The flags of `tfjob` that say where the pods keep their files and how they reach a bucket."""

    claim: Optional[str] = None
    service_account: Optional[str] = None      # the pods' Kubernetes ServiceAccount
    gcp_service_account: Optional[str] = None  # written as that ServiceAccount's Workload Identity annotation
    credentials_secret: Optional[str] = None   # a Secret whose key.json is a service account key


def check(storage: PodStorage, config: Config, file: str) -> None:
    """One line (UsageError) for flags that contradict each other or model_dir."""
    for flag, value in (("--volume-claim", storage.claim), ("--service-account", storage.service_account),
                        ("--credentials-secret", storage.credentials_secret)):
        if value is not None and not _OBJECT_NAME.match(value):
            raise UsageError(ERR_OBJECT_NAME.format(flag=flag, value=value))
    if storage.gcp_service_account is not None and not _GSA.match(storage.gcp_service_account):
        raise UsageError(ERR_GSA.format(value=storage.gcp_service_account))
    if storage.gcp_service_account and not storage.service_account:
        raise UsageError(ERR_GSA_ALONE)
    if storage.gcp_service_account and storage.credentials_secret:
        raise UsageError(ERR_TWO_CREDENTIALS)
    if is_bucket(config.model_dir):
        if not (storage.service_account or storage.credentials_secret):
            raise UsageError(ERR_NO_CREDENTIALS.format(file=file, model_dir=config.model_dir))
        return
    if storage.claim is None:
        raise UsageError(ERR_NO_CLAIM.format(file=file, model_dir=config.model_dir))
    for flag, value in (("--gcp-service-account", storage.gcp_service_account),
                        ("--credentials-secret", storage.credentials_secret)):
        if value:
            raise UsageError(ERR_LOCAL_ONLY.format(flag=flag, file=file, model_dir=config.model_dir))


def path_flags(storage: PodStorage, config: Config, name: str) -> list:
    """train's path flags in every pod."""
    model_dir = config.model_dir if is_bucket(config.model_dir) else f"{MOUNT}/{name}/model"
    data_dir = f"{MOUNT}/tensorflow_datasets" if storage.claim else IMAGE_DATA_DIR
    return ["--model-dir", model_dir, "--run-dir", f"{MOUNT}/{name}/run", "--data-dir", data_dir]


def pod_parts(storage: PodStorage, client) -> dict:
    """The volumes, the trainer's mounts and environment, and the pod's ServiceAccount."""
    if storage.claim:
        volumes = [client.V1Volume(name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
            claim_name=storage.claim))]
    else:  # run_dir only: this pod's logs
        volumes = [client.V1Volume(name="data", empty_dir=client.V1EmptyDirVolumeSource())]
    mounts, env = [client.V1VolumeMount(name="data", mount_path=MOUNT)], []
    if storage.credentials_secret:
        volumes.append(client.V1Volume(name="gcp-credentials", secret=client.V1SecretVolumeSource(
            secret_name=storage.credentials_secret)))
        mounts.append(client.V1VolumeMount(name="gcp-credentials", mount_path=SECRET_DIR, read_only=True))
        env.append(client.V1EnvVar(name=CREDENTIALS_ENV, value=f"{SECRET_DIR}/{SECRET_KEY}"))
    return {"volumes": volumes, "mounts": mounts, "env": env, "service_account": storage.service_account}


def service_account(storage: PodStorage, namespace: str, client):
    """The ServiceAccount annotated for Workload Identity, when --gcp-service-account names its Google account."""
    if not storage.gcp_service_account:
        return None
    return client.V1ServiceAccount(api_version="v1", kind="ServiceAccount", metadata=client.V1ObjectMeta(
        name=storage.service_account, namespace=namespace,
        annotations={GSA_ANNOTATION: storage.gcp_service_account}))


def header(storage: PodStorage, config: Config, namespace: str) -> str:
    """What the user must do once outside this manifest, as comments."""
    if not is_bucket(config.model_dir):
        return ""
    lines = [f"# model_dir is {config.model_dir}: every pod checks, before its task starts, that the bucket exists "
             "and its credentials reach it (exit 2 fails the job)."]
    match = _GSA.match(storage.gcp_service_account or "")
    if match:
        lines += ["# Workload Identity: allow the ServiceAccount to act as the Google service account, once:",
                  f"#   gcloud iam service-accounts add-iam-policy-binding {storage.gcp_service_account} "
                  f"--role roles/iam.workloadIdentityUser "
                  f"--member 'serviceAccount:{match['project']}.svc.id.goog[{namespace}/{storage.service_account}]'"]
    elif storage.credentials_secret:
        lines += [f"# The key: kubectl create secret generic {storage.credentials_secret} --namespace {namespace} "
                  f"--from-file={SECRET_KEY}=KEY_FILE.json"]
    return "\n".join(lines) + "\n"
