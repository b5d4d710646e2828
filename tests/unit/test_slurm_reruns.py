"""The batch script's reruns (supervise/slurm_reruns.py): a step that exited 200 is an incident of the job's restart
budget when any task failed by itself (by the tasks' own words, supervise/slurm_task_end.py), else none, whatever
the chief marked; recorded in model_dir under SLURM_JOB_ID; past restart.max_restarts failures in a row without a
newer checkpoint, one line and exit 1."""

import json
import re

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.model_files.preemption_mark import write_mark
from estimator_mnist.supervise.restart_budget import check_start, job_of
from estimator_mnist.model_files.budget_record import LAST_GOOD
from estimator_mnist.supervise.slurm_job_end import main
from estimator_mnist.supervise.slurm_reruns import ERR_NO_JOB, ERR_SPENT, rerun
from estimator_mnist.supervise.slurm_task_end import TaskEnd
from estimator_mnist.model_files.layout import BUDGET_FILE, MARK_FILE
from tests.helpers import error_pattern


def config(tmp_path, max_restarts=2):
    return config_from_dict({"cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                             "restart": {"max_restarts": max_restarts}, "model_dir": str(tmp_path / "model"),
                             "run_dir": str(tmp_path / "run")}, "job.yaml")


def checkpoint(tmp_path, step):
    """The state file as Estimator writes it, and the index file latest_checkpoint looks for."""
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / f"model.ckpt-{step}.index").write_bytes(b"x")
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')


def step_ended(tmp_path, environ, chief, worker):
    """Each task's word for the step of `environ`: "stopped" (asked to, then 200), an exit code of its own, or None
    (no word: killed by a signal it was not sent)."""
    for rank, (word, task) in enumerate(((chief, "chief:0"), (worker, "worker:0"))):
        if word is None:
            continue
        end = TaskEnd(str(tmp_path / "model"), environ["SLURM_JOB_ID"], rank, f"attempt {environ['ATTEMPT']}", task)
        if word == "stopped":
            end.asked_to_stop(15)
            word = 200
        end.ended(word)


def failed(tmp_path, environ, attempt, chief="stopped", worker=None):
    """A step in which the worker failed by itself (no word) and srun stopped the chief."""
    environ.update(ATTEMPT=str(attempt), ESTIMATOR_MNIST_SLURM_ATTEMPT=str(attempt))
    step_ended(tmp_path, environ, chief, worker)
    return rerun(config(tmp_path), environ)


def stopped(tmp_path, environ, attempt):
    """A step whose every task was asked to stop (scancel --signal=TERM, a preemption)."""
    return failed(tmp_path, environ, attempt, "stopped", "stopped")


def test_each_rerun_without_progress_is_an_incident_until_the_budget_is_used_up(tmp_path):
    environ = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"}
    outcomes = [failed(tmp_path, environ, attempt) for attempt in range(3)]
    assert [code for code, _ in outcomes] == [0, 0, 1]
    assert outcomes[1][1].startswith("the step exited 200 (retryable): restart 2/2 of job slurm-77 (worker:0 (rank 1) "
                                     "ended with no word: killed by a signal it was not asked to stop with, or never "
                                     "started; no newer checkpoint since the previous start;")
    line = outcomes[2][1]
    assert re.fullmatch("error: " + error_pattern(ERR_SPENT), line) and "\n" not in line
    assert "job slurm-77 failed 3 times in a row without a newer checkpoint (restart.max_restarts=2): #1 at" in line
    assert f"{tmp_path}/run/logs/slurm-77" in line
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert record["job"] == "slurm-77" and [i["requeues"] for i in record["incidents"]] == [1, 1, 1]


def test_a_preempted_step_is_no_incident_and_progress_begins_the_count_again(tmp_path):
    environ = {"SLURM_JOB_ID": "79"}
    for step in (10, 20, 30, 40, 50):  # five preemptions, each after progress: the step saved, the mark left
        checkpoint(tmp_path, step)
        write_mark(str(tmp_path / "model"), step, "chief:0")
        code, line = stopped(tmp_path, environ, step)
        assert code == 0 and f"resumes after preemption {step // 10} (preempted at step {step}: not counted)" in line
    for step in (60, 70):  # failures, each after progress: never more than 1 in a row
        checkpoint(tmp_path, step)
        assert failed(tmp_path, environ, step)[0] == 0
        check_start(TaskId("chief", 0), config(tmp_path).cluster, job_of(environ, None), 2,
                    str(tmp_path / "model"), step)  # the writer's start notes what it restores
    # Then the fault repeats without progress: the failure at 70 was its first (restart 1), one more restart
    # (2 in a row), and the third failure in a row ends the job.
    assert [failed(tmp_path, environ, 100 + n)[0] for n in range(2)] == [0, 1]
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert len(record["preemptions"]) == 5 and [i["in_a_row"] for i in record["incidents"]] == [1, 1, 2, 3]


def test_a_step_whose_every_task_was_asked_to_stop_is_no_incident_even_before_a_checkpoint(tmp_path):
    environ = {"SLURM_JOB_ID": "83"}
    for attempt in range(5):  # more than restart.max_restarts: none counts
        code, line = stopped(tmp_path, environ, attempt)
        assert code == 0 and "every task asked to stop" in line and f"preemption {attempt + 1}" in line
    assert json.loads((tmp_path / "model" / BUDGET_FILE).read_text())["incidents"] == []


def test_a_failure_s_peers_stopped_by_srun_are_no_preemption_even_with_the_chief_s_mark(tmp_path):
    """--kill-on-bad-exit: the worker exits 200 by itself, srun sends SIGTERM to the chief, which saves its stop
    step and marks a preemption: one incident, and the mark is dropped."""
    environ = {"SLURM_JOB_ID": "84"}
    checkpoint(tmp_path, 10)
    write_mark(str(tmp_path / "model"), 10, "chief:0")
    code, line = failed(tmp_path, environ, 0, worker=200)
    assert code == 0 and "restart 1/2 of job slurm-84 (worker:0 (rank 1) exited 200 by itself;" in line
    assert not (tmp_path / "model" / MARK_FILE).exists()
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert record["preemptions"] == [] and len(record["incidents"]) == 1


def test_a_word_from_an_earlier_step_is_no_word(tmp_path):
    """The worker said it was asked to stop in step 0, and left no word in step 1: it failed by itself in step 1."""
    environ = {"SLURM_JOB_ID": "85"}
    assert stopped(tmp_path, environ, 0)[0] == 0
    environ.update(ATTEMPT="1", ESTIMATOR_MNIST_SLURM_ATTEMPT="1")
    step_ended(tmp_path, environ, "stopped", None)
    assert "restart 1/2 of job slurm-85 (worker:0 (rank 1) ended with no word" in rerun(config(tmp_path), environ)[1]


def test_steps_whose_writer_dies_before_counting_still_end_the_job(tmp_path):
    """The rerun notes what the next step restores: a task killed before its own start is counted (found by the
    real Slurm test: each such failure looked like progress since the last start that got that far)."""
    environ = {"SLURM_JOB_ID": "82"}
    checkpoint(tmp_path, 10)
    check_start(TaskId("chief", 0), config(tmp_path).cluster, job_of(environ, None), 2, str(tmp_path / "model"), 10)
    checkpoint(tmp_path, 20)
    write_mark(str(tmp_path / "model"), 20, "chief:0")
    assert stopped(tmp_path, environ, 0)[0] == 0  # preempted at 20, after progress
    assert [failed(tmp_path, environ, n, chief=None)[0] for n in range(1, 4)] == [0, 0, 1]  # no writer start


def test_a_stale_mark_does_not_hide_a_failure(tmp_path):
    """The mark of step 10, with training past it since: the 200 is a failure (and the mark is gone)."""
    checkpoint(tmp_path, 20)
    write_mark(str(tmp_path / "model"), 10, "chief:0")
    code, line = rerun(config(tmp_path), {"SLURM_JOB_ID": "80"})
    assert code == 0 and "restart 1/2 of job slurm-80" in line
    assert not (tmp_path / "model" / MARK_FILE).exists()


def test_both_copies_of_the_record_unreadable_end_the_job_with_1(tmp_path):
    (tmp_path / "model").mkdir()
    for name in (BUDGET_FILE, BUDGET_FILE + LAST_GOOD):
        (tmp_path / "model" / name).write_text("{torn")
    code, line = rerun(config(tmp_path), {"SLURM_JOB_ID": "81"})
    assert code == 1 and line.startswith("error: the restart budget's record ") and "delete both files" in line


def test_a_job_submitted_again_starts_with_a_fresh_budget(tmp_path):
    for _ in range(3):
        rerun(config(tmp_path), {"SLURM_JOB_ID": "77"})
    code, line = rerun(config(tmp_path), {"SLURM_JOB_ID": "78"})
    assert code == 0 and "restart 1/2 of job slurm-78" in line


def test_without_slurm_s_job_id_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.yaml").write_text("cluster: {chief: ['a:1'], worker: ['b:1']}\n")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    main(["--cluster", str(tmp_path / "job.yaml"), "--model-dir", str(tmp_path / "model")])
    assert capsys.readouterr().out == f"estimator-mnist: error: {ERR_NO_JOB}\nexit 2\n"
    assert not (tmp_path / "model" / BUDGET_FILE).exists()


def test_a_yaml_broken_since_the_step_started_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.yaml").write_text("cluster: {chief: ['a:1'], worker: ['b:1']}\ntraining: {max_step: 5}\n")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    main(["--cluster", str(tmp_path / "job.yaml"), "--model-dir", str(tmp_path / "model")])
    out = capsys.readouterr().out
    assert out.startswith("estimator-mnist: error: ") and "unknown key 'max_step'" in out, out
    assert out.endswith("\nexit 2\n") and out.count("\n") == 2 and not (tmp_path / "model" / BUDGET_FILE).exists()
