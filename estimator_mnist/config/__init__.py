"""The run configuration: one YAML file (plus --set overrides), parsed once into frozen dataclasses.

schema: the sections and their defaults; values: one value's checks;
cluster: the cluster section; rules: cross-field rules; overrides: --set;
load: YAML to Config; keys: the key table. No TensorFlow anywhere here.
"""

from estimator_mnist.config.keys import configuration_markdown, describe_keys
from estimator_mnist.config.load import config_from_dict, load_config, read_yaml
from estimator_mnist.config.overrides import apply_overrides
from estimator_mnist.config.schema import (IN_GRAPH_STRATEGIES, PS_STRATEGIES, ROLES, TRAINING_ROLES, Address, ClusterConfig, Config,
                     TaskId, TaskSettings, default_data_dir)
from estimator_mnist.config.values import device_index

__all__ = ["Address", "ClusterConfig", "Config", "IN_GRAPH_STRATEGIES", "PS_STRATEGIES", "ROLES", "TRAINING_ROLES",
           "TaskId", "TaskSettings", "apply_overrides", "config_from_dict", "configuration_markdown",
           "default_data_dir", "describe_keys", "device_index", "load_config", "read_yaml"]
