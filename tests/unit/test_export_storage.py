"""Exports and the clean-up after a full disk, on a bucket: the storage layer's moves and removals, saved_model.pb
last in and first out so that no reader (exports_in, Serving) takes half an export."""

from estimator_mnist import storage
from estimator_mnist.model_files import exports
from estimator_mnist.tf_model import export
from estimator_mnist.tf_task.disk_full import remove_partial_writes
from tests import memory_bucket

BASE = "gs://bucket/model/export/latest"


def _written(directory):
    # With the directories' marker objects TensorFlow's gs:// writes ("…/", "…/variables/").
    for name in ("", "variables/", "variables/variables.index", "variables/variables.data-00000-of-00001",
                 "saved_model.pb"):
        storage.write_atomic(f"{directory}/{name}", name.encode())


def test_an_export_on_a_bucket_is_published_with_saved_model_pb_last(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    _written(f"{BASE}/temp-17")
    moved, move = [], bucket.move
    monkeypatch.setattr(bucket, "move", lambda src, dst: (moved.append(storage.basename(src)), move(src, dst)))
    export.publish(f"{BASE}/temp-17", f"{BASE}/17")
    assert moved[-1] == "saved_model.pb" and moved[:-1] == ["variables"]
    assert exports.exports_in(BASE) == [f"{BASE}/17"] and storage.listdir(BASE) == ["17"]


def test_only_exports_with_saved_model_pb_count_and_the_oldest_go(monkeypatch):
    memory_bucket.install(monkeypatch)
    for stamp in (10, 11, 12):
        _written(f"{BASE}/{stamp}")
    storage.write_atomic(f"{BASE}/13/variables/variables.index", b"x")  # on its way: no saved_model.pb yet
    assert exports.exports_in(BASE) == [f"{BASE}/10", f"{BASE}/11", f"{BASE}/12"]
    export.keep_newest(BASE, 2)
    assert storage.listdir(BASE) == ["11", "12", "13"]


def test_a_full_disk_s_partial_writes_are_removed_from_a_bucket_and_listed_checkpoints_kept(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    model_dir = "gs://bucket/model"
    storage.write_atomic(f"{model_dir}/checkpoint", 'model_checkpoint_path: "model.ckpt-20"\n'
                                                    'all_model_checkpoint_paths: "model.ckpt-20"\n')
    for name in ("model.ckpt-20.index", "model.ckpt-30.index", "model.ckpt-30_temp/part-0"):
        storage.write_atomic(f"{model_dir}/{name}", b"x")
    _written(f"{BASE}/temp-18")
    removed = remove_partial_writes(model_dir)
    assert sorted(removed) == [f"{BASE}/temp-18", f"{model_dir}/model.ckpt-30.index",
                               f"{model_dir}/model.ckpt-30_temp"]
    assert sorted(bucket.objects) == [f"{model_dir}/checkpoint", f"{model_dir}/model.ckpt-20.index"]
