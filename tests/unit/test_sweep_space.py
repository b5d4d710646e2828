"""The sweep's search space and devices: what --param, --samples, --devices, --parallel and --cores-per-trial
give, and one test per refusal (no TensorFlow, no processes)."""

import re

import pytest

from estimator_mnist.errors import UsageError
from estimator_mnist.sweep import devices as dv
from estimator_mnist.sweep import space
from estimator_mnist.sweep.devices import Device, choose_devices, visible_gpus
from estimator_mnist.sweep.space import expand, parse_params
from tests.helpers import error_pattern


def test_the_grid_is_every_combination_in_order_the_last_key_fastest():
    params = parse_params(["model.learning_rate=0.001,0.003", "model.dropout=0.2,0.4", "model.optimizer=adam"])
    assert expand(params, None, 0) == [
        {"model.learning_rate": 0.001, "model.dropout": 0.2, "model.optimizer": "adam"},
        {"model.learning_rate": 0.001, "model.dropout": 0.4, "model.optimizer": "adam"},
        {"model.learning_rate": 0.003, "model.dropout": 0.2, "model.optimizer": "adam"},
        {"model.learning_rate": 0.003, "model.dropout": 0.4, "model.optimizer": "adam"}]


def test_values_are_typed_as_in_the_yaml_and_repeats_are_dropped():
    (param,) = parse_params(["training.batch_size_per_replica=64, 128,64"])
    assert param.values == (64, 128)


def test_samples_are_seeded_reproducible_and_inside_their_ranges():
    params = parse_params(["model.learning_rate=loguniform:0.0001:0.01", "model.dropout=uniform:0.1:0.5",
                           "training.batch_size_per_replica=int:32:256", "model.optimizer=adam,momentum"])
    first, again, other = expand(params, 20, 7), expand(params, 20, 7), expand(params, 20, 8)
    assert first == again and first != other and len(first) == 20
    for values in first:
        assert 0.0001 <= values["model.learning_rate"] <= 0.01
        assert 0.1 <= values["model.dropout"] <= 0.5
        assert isinstance(values["training.batch_size_per_replica"], int)
        assert 32 <= values["training.batch_size_per_replica"] <= 256
        assert values["model.optimizer"] in ("adam", "momentum")


@pytest.mark.parametrize("params, samples, template", [
    ([], None, space.ERR_NO_PARAMS),
    (["model.learning_rate"], None, space.ERR_PARAM_FORMAT),
    (["model.learnin_rate=0.1"], None, space.ERR_PARAM_KEY),
    (["cluster.worker=a:1"], None, space.ERR_PARAM_NOT_SWEPT),
    (["strategy.name=mirrored,one_device"], None, space.ERR_PARAM_NOT_SWEPT),
    (["tasks.all.gpus=[0]"], None, space.ERR_PARAM_NOT_SWEPT),
    (["model_dir=a,b"], None, space.ERR_PARAM_NOT_SWEPT),
    (["model.learning_rate="], None, space.ERR_PARAM_EMPTY),
    (["model.learning_rate=0.1,,0.2"], None, space.ERR_PARAM_EMPTY),
    (["model.learning_rate=-1"], None, "{file}: {key} must be {bound}, got {got!r}"),
    (["model.optimizer=adam,sgd"], None, "{file}: {key} must be one of {choices}, got {got!r}"),
    (["model.learning_rate=[1"], None, space.ERR_PARAM_VALUE),
    (["model.dropout=0.1", "model.dropout=0.2"], None, space.ERR_PARAM_TWICE),
    (["model.dropout=uniform:0.1:0.5"], None, space.ERR_RANGE_NEEDS_SAMPLES),
    (["model.dropout=uniform:0.5:0.1"], 4, space.ERR_RANGE),
    (["model.learning_rate=loguniform:0:0.1"], 4, space.ERR_RANGE),
    (["training.max_steps=int:1.5:9"], 4, space.ERR_RANGE),
    (["model.dropout=uniform:0.1:1.5"], 4, "{file}: {key} must be {bound}, got {got!r}"),
])
def test_bad_params_are_refused_in_one_line(params, samples, template):
    with pytest.raises(UsageError, match=error_pattern(template)) as info:
        expand(parse_params(params), samples, 0)
    assert "\n" not in str(info.value)


def test_the_default_devices_cut_the_cores_into_sets_and_take_every_gpu():
    assert choose_devices(None, None, None, allowed=[0, 1, 2, 3, 4], gpus=[]) == [
        Device("cpu", (i,)) for i in range(5)]
    assert choose_devices(None, 2, None, allowed=[0, 1, 2, 3, 4], gpus=[]) == [
        Device("cpu", (0, 1)), Device("cpu", (2, 3))]
    assert choose_devices(None, None, 1, allowed=[0, 1], gpus=[]) == [Device("cpu", (0,))]
    assert [str(d) for d in choose_devices(None, None, None, allowed=[0, 1], gpus=[0, 1, 2])] == [
        "gpu:0", "gpu:1", "gpu:2"]


def test_given_devices_are_parsed_and_named_back():
    parsed = choose_devices("cpu:0-1,cpu:2+4,cpu:3", None, None, allowed=range(8), gpus=[])
    assert [str(d) for d in parsed] == ["cpu:0-1", "cpu:2+4", "cpu:3"]
    assert choose_devices("gpu:1,gpu:0", None, None, allowed=[0], gpus=[0, 1]) == [Device("gpu", gpu=1),
                                                                                 Device("gpu", gpu=0)]


def test_visible_gpus_follow_cuda_visible_devices_up_to_the_first_invalid_index(tmp_path):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,-1,0"}) == [1]
    (tmp_path / "0000:01:00.0").mkdir()
    (tmp_path / "0000:02:00.0").mkdir()
    assert visible_gpus({}, str(tmp_path)) == [0, 1]
    assert visible_gpus({}, str(tmp_path / "none")) == []


@pytest.mark.parametrize("devices, cores, parallel, template", [
    (None, None, 3, dv.ERR_PARALLEL),
    (None, 3, None, dv.ERR_TOO_FEW_CORES),
    ("cpu:0,gpu:0", None, None, dv.ERR_MIXED),
    ("cpu:0-1,cpu:1", None, None, dv.ERR_OVERLAP),
    ("cpu:7", None, None, dv.ERR_NOT_ALLOWED),
    ("cpu:0-1", 1, None, dv.ERR_CORES_SIZE),
    ("tpu:0", None, None, dv.ERR_DEVICE),
    ("cpu:1-0", None, None, dv.ERR_DEVICE),
    ("gpu:0,gpu:0", None, None, dv.ERR_DUPLICATE_GPU),
    ("cpu:0,cpu:1", None, 3, dv.ERR_PARALLEL),
])
def test_bad_devices_are_refused_in_one_line(devices, cores, parallel, template):
    with pytest.raises(UsageError, match=error_pattern(template)):
        choose_devices(devices, cores, parallel, allowed=[0, 1], gpus=[])


def test_a_range_error_names_an_example():
    with pytest.raises(UsageError, match=re.escape("model.dropout=uniform:0.1:0.5")):
        expand(parse_params(["model.dropout=uniform:0.5:0.1"]), 2, 0)
