"""Commands that take a model or run directory, given a gs:// URL (the memory bucket stands in for the storage
layer's client: no test here contacts an address, and none reads the bucket with TensorFlow): predict finds the
newest export in a bucket, summary finds a bucket model_dir and its records, tf-config takes a bucket model_dir;
prepare-data refuses a bucket data_dir, and every other scheme is one line naming gs://."""

import json
import os

import pytest

from estimator_mnist import cli, storage
from estimator_mnist.config.load import LOCAL_ONLY
from estimator_mnist.errors import UsageError
from estimator_mnist.storage.urls import ERR_LOCAL_ONLY, ERR_SCHEME
from estimator_mnist.supervise.run_summary import ERR_NOT_A_RUN, locate
from estimator_mnist.tf_model.predict import ERR_NO_EXPORT, find_export
from tests import memory_bucket
from tests.unit.test_tfjob import pattern

MODEL = "gs://bk1/runs/mnist"


@pytest.fixture
def bucket(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return memory_bucket.install(monkeypatch)


def put(bucket, url, data=b"x"):
    bucket.write_atomic(url, data)


def exports(bucket):
    for name in ("100", "200", "250-temp", "300"):  # 300: its saved_model.pb not copied yet (TF's rename)
        put(bucket, f"{MODEL}/export/latest/{name}/variables/variables.index")
        if name in ("100", "200", "250-temp"):
            put(bucket, f"{MODEL}/export/latest/{name}/saved_model.pb")


def test_predict_takes_the_newest_finished_export_of_a_bucket_model_dir(bucket):
    exports(bucket)
    assert find_export(MODEL) == f"{MODEL}/export/latest/200"
    assert find_export(MODEL + "/") == f"{MODEL}/export/latest/200"


def test_predict_takes_an_export_in_a_bucket_as_it_is(bucket):
    exports(bucket)
    assert find_export(f"{MODEL}/export/latest/100") == f"{MODEL}/export/latest/100"


def test_predict_follows_a_local_run_directory_to_its_bucket_model_dir(bucket, tmp_path):
    exports(bucket)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_summary.json").write_text(json.dumps({"model_dir": MODEL, "run_dir": str(run)}))
    assert find_export(str(run)) == f"{MODEL}/export/latest/200"
    assert not list(tmp_path.glob("gs:*")) and not (tmp_path / "bk1").exists()


def test_predict_of_a_bucket_without_an_export_is_one_line(bucket):
    with pytest.raises(UsageError, match=pattern(ERR_NO_EXPORT)):
        find_export(MODEL)


def test_predict_refuses_another_scheme_naming_gs(bucket, capsys):
    assert cli.main(["predict", "--model", "s3://bk1/model", "digit.png"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(ERR_SCHEME.format(file="predict", key="--model", path="s3://bk1/model", scheme="s3"))


def test_summary_finds_a_bucket_model_dir_and_its_progress_records_there(bucket):
    put(bucket, f"{MODEL}/eval_results.jsonl", b'{"global_step": 10, "accuracy": 0.9}\n')
    put(bucket, f"{MODEL}/progress/worker-0.json", b"{}")
    launched, model_dir, records_dir = locate(MODEL)
    assert (launched, model_dir, records_dir) == ({}, MODEL, MODEL)


def test_summary_follows_a_local_run_directory_to_its_bucket_model_dir(bucket, tmp_path):
    put(bucket, f"{MODEL}/checkpoint", b'model_checkpoint_path: "model.ckpt-10"\n')
    (tmp_path / "run_summary.json").write_text(json.dumps({"model_dir": MODEL, "run_dir": str(tmp_path)}))
    launched, model_dir, records_dir = locate(str(tmp_path))
    assert model_dir == MODEL and launched["run_dir"] == str(tmp_path)
    assert records_dir is None  # no progress records in the bucket yet
    assert sorted(os.listdir(tmp_path)) == ["run_summary.json"]


def test_summary_of_a_bucket_path_that_holds_no_run_is_one_line(bucket):
    with pytest.raises(UsageError, match=pattern(ERR_NOT_A_RUN)):
        locate(MODEL)


def test_summary_refuses_another_scheme_naming_gs(bucket, capsys):
    assert cli.main(["summary", "hdfs://namenode/runs/mnist"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "RUN_DIR 'hdfs://namenode/runs/mnist' is a hdfs:// URL" in line and "gs://BUCKET/PATH" in line


def test_tf_config_takes_a_bucket_model_dir_without_contacting_it(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(storage, "check_bucket", lambda path: pytest.fail("tf-config contacted the storage"))
    (tmp_path / "c.yaml").write_text("cluster: {chief: ['localhost:2222'], worker: ['localhost:2223']}\n"
                                     f"model_dir: {MODEL}\n")
    assert cli.main(["tf-config", "--cluster", "c.yaml", "--task", "worker:0"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == {"type": "worker", "index": 0}
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"] and bucket.objects == {}


def test_prepare_data_refuses_a_bucket_data_dir_naming_why(bucket, tmp_path, capsys):
    assert cli.main(["prepare-data", "--data-dir", "gs://bk1/mnist"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(ERR_LOCAL_ONLY.format(file="--data-dir", key="data_dir", path="gs://bk1/mnist",
                                               why=LOCAL_ONLY["data_dir"]))
    assert sorted(os.listdir(tmp_path)) == [] and bucket.objects == {}
