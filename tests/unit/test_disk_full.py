"""A full disk while saving or exporting: one line with the path and the space, the partial files gone."""

import errno
import os
import re

import tensorflow as tf

from estimator_mnist.tf_task.disk_full import ERR_DISK_FULL, disk_full_failure, is_disk_full, remove_partial_writes
from estimator_mnist.errors import PermanentFailure
from tests.helpers import error_pattern

TF_SAVE_ERROR = ("Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call last):\n"
                 "Node: 'save/SaveV2'\n{path}; No space left on device\n\t [[{{{{node save/SaveV2}}}}]]")


def _model_dir(tmp_path):
    """A model_dir after checkpoint 20, an export, and a save of 30 and an export that the disk cut short."""
    model_dir = tmp_path / "model"
    (model_dir / "export" / "latest" / "1700000000").mkdir(parents=True)
    (model_dir / "export" / "latest" / "1700000000" / "saved_model.pb").write_bytes(b"x" * (3 << 19))
    (model_dir / "export" / "latest" / "temp-1700000100" / "variables").mkdir(parents=True)
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n'
                                          'all_model_checkpoint_paths: "model.ckpt-20"\n')
    for name, size in (("model.ckpt-20.index", 1000), ("model.ckpt-20.data-00000-of-00001", 2 << 20),
                       ("model.ckpt-30.index", 10), ("model.ckpt-30.data-00000-of-00001", 5)):
        (model_dir / name).write_bytes(b"x" * size)
    (model_dir / "model.ckpt-30_temp").mkdir()
    return model_dir


def test_what_counts_as_a_full_disk():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(tf.errors.ResourceExhaustedError(None, None, TF_SAVE_ERROR.format(path="/m/x")))
    assert not is_disk_full(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_a_checkpoint_that_did_not_fit_names_its_prefix_and_the_space(tmp_path):
    model_dir = _model_dir(tmp_path)
    tf_path = f"{model_dir}/model.ckpt-30_temp/part-00000-of-00001.data-00000-of-00001.tempstate1778"
    failure = disk_full_failure("chief:0", str(model_dir), tf.errors.ResourceExhaustedError(
        None, None, TF_SAVE_ERROR.format(path=tf_path)))
    assert isinstance(failure, PermanentFailure)
    text = str(failure)
    assert re.fullmatch(error_pattern(ERR_DISK_FULL), text) and "\n" not in text
    assert f"writing the checkpoint {model_dir}/model.ckpt-30: it needs about 2.0 MB free there" in text
    assert f"(newest checkpoint: {model_dir}/model.ckpt-20)" in text
    # The torn checkpoint 30 and the temporary export are gone; checkpoint 20 and the export are kept.
    assert sorted(os.listdir(model_dir)) == ["checkpoint", "export", "model.ckpt-20.data-00000-of-00001",
                                             "model.ckpt-20.index"]
    assert os.listdir(model_dir / "export" / "latest") == ["1700000000"]


def test_an_export_that_did_not_fit_names_the_export_base_and_its_size(tmp_path):
    model_dir = _model_dir(tmp_path)
    tf_path = f"{model_dir}/export/latest/temp-1700000100/variables/variables_temp/part-00000.tempstate1"
    text = str(disk_full_failure("evaluator:0", str(model_dir), tf.errors.ResourceExhaustedError(
        None, None, TF_SAVE_ERROR.format(path=tf_path))))
    assert f"writing an export in {model_dir}/export/latest: it needs about 1.5 MB free there" in text


def test_a_python_write_names_its_file(tmp_path):
    model_dir = _model_dir(tmp_path)
    exc = OSError(errno.ENOSPC, "No space left on device", str(model_dir / "eval_results.jsonl"))
    text = str(disk_full_failure("evaluator:0", str(model_dir), exc))
    assert f"no space left on device writing {model_dir}/eval_results.jsonl: it needs about 2.0 MB" in text


def test_before_the_first_checkpoint_the_space_needed_is_more_than_what_is_free(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    text = str(disk_full_failure("chief:0", str(model_dir), OSError(errno.ENOSPC, "No space left on device")))
    assert "it needs more than " in text and "(newest checkpoint: none)" in text


def test_partial_writes_never_touch_a_listed_checkpoint(tmp_path):
    model_dir = _model_dir(tmp_path)
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-30"\n')
    removed = remove_partial_writes(str(model_dir))
    assert sorted(os.path.basename(p) for p in removed) == ["model.ckpt-30_temp", "temp-1700000100"]
    assert (model_dir / "model.ckpt-30.index").is_file()


def _checkpoint(model_dir, step):
    for suffix in (".index", ".data-00000-of-00001"):
        (model_dir / f"model.ckpt-{step}{suffix}").write_bytes(b"x")


def test_a_listed_step_0_checkpoint_is_kept(tmp_path):
    """`latest_step(...) or -1` took a listed step 0 for no checkpoint, and deleted it as partial."""
    _checkpoint(tmp_path, 0)
    _checkpoint(tmp_path, 10)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-0"\n'
                                         'all_model_checkpoint_paths: "model.ckpt-0"\n')
    assert len(remove_partial_writes(str(tmp_path))) == 2  # checkpoint 10, newer than any listed: partial
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-0.data-00000-of-00001", "model.ckpt-0.index"]


def test_without_a_state_file_no_checkpoint_is_removed(tmp_path):
    _checkpoint(tmp_path, 0)
    _checkpoint(tmp_path, 20)
    (tmp_path / "model.ckpt-30_temp").mkdir()
    remove_partial_writes(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt-0.data-00000-of-00001", "model.ckpt-0.index",
                                            "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]


def test_an_older_checkpoint_the_state_file_no_longer_lists_is_kept(tmp_path):
    """Only what is newer than every listed checkpoint can be a save cut short."""
    for step in (10, 20, 30):
        _checkpoint(tmp_path, step)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-20"\n'
                                         'all_model_checkpoint_paths: "model.ckpt-20"\n')
    removed = remove_partial_writes(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == ["model.ckpt-30.data-00000-of-00001", "model.ckpt-30.index"]
    assert (tmp_path / "model.ckpt-10.index").exists() and (tmp_path / "model.ckpt-20.index").exists()
