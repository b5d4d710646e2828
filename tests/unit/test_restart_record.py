"""The restart budget's record (restart_record.py) on a disk and on a bucket: a wrong-typed field is a corrupt
record (issue 54, item 4), kept aside under a name no other kept copy has; a record the storage refuses or
fails to serve is no corrupt record (exit 1 or 200, nothing moved); the preemption mark and the evaluations on a
bucket."""

import errno
import json

import pytest

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import TaskId
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.model_files.preemption_mark import mark_step, take_mark, write_mark
from estimator_mnist.storage.errors import StorageDenied, StorageUnavailable
from estimator_mnist.model_files import budget_record as restart_record
from estimator_mnist.supervise.restart_budget import RestartBudget, check_start
from estimator_mnist.model_files.budget_record import ASIDE, LAST_GOOD, MSG_KEPT_ASIDE, aside_path, check
from estimator_mnist.model_files.layout import BUDGET_FILE, MARK_FILE
from estimator_mnist.model_files import layout
from tests import memory_bucket
from tests.disk_faults import failing_opens, short_storage_bound
from tests.unit.test_restart_budget import CLUSTER, JOB

BUCKET_DIR = "gs://bucket/model"
GOOD = {"job": JOB.key, "starts": 3, "streak": 2, "restored": 10, "incidents": [
    {"number": 1, "time": 1.0, "what": "x"}, {"number": 2, "time": 2.0, "what": "y"}], "preemptions": []}


def _with(**fields):
    return {**GOOD, **fields}


@pytest.mark.parametrize("record, named", [
    (_with(streak="x"), "'streak' is 'x', not an int"),
    (_with(streak=True), "'streak' is True"),
    (_with(starts=2.5), "'starts' is 2.5"),
    (_with(restored="10"), "'restored' is '10', not an int or null"),
    (_with(preemptions={}), "'preemptions' is {}"),
    (_with(incidents=[1]), "'incidents entry' is 1, not an object"),
    (_with(incidents=[{"number": "1", "time": 1.0}]), "'incidents[].number' is '1'"),
    (_with(incidents=[{"number": 1}]), "'incidents[].time' is None"),
    (_with(preemptions=[{"number": 1, "time": "noon"}]), "'preemptions[].time' is 'noon'"),
    (_with(job=None), "'job' is None, not a str"),
])
def test_a_wrong_typed_field_is_a_corrupt_record(record, named):
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        check(record)


def test_a_first_version_record_without_the_newer_fields_is_good():
    assert check({"job": "j", "starts": 1, "incidents": []}) == {"job": "j", "starts": 1, "incidents": []}


@pytest.mark.parametrize("field, value", [("streak", "x"), ("restored", [1]), ("preemptions", "none"),
                                          ("incidents", [{"number": 1, "time": "t"}])])
def test_a_wrong_typed_record_is_kept_aside_and_the_count_goes_on_from_the_last_good_copy(tmp_path, field, value):
    path = tmp_path / BUDGET_FILE
    restart_record.write_record(str(path), GOOD)
    path.write_text(json.dumps(_with(**{field: value})))
    lines = []
    budget = RestartBudget(JOB, 3, str(tmp_path), log=lines.append)
    assert budget.streak == 2 and budget.restored == 10 and len(budget.incidents) == 2
    [aside] = list(tmp_path.glob(BUDGET_FILE + ASIDE + "*"))
    assert json.loads(aside.read_text())[field] == value
    assert len(lines) == 1 and lines[0].startswith(f"the restart budget's record {path} is unreadable (its '{field}")
    assert f"its bytes are kept as {aside};" in lines[0]


def test_two_corruptions_within_one_second_are_both_kept(tmp_path):
    path = tmp_path / BUDGET_FILE
    restart_record.write_record(str(path), GOOD)
    for damage in ("{torn", '{"streak": "x"}'):
        path.write_text(damage)
        restart_record.read_record(str(path), lambda line: None, clock=lambda: 1700000000.5)
    kept = sorted(p.read_text() for p in tmp_path.glob(BUDGET_FILE + ASIDE + "*"))
    assert kept == sorted(["{torn", '{"streak": "x"}'])


def test_aside_names_are_unique_and_tell_the_time_to_the_microsecond():
    names = {aside_path("r.json", clock=lambda: 1700000000.123456) for _ in range(100)}
    assert len(names) == 100 and all(n.startswith("r.json" + ASIDE + "20231114T221320.123456-") for n in names)


def _fail_reads(monkeypatch, path, error):
    short_storage_bound(monkeypatch)
    failing_opens(monkeypatch, path, [error], forever=True)


def test_a_record_the_disk_refuses_is_exit_1_naming_it_and_not_moved(tmp_path, monkeypatch):
    path = tmp_path / BUDGET_FILE
    restart_record.write_record(str(path), GOOD)
    _fail_reads(monkeypatch, str(path), PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermanentFailure, match=f"{path}: the storage refused access"):
        RestartBudget(JOB, 3, str(tmp_path))
    assert path.exists() and not list(tmp_path.glob(BUDGET_FILE + ASIDE + "*"))


def test_a_record_the_disk_fails_to_serve_is_exit_200_and_not_moved(tmp_path, monkeypatch):
    path = tmp_path / BUDGET_FILE
    restart_record.write_record(str(path), GOOD)
    _fail_reads(monkeypatch, str(path), OSError(errno.EIO, "Input/output error"))
    with pytest.raises(RetryableFailure, match=f"{path}: the storage failed to serve it for 1 s .Input/output error"):
        RestartBudget(JOB, 3, str(tmp_path))
    assert path.exists() and not list(tmp_path.glob(BUDGET_FILE + ASIDE + "*"))


def test_the_budget_counts_on_a_bucket(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    chief = TaskId("chief", 0)
    for _ in range(3):
        check_start(chief, CLUSTER, JOB, 3, BUCKET_DIR)
    assert RestartBudget(JOB, 3, BUCKET_DIR).streak == 2
    assert {f"{BUCKET_DIR}/{BUDGET_FILE}", f"{BUCKET_DIR}/{BUDGET_FILE}{LAST_GOOD}"} <= set(bucket.objects)


def test_a_corrupt_record_on_a_bucket_is_kept_aside(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    path = f"{BUCKET_DIR}/{BUDGET_FILE}"
    restart_record.write_record(path, GOOD)
    storage.write_atomic(path, '{"job": "tfjob-team-a-mnist", "starts": "3"}')
    lines = []
    assert RestartBudget(JOB, 3, BUCKET_DIR, log=lines.append).streak == 2
    [aside] = [url for url in bucket.objects if url.startswith(path + ASIDE)]
    assert lines == [MSG_KEPT_ASIDE.format(path=path, problem="its 'starts' is '3', not an int", aside=aside,
                                           good=path + LAST_GOOD)]


@pytest.mark.parametrize("failure, error", [("denied", StorageDenied), ("failing", StorageUnavailable)])
def test_a_record_object_refused_or_not_served_is_named_and_stays(monkeypatch, failure, error):
    bucket = memory_bucket.install(monkeypatch)
    path = f"{BUCKET_DIR}/{BUDGET_FILE}"
    restart_record.write_record(path, GOOD)
    getattr(bucket, failure).add(path) if failure == "denied" else bucket.failing.__setitem__(path, 1)
    with pytest.raises(error, match=path):
        RestartBudget(JOB, 3, BUCKET_DIR)
    assert path in bucket.objects and not any(ASIDE in url for url in bucket.objects)


def test_a_preemption_mark_on_a_bucket_is_written_taken_and_removed(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    assert write_mark(BUCKET_DIR, 30, "chief:0") == f"{BUCKET_DIR}/{MARK_FILE}" and mark_step(BUCKET_DIR) == 30
    assert take_mark(BUCKET_DIR, 30)["step"] == 30 and mark_step(BUCKET_DIR) is None
    write_mark(BUCKET_DIR, 30, "chief:0")
    bucket.denied.add(f"{BUCKET_DIR}/{MARK_FILE}")
    with pytest.raises(StorageDenied):  # never read as "no mark", which would count the stop as a failure
        take_mark(BUCKET_DIR, 30)


def test_evaluations_append_and_read_back_on_a_bucket(monkeypatch):
    memory_bucket.install(monkeypatch)
    path = storage.join(BUCKET_DIR, layout.EVAL_RESULTS_FILE)
    for step in (10, 20):
        storage.append_line(path, json.dumps({"global_step": step, "accuracy": 0.9}))
    assert [r["global_step"] for r in checkpoints.read_eval_results(BUCKET_DIR)] == [10, 20]
    assert checkpoints.final_evaluation(BUCKET_DIR, 20)["global_step"] == 20
