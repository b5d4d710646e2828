"""model_fn in every mode, the global-batch loss, and a short Estimator run on injected data."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from estimator_mnist.tf_task import runner
from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.config.schema import ModelConfig
from estimator_mnist.tf_task.data import input_fn
from estimator_mnist.tf_model.export import export_checkpoint
from estimator_mnist.tf_model.network import build_network
from estimator_mnist.tf_task.model import model_fn
from tests.helpers import record_autograph_conversions, planned
from tests.unit.fakes import dataset_of, fake_mnist, tiny_estimator

ModeKeys = tf.estimator.ModeKeys


def call_model_fn(mode, network="classic_cnn", optimizer="adam"):
    with tf.Graph().as_default():
        features = {"image": tf.random.uniform([8, 28, 28, 1])}
        labels = tf.constant(np.arange(8) % 10, tf.int64) if mode != ModeKeys.PREDICT else None
        tf.compat.v1.train.get_or_create_global_step()
        params = {"config": ModelConfig(network=network, optimizer=optimizer), "batch_size_per_replica": 8,
                  "max_steps": 100}
        return model_fn(features, labels, mode, params)


@pytest.mark.parametrize("network", ["classic_cnn", "tutorial_cnn"])
@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_train_mode(network, optimizer):
    spec = call_model_fn(ModeKeys.TRAIN, network, optimizer)
    assert spec.mode == ModeKeys.TRAIN
    assert spec.train_op is not None
    assert spec.loss.shape == ()


def test_eval_mode():
    spec = call_model_fn(ModeKeys.EVAL)
    assert spec.mode == ModeKeys.EVAL
    assert set(spec.eval_metric_ops) == {"accuracy"}
    assert spec.train_op is None


def test_predict_mode_has_mode_and_serving_signature():
    spec = call_model_fn(ModeKeys.PREDICT)
    assert spec.mode == ModeKeys.PREDICT
    assert set(spec.predictions) == {"class_ids", "probabilities", "logits"}
    assert spec.predictions["probabilities"].shape.as_list() == [8, 10]
    assert "serving_default" in spec.export_outputs


@pytest.mark.parametrize("precision, compute_dtype", [("mixed_bfloat16", tf.bfloat16), ("mixed_float16", tf.float16)])
def test_mixed_precision_computes_in_16_bits_and_keeps_float32_variables(precision, compute_dtype):
    with tf.Graph().as_default() as graph:
        features = {"image": tf.random.uniform([8, 28, 28, 1])}
        labels = tf.constant(np.arange(8) % 10, tf.int64)
        tf.compat.v1.train.get_or_create_global_step()
        params = {"config": ModelConfig(), "batch_size_per_replica": 8, "max_steps": 100, "precision": precision}
        spec = model_fn(features, labels, ModeKeys.TRAIN, params)
        convolutions = [op for op in graph.get_operations() if op.type == "Conv2D"]
        assert convolutions and all(op.get_attr("T") == compute_dtype for op in convolutions)
        trainable = tf.compat.v1.trainable_variables()
        assert trainable and all(v.dtype.base_dtype == tf.float32 for v in trainable)
        assert spec.loss.dtype == tf.float32
        loss_scaled = any("loss_scale" in v.op.name for v in tf.compat.v1.global_variables())
        assert loss_scaled == (precision == "mixed_float16")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            losses = [session.run([spec.loss, spec.train_op])[0] for _ in range(3)]
        assert np.all(np.isfinite(losses))


def _convolution_types(mode, **params):
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.get_or_create_global_step()
        params = {"config": ModelConfig(), "batch_size_per_replica": 8, "max_steps": 100, **params}
        labels = None if mode == ModeKeys.PREDICT else tf.constant(np.arange(8) % 10, tf.int64)
        model_fn({"image": tf.random.uniform([8, 28, 28, 1])}, labels, mode, params)
        return {op.get_attr("T") for op in graph.get_operations() if op.type == "Conv2D"}


def test_prediction_computes_in_float32_whatever_the_training_precision():
    assert _convolution_types(ModeKeys.PREDICT, precision="mixed_bfloat16", eval_precision="mixed_bfloat16") == {
        tf.float32}


@pytest.mark.parametrize("setting, computes_in", [("training", tf.bfloat16), ("float32", tf.float32)])
def test_evaluation_computes_in_what_evaluation_precision_says(setting, computes_in):
    from estimator_mnist.plan.task_plan import plan_task  # pylint: disable=import-outside-toplevel

    config = config_from_dict({"cluster": {"chief": ["localhost:1"]}, "evaluation": {"precision": setting},
                               "model": {"precision": "auto"}}, "test")
    chief = plan_task(config, TaskId("chief", 0), cpu_bfloat16=True, cores=2)
    resolved = chief.with_precision([]).evaluation_precision
    assert resolved == ("mixed_bfloat16" if setting == "training" else "float32")
    assert _convolution_types(ModeKeys.EVAL, precision="mixed_bfloat16", eval_precision=resolved) == {computes_in}
    assert plan_task(config, TaskId("chief", 0), cpu_bfloat16=False, cores=2).with_precision([]).evaluation_precision \
        == "float32"


def test_an_evaluator_told_so_evaluates_in_the_training_precision(tmp_path):
    """With evaluation.precision: training the evaluator task, with its own session config, scores a checkpoint in
    bfloat16, the averages included, and gets float32's loss to within bfloat16's rounding."""
    images, labels = fake_mnist(256)
    results = {}
    for precision in ("float32", "mixed_bfloat16"):
        config = config_from_dict({
            "cluster": {"chief": ["localhost:1"], "evaluator": "localhost"},
            "training": {"batch_size_per_replica": 32, "max_steps": 4, "save_checkpoints_steps": 4},
            "evaluation": {"batch_size": 128, "precision": "training"}, "model_dir": str(tmp_path / "model"),
        }, "test")
        train_spec, eval_spec = runner.train_and_eval_specs(config, make_dataset=lambda split: dataset_of(images, labels))
        if precision == "float32":
            runner.build_estimator(config, planned(config, TaskId("chief", 0))).train(train_spec.input_fn,
                                                                                      max_steps=4)
        evaluator = runner.build_estimator(config, planned(config, TaskId("evaluator", 0), precision))
        assert evaluator.params["eval_precision"] == precision
        results[precision] = evaluator.evaluate(eval_spec.input_fn)
    assert results["mixed_bfloat16"]["global_step"] == 4
    # Not the accuracy: four steps on random images leave near-ties that bfloat16 may break the other way.
    assert results["mixed_bfloat16"]["loss"] == pytest.approx(results["float32"]["loss"], rel=0.01)


def test_dropout_is_a_layer_before_the_logits_only_when_asked_for():
    assert not any(isinstance(layer, tf.keras.layers.Dropout) for layer in build_network("classic_cnn").layers)
    layers = build_network("classic_cnn", dropout=0.4).layers
    assert isinstance(layers[-2], tf.keras.layers.Dropout) and layers[-2].rate == pytest.approx(0.4)


def test_networks_have_the_documented_shapes():
    classic = build_network("classic_cnn")
    classic.build((None, 28, 28, 1))
    assert [w.shape.as_list() for w in classic.trainable_weights if len(w.shape) > 1] == [
        [5, 5, 1, 32], [5, 5, 32, 64], [7 * 7 * 64, 500], [500, 10]]
    tutorial = build_network("tutorial_cnn")
    tutorial.build((None, 28, 28, 1))
    assert [w.shape.as_list() for w in tutorial.trainable_weights if len(w.shape) > 1] == [
        [3, 3, 1, 32], [13 * 13 * 32, 64], [64, 10]]


def _one_sgd_step(tmp_path, name, strategy, batch_size_per_replica, learning_rate=0.5, warm_start_from=None,
                  network="classic_cnn"):
    images, labels = fake_mnist(8)
    model_config = ModelConfig(network=network, optimizer="momentum", momentum=0.0, learning_rate=learning_rate,
                               lr_schedule="constant", dropout=0.0)  # dropout would make the two runs differ at random
    run_config = tf.estimator.RunConfig(model_dir=str(tmp_path / name), train_distribute=strategy, tf_random_seed=7)
    estimator = tf.estimator.Estimator(
        model_fn, config=run_config, warm_start_from=warm_start_from,
        params={"config": model_config, "batch_size_per_replica": batch_size_per_replica, "max_steps": 1})
    estimator.train(functools.partial(input_fn, ModeKeys.TRAIN, data_dir=None, batch_size_per_replica=batch_size_per_replica,
                                      shuffle_buffer=1, make_dataset=lambda split: dataset_of(images, labels)), max_steps=1)
    weights = {n: estimator.get_variable_value(n) for n in estimator.get_variable_names() if n.endswith(("kernel", "bias"))}
    return weights, run_config.model_dir


def test_gradient_is_the_same_for_one_or_two_replicas(tmp_path):
    """One SGD step on a global batch of 8: one replica of 8 == two replicas of 4 (conftest makes 2 CPUs)."""
    # The small network: what is compared is the strategy's gradient, whatever the network (a checkpoint of the
    # default one is 26 MB, and these three runs write and warm-start from them).
    step = functools.partial(_one_sgd_step, tmp_path, network="tutorial_cnn")
    initial, init_dir = step("init", None, 8, learning_rate=0.0)
    start = tf.estimator.WarmStartSettings(init_dir, vars_to_warm_start=".*(kernel|bias)")
    single, _ = step("one", None, 8, warm_start_from=start)
    mirrored = tf.compat.v1.distribute.MirroredStrategy(
        devices=["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert mirrored.num_replicas_in_sync == 2
    double, _ = step("two", mirrored, 4, warm_start_from=start)
    assert single.keys() == double.keys() == initial.keys() and single
    for name in single:
        assert not np.allclose(single[name], initial[name]), f"{name} did not train"
        np.testing.assert_allclose(single[name], double[name], rtol=1e-3, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_short_estimator_run_trains_evaluates_predicts_and_exports(tmp_path, precision):
    images, labels = fake_mnist(256)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"]},
        "model": {"precision": precision},
        "training": {"batch_size_per_replica": 16, "max_steps": 2, "save_checkpoints_steps": 2},
        "evaluation": {"batch_size": 100},
        "model_dir": str(tmp_path / "model"),
    }, "test")
    estimator = runner.build_estimator(config, planned(config, TaskId("chief", 0), precision))

    def make_dataset(split):
        return dataset_of(images, labels) if split == "train" else dataset_of(images[:100], labels[:100])

    train_spec, eval_spec = runner.train_and_eval_specs(config, make_dataset=make_dataset)
    estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps)
    assert estimator.get_variable_value("global_step") == 2

    metrics = estimator.evaluate(eval_spec.input_fn)
    assert metrics["global_step"] == 2
    assert 0.0 <= metrics["accuracy"] <= 1.0

    predictions = list(estimator.predict(eval_spec.input_fn, yield_single_examples=True))
    assert len(predictions) == 100  # the whole eval set, exactly once
    assert predictions[0]["probabilities"].shape == (10,)
    assert predictions[0]["probabilities"].sum() == pytest.approx(1.0, rel=1e-5)

    export_dir = export_checkpoint(config.model, estimator.latest_checkpoint(), str(tmp_path / "export"))
    loaded = tf.saved_model.load(export_dir)
    outputs = loaded.signatures["images"](images=tf.constant(images[:3].astype(np.float32) / 255.0))
    assert outputs["class_ids"].shape == (3,)
    assert outputs["probabilities"].shape == (3, 10)


def test_no_checkpoint_of_the_untrained_weights(tmp_path):
    """A session start saves nothing (tf_workarounds.lean_checkpoint_start); checkpoints carry no .meta."""
    config, estimator, train_spec, _ = tiny_estimator(tmp_path)
    estimator.train(train_spec.input_fn, max_steps=2)
    estimator.train(train_spec.input_fn, max_steps=4)  # a restart: the session starts at step 2
    state = tf.train.get_checkpoint_state(config.model_dir)
    assert [int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths] == [2, 4]
    assert not list((tmp_path / "model").glob("*.meta")) and not (tmp_path / "model" / "graph.pbtxt").exists()


def test_cosine_schedule_decays_to_a_tenth():
    from estimator_mnist.tf_task.model import _learning_rate

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        step = tf.compat.v1.placeholder(tf.int64, [])
        rate = _learning_rate(ModelConfig(learning_rate=0.002, lr_schedule="cosine"), step, 100)
        assert session.run(rate, {step: 0}) == pytest.approx(0.002)
        assert session.run(rate, {step: 100}) == pytest.approx(0.0002)
        assert 0.0002 < session.run(rate, {step: 50}) < 0.002
    assert _learning_rate(ModelConfig(learning_rate=0.002, lr_schedule="constant"), None, 100) == 0.002


def test_warmup_cosine_rises_from_a_tenth_to_the_peak_then_falls_to_zero():
    from estimator_mnist.tf_task.model import _learning_rate

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        step = tf.compat.v1.placeholder(tf.int64, [])
        rate = _learning_rate(ModelConfig(learning_rate=0.002, warmup_steps=10), step, 110)
        rates = [session.run(rate, {step: s}) for s in (0, 5, 10, 60, 110, 120)]
    assert rates[0] == pytest.approx(0.0002) and rates[1] == pytest.approx(0.0011)
    assert rates[2] == pytest.approx(0.002) and rates[3] == pytest.approx(0.001)
    assert rates[4] == pytest.approx(0.0, abs=1e-9) and rates[5] == pytest.approx(0.0, abs=1e-9)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:  # warm-up longer than the run: capped
        rate = _learning_rate(ModelConfig(learning_rate=0.002, warmup_steps=500), tf.constant(0, tf.int64), 4)
        assert session.run(rate) == pytest.approx(0.0002)


def test_the_events_file_gets_the_graph_without_python_protobuf(tmp_path, monkeypatch):
    from estimator_mnist.tf_task.tf_workarounds import lean_events_graph

    lean_events_graph()

    def refuse(*args, **kwargs):
        raise AssertionError("the GraphDef went through pure-Python protobuf")

    monkeypatch.setattr(tf.Graph, "as_graph_def", refuse)
    with tf.Graph().as_default():
        tf.constant(1.0, name="marker")
        tf.compat.v1.summary.FileWriterCache.get(str(tmp_path)).flush()
    graphs = [event.graph_def for path in tmp_path.glob("events.out.tfevents.*")
              for event in tf.compat.v1.train.summary_iterator(str(path)) if event.graph_def]
    assert len(graphs) == 1
    assert "marker" in {node.name for node in tf.compat.v1.GraphDef.FromString(graphs[0]).node}


def test_autograph_leaves_model_fn_alone(monkeypatch):
    converted = record_autograph_conversions(monkeypatch)
    strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with tf.Graph().as_default(), strategy.scope():
        tf.compat.v1.train.get_or_create_global_step()
        params = {"config": ModelConfig(), "batch_size_per_replica": 8, "max_steps": 100}

        def replica_step():
            return model_fn({"image": tf.random.uniform([8, 28, 28, 1])}, tf.zeros([8], tf.int64),
                            ModeKeys.TRAIN, params).loss

        strategy.extended.call_for_each_replica(replica_step)
    assert "replica_step" in converted  # AutoGraph did run, on what it was given
    assert not {"model_fn", "global_batch_loss", "_learning_rate"} & set(converted)
