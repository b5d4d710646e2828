"""Fuzzed input (Hypothesis): every YAML document, --set value and TF_CONFIG is accepted or rejected in one line.

The library entry points run in-process, as `validate`, `launch` and `train`
call them before any process starts: a rejection is a UsageError (exit 2,
one line); anything else escaping is a bug, and Hypothesis prints its minimal
example. The settings are deterministic (derandomize, no example database),
so CI runs the same examples every time. tests/process/test_fuzzed_cli.py
sends a few of them through the real command line.
"""

import json
import os
import string
import tempfile
import types
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator_mnist import commands
from estimator_mnist.config import apply_overrides, config_from_dict, load_config, read_yaml
from estimator_mnist.config.keys import all_keys
from estimator_mnist.config.schema import CLUSTER_KEYS, ROLES, SECTIONS, STRATEGIES
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import plan_task
from tests.helpers import REPO

FUZZ = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LOCAL_YAML = REPO / "config" / "local.yaml"
KEY_NAMES = sorted(k.name for k in all_keys())

# Values at the edges of what each reader handles: empty, NUL, home of nobody, past int64 and float, not finite.
EDGES = ["", "auto", "0", "-1", "1e400", "localhost:0", "[0]", "~", "\x00", "a\x00b", "~nobody-here/x", "/", "..",
         2 ** 31, 2 ** 63, -(2 ** 63) - 1, 10 ** 400, float("inf"), float("-inf"), float("nan"), 1e-320, -0.0]
scalars = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.integers(-(10 ** 400), 10 ** 400)
           | st.floats()
           | st.text(max_size=12) | st.sampled_from(EDGES))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
ports = st.integers(-5, 70000) | st.just(2222)
hosts = st.sampled_from(["localhost", "127.0.0.1", "192.0.2.1", "::1", "[::1]", "", "a b", "host:1:2"]) | \
    st.text(alphabet=string.printable, max_size=12)
addresses = st.builds(lambda h, p: f"{h}:{p}", hosts, ports) | hosts | scalars


def _section(name, cls):
    fields = sorted(cls.__dataclass_fields__)
    return st.dictionaries(st.sampled_from(fields) | st.text(max_size=6), values, max_size=4)


clusters = st.dictionaries(st.sampled_from(CLUSTER_KEYS) | st.text(max_size=6),
                           st.lists(addresses, max_size=3) | addresses, max_size=4)
strategies_ = st.sampled_from(STRATEGIES) | st.fixed_dictionaries(
    {"name": st.sampled_from(STRATEGIES) | scalars}, optional={"communication": values, "gradient_compression": values})
documents = st.fixed_dictionaries({}, optional={
    "cluster": clusters | values, "strategy": strategies_ | values,
    "tasks": st.dictionaries(st.sampled_from(["chief:0", "worker:0", "worker:1", "evaluator", "ps:0"])
                             | st.text(max_size=6), st.dictionaries(st.text(max_size=10), values, max_size=2)
                             | values, max_size=2),
    "run_dir": values, "model_dir": values, "data_dir": values,
    **{name: _section(name, cls) | values for name, cls in SECTIONS.items()}})


TASK_NAMES = ["chief:0", "worker:0", "worker:1", "evaluator", "evaluator:0", "ps:0"]


def _set_dotted(document: dict, key: str, value) -> dict:
    *parents, last = key.split(".")
    node = document
    for parent in parents:
        if not isinstance(node.get(parent), dict):
            node[parent] = {}
        node = node[parent]
    node[last] = value
    return document


def _near_valid(edits) -> dict:
    """config/local.yaml with a few keys set to fuzzed values: past the first checks, into the deeper ones."""
    document = yaml.safe_load(LOCAL_YAML.read_text(encoding="utf-8"))
    for key, task, value in edits:
        _set_dotted(document, key.replace("<task>", task), value)
    return document


near_valid_documents = st.lists(st.tuples(st.sampled_from(KEY_NAMES), st.sampled_from(TASK_NAMES),
                                          values | st.lists(addresses, max_size=3) | addresses),
                                min_size=1, max_size=3).map(_near_valid)


def accepted_or_one_line(action) -> bool:
    """Runs `action`; True when it accepted, False when it rejected in one line. Any other outcome fails."""
    try:
        action()
    except UsageError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
        return False
    return True


def check_yaml_text(text: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as directory:
        path = Path(directory, "cluster.yaml")
        path.write_text(text, encoding="utf-8", errors="surrogateescape")

        def validate():
            config = load_config(path)
            for task in config.cluster.tasks():  # what launch plans for each task before it starts any
                plan_task(config, task, cpu_set=(0, 1))

        return accepted_or_one_line(validate)


def _mutate(text: str, edits) -> str:
    for position, replacement in edits:
        position %= max(1, len(text))
        text = text[:position] + replacement + text[position + 1:]
    return text


@FUZZ
@given(documents)
def test_yaml_documents(document):
    check_yaml_text(yaml.safe_dump(document, allow_unicode=True))


def test_every_key_with_every_edge_value():
    """Each key of the table set to each edge value, in the file and by --set: the search above meets a given
    (key, value) pair about once in a thousand examples, so the pairs are tried here one by one."""
    base, failures = read_yaml(LOCAL_YAML), []

    def validate(data):
        config = config_from_dict(data, str(LOCAL_YAML))
        for task in config.cluster.tasks():
            plan_task(config, task, cpu_set=(0, 1))

    for key in KEY_NAMES:
        for value in EDGES + [[value] for value in EDGES[:8]]:
            # In memory (the files and the YAML text have tests of their own above): the same checks, faster.
            for check in (lambda: validate(_near_valid([(key, "worker:0", value)])),
                          lambda: validate(apply_overrides(base, [f"{key.replace('<task>', 'worker:0')}="
                                                                  f"{json.dumps(value)}"]))):
                try:
                    accepted_or_one_line(check)
                except Exception as exc:  # collected, so that one run names every failing pair
                    failures.append(f"{key}={value!r}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


@FUZZ
@given(near_valid_documents)
def test_yaml_documents_near_a_valid_one(document):
    check_yaml_text(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10 ** 6), st.text(alphabet=":-[]{}#!&*'\"\n 0123456789abc,.", max_size=3)),
                min_size=1, max_size=4))
def test_mutated_yaml_files(edits):
    check_yaml_text(_mutate(LOCAL_YAML.read_text(encoding="utf-8"), edits))


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_as_yaml(text):
    check_yaml_text(text)


overrides = st.builds(lambda key, value: f"{key}={value}",
                      st.sampled_from(KEY_NAMES) | st.sampled_from(["tasks.worker:1.gpus", "tasks.chief:0.cpu_cores",
                                                                    "strategy", "cluster.worker"]) | st.text(max_size=8),
                      st.text(max_size=16) | values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()))


def check_set(sets) -> bool:
    def validate():
        config = load_config(LOCAL_YAML, sets)
        for task in config.cluster.tasks():
            plan_task(config, task, cpu_set=(0, 1))

    return accepted_or_one_line(validate)


@FUZZ
@given(st.lists(overrides | st.text(max_size=12), min_size=1, max_size=3))
def test_set_values(sets):
    check_set(sets)


tf_config_clusters = st.dictionaries(st.sampled_from(ROLES + ("master", "Worker")) | st.text(max_size=5),
                                     st.lists(addresses, max_size=3) | values, max_size=4)
tf_configs = st.fixed_dictionaries({}, optional={
    "cluster": tf_config_clusters | values,
    "task": st.fixed_dictionaries({}, optional={"type": st.sampled_from(ROLES + ("master",)) | values,
                                                "index": st.integers(-2, 4) | values}) | values,
    "environment": st.sampled_from(["cloud", "google"]) | values})
# What an environment variable can hold: no NUL, no lone surrogate.
tf_config_texts = tf_configs.map(json.dumps) | st.text(
    st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=40)


def train_input(tf_config: str, cluster=None, sets=()) -> bool:
    """What `train` does with its input before TensorFlow: (config, task), then the task's plan."""
    args = types.SimpleNamespace(task=None, cluster=cluster, overrides=list(sets), model_dir=None, data_dir=None,
                                 run_dir=tempfile.gettempdir())
    before = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = tf_config
    try:
        def validate():
            commands.resolve(args).spec(cpu_set=(0, 1))

        return accepted_or_one_line(validate)
    finally:
        if before is None:
            del os.environ["TF_CONFIG"]
        else:
            os.environ["TF_CONFIG"] = before


@FUZZ
@given(tf_config_texts)
def test_tf_config_strings(text):
    train_input(text)


@FUZZ
@given(tf_configs.map(json.dumps), st.lists(overrides, max_size=2))
def test_tf_config_with_the_yaml_and_set(text, sets):
    train_input(text, cluster=str(REPO / "config" / "two_workers.yaml"), sets=sets)


def test_read_yaml_is_the_reader_under_test():
    assert isinstance(read_yaml(LOCAL_YAML), dict)  # the fuzzed files go through this reader
