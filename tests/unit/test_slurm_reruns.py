"""The batch script's reruns (supervise/slurm_reruns.py): each step that exited 200 is one incident of the job's restart
budget, recorded in model_dir under SLURM_JOB_ID; past restart.max_restarts, one line and exit 1."""

import json
import re

from estimator_mnist.config import config_from_dict
from estimator_mnist.supervise.restart_budget import RECORD_FILE
from estimator_mnist.supervise.slurm_reruns import ERR_NO_JOB, ERR_SPENT, main, rerun
from tests.helpers import error_pattern


def config(tmp_path, max_restarts=2):
    return config_from_dict({"cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                             "restart": {"max_restarts": max_restarts}, "model_dir": str(tmp_path / "model"),
                             "run_dir": str(tmp_path / "run")}, "job.yaml")


def test_each_rerun_is_an_incident_until_the_budget_is_used_up(tmp_path):
    environ = {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"}
    outcomes = [rerun(config(tmp_path), environ) for _ in range(3)]
    assert [code for code, _ in outcomes] == [0, 0, 1]
    assert outcomes[1][1].startswith("the step exited 200 (retryable): restart 2/2 of job slurm-77 from the last "
                                     "checkpoint; the record: ")
    line = outcomes[2][1]
    assert re.fullmatch("error: " + error_pattern(ERR_SPENT), line) and "\n" not in line
    assert "job slurm-77 has been restarted 3 times (restart.max_restarts=2): #1 at" in line
    assert f"{tmp_path}/run/logs/slurm-77" in line
    record = json.loads((tmp_path / "model" / RECORD_FILE).read_text())
    assert record["job"] == "slurm-77" and [i["requeues"] for i in record["incidents"]] == [1, 1, 1]


def test_a_job_submitted_again_starts_with_a_fresh_budget(tmp_path):
    for _ in range(3):
        rerun(config(tmp_path), {"SLURM_JOB_ID": "77"})
    code, line = rerun(config(tmp_path), {"SLURM_JOB_ID": "78"})
    assert code == 0 and "restart 1/2 of job slurm-78" in line


def test_without_slurm_s_job_id_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.yaml").write_text("cluster: {chief: ['a:1'], worker: ['b:1']}\n")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    code = main(["--cluster", str(tmp_path / "job.yaml"), "--model-dir", str(tmp_path / "model")])
    assert code == 2 and capsys.readouterr().out == f"estimator-mnist: error: {ERR_NO_JOB}\n"
    assert not (tmp_path / "model" / RECORD_FILE).exists()


def test_a_yaml_broken_since_the_step_started_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "job.yaml").write_text("cluster: {chief: ['a:1'], worker: ['b:1']}\ntraining: {max_step: 5}\n")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    code = main(["--cluster", str(tmp_path / "job.yaml"), "--model-dir", str(tmp_path / "model")])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("estimator-mnist: error: ") and "unknown key 'max_step'" in out, out
    assert out.count("\n") == 1 and not (tmp_path / "model" / RECORD_FILE).exists()
