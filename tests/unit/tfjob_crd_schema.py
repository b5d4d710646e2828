"""A JSON schema of a TFJob, written by hand from the training-operator's documented constraints (v1.9), not
derived from the SDK models that produce `tfjob`'s output: a disagreement between the two must show.

Sources, read in kubeflow/training-operator: the CRD (manifests/base/crds/kubeflow.org_tfjobs.yaml: field
names and types, int32 fields, the restart policies its description lists), the API constants (replica types
Chief, Master, Worker, PS, Evaluator; clean-pod policies All, Running, None; the default container name
`tensorflow`) and the admission webhook (pkg/webhooks/tensorflow/tfjob_webhook.go: a DNS-1035 job name,
every replica spec has containers, one of them named `tensorflow` with an image, at most one Chief or Master).
The CRD itself (540 kB) is not kept in the repository. Where the CRD allows more fields than this product
writes (the pod spec), the schema lists the ones it checks and lets the rest through, as the CRD does.
"""

INT32 = {"type": "integer", "minimum": -2**31, "maximum": 2**31 - 1}
NON_NEGATIVE_INT32 = {**INT32, "minimum": 0}
STRING = {"type": "string", "minLength": 1}
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")
DNS_1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"

ENV_VAR = {"type": "object", "required": ["name"], "properties": {"name": STRING, "value": {"type": "string"}}}
PORT = {"type": "object", "required": ["containerPort"],
        "properties": {"containerPort": {**INT32, "minimum": 1, "maximum": 65535}, "name": STRING,
                       "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}}
CONTAINER = {"type": "object", "required": ["name"],
             "properties": {"name": STRING, "image": STRING, "command": {"type": "array", "items": {"type": "string"}},
                            "env": {"type": "array", "items": ENV_VAR}, "ports": {"type": "array", "items": PORT}}}
# The webhook: one container of each replica spec is the operator's, named `tensorflow`, with an image.
TENSORFLOW_CONTAINER = {"type": "object", "required": ["name", "image"],
                        "properties": {"name": {"const": "tensorflow"}, "image": STRING}}
POD_SPEC = {"type": "object", "required": ["containers"],
            "properties": {"containers": {"type": "array", "minItems": 1, "items": CONTAINER,
                                          "contains": TENSORFLOW_CONTAINER},
                           "initContainers": {"type": "array", "items": CONTAINER},
                           "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]}}}
REPLICA_SPEC = {"type": "object", "additionalProperties": False,
                "properties": {"replicas": NON_NEGATIVE_INT32, "restartPolicy": {"enum": list(RESTART_POLICIES)},
                               "template": {"type": "object", "required": ["spec"],
                                            "properties": {"metadata": {"type": "object"}, "spec": POD_SPEC}}}}
RUN_POLICY = {"type": "object", "additionalProperties": False,
              "properties": {"cleanPodPolicy": {"enum": list(CLEAN_POD_POLICIES)}, "backoffLimit": INT32,
                             "activeDeadlineSeconds": {"type": "integer"}, "ttlSecondsAfterFinished": INT32,
                             "suspend": {"type": "boolean"}, "schedulingPolicy": {"type": "object"}}}
TFJOB = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"}, "kind": {"const": "TFJob"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "pattern": DNS_1035, "maxLength": 63},
                                    "namespace": STRING}},
        "spec": {"type": "object", "required": ["tfReplicaSpecs"], "additionalProperties": False,
                 "properties": {
                     "tfReplicaSpecs": {"type": "object", "minProperties": 1, "propertyNames": {"enum": list(REPLICA_TYPES)},
                                        "additionalProperties": REPLICA_SPEC,
                                        # at most one Chief or Master
                                        "not": {"required": ["Chief", "Master"]}},
                     "runPolicy": RUN_POLICY, "successPolicy": {"type": "string"},
                     "enableDynamicWorker": {"type": "boolean"}}},
    },
}
