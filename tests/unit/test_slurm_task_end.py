"""Each task's own word on how it ended in a Slurm step (supervise/slurm_task_end.py), published through model_dir:
asked to stop (then its code), or its own code; no word at all counts as a failure of its own."""

from estimator_mnist.model_files import slurm_records
from estimator_mnist.supervise.slurm_task_end import END_KIND, TaskEnd, failed_by_itself, step_code
from estimator_mnist.supervise.task_parent import TaskParent

ENV = {"SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "1",
       "ESTIMATOR_MNIST_SLURM_ATTEMPT": "0.3"}


def word(tmp_path):
    return slurm_records.read_published(str(tmp_path), "9", END_KIND, 2)


def test_a_task_asked_to_stop_says_so_at_once_then_its_code(tmp_path):
    end = TaskEnd.under_slurm(str(tmp_path), "worker:0", ENV)
    end.asked_to_stop(15)
    assert word(tmp_path)["signal"] == "SIGTERM" and word(tmp_path)["code"] is None  # before a SIGKILL could come
    end.asked_to_stop(2)  # the first signal is the one that counts
    end.ended(200)
    record = word(tmp_path)
    assert (record["step"], record["task"], record["signal"], record["code"]) == ("attempt 0.3", "worker:0",
                                                                                 "SIGTERM", 200)
    assert failed_by_itself(record, "attempt 0.3") is None


def test_a_task_s_own_failure_and_its_silence_are_failures(tmp_path):
    end = TaskEnd.under_slurm(str(tmp_path), "worker:0", ENV)
    end.ended(200)
    assert failed_by_itself(word(tmp_path), "attempt 0.3") == "exited 200 by itself"
    assert failed_by_itself(word(tmp_path), "attempt 0.4").startswith("ended with no word")  # an older step's
    assert failed_by_itself(None, "attempt 0.3").startswith("ended with no word")
    end.ended(0)
    assert failed_by_itself(word(tmp_path), "attempt 0.3") is None


def test_only_tasks_of_an_srun_step_keep_a_word():
    assert TaskEnd.under_slurm("/m", "chief:0", {"SLURM_JOB_ID": "9"}) is None  # the batch shell, or launch
    assert TaskEnd.under_slurm("/m", "chief:0", {}) is None


def test_an_unwritable_model_dir_leaves_no_word_and_no_error(tmp_path):
    (tmp_path / "file").write_text("")
    TaskEnd.under_slurm(str(tmp_path / "file"), "worker:0", ENV).ended(0)  # model_dir is a file: nothing raised


def test_the_task_parent_reports_its_first_stop_signal(tmp_path):
    seen = []
    parent = TaskParent(None, 10, on_stop=seen.append)  # no child yet: the signal is only noted
    parent._on_signal(15, None)  # pylint: disable=protected-access
    parent._on_signal(15, None)  # pylint: disable=protected-access
    assert seen == [15]


def test_under_the_batch_script_a_stop_it_said_exits_0_to_srun_and_the_step_code_comes_from_the_words(tmp_path):
    """srun's --kill-on-bad-exit must not take a stop for a failure (its SIG_TERM_KILL, retried by slurmctld,
    once stopped a requeued run's step): the stop's 200 goes to the record, srun sees 0."""
    end = TaskEnd.under_slurm(str(tmp_path), "worker:0", ENV)
    assert step_code(str(tmp_path), "9", "attempt 0.3", 3) == 0  # no word yet: srun's 0 stands
    end.ended(0)
    assert end.srun_code(0) == 0 and step_code(str(tmp_path), "9", "attempt 0.3", 3) == 0  # done
    end.asked_to_stop(15)
    end.ended(200)
    assert end.srun_code(200) == 0 and word(tmp_path)["code"] == 200
    assert step_code(str(tmp_path), "9", "attempt 0.3", 3) == 200
    assert step_code(str(tmp_path), "9", "attempt 0.4", 3) == 0  # an older step's word counts for nothing
    assert end.srun_code(1) == 1 and end.srun_code(2) == 2  # a failure stays one, for srun to end the others


def test_a_stop_not_asked_for_unsaid_or_outside_the_script_keeps_its_code(tmp_path):
    end = TaskEnd.under_slurm(str(tmp_path), "worker:0", ENV)
    end.ended(200)
    assert end.srun_code(200) == 200  # not asked to stop: a failure of its own, which srun must act on
    by_hand = TaskEnd.under_slurm(str(tmp_path), "worker:0", {k: v for k, v in ENV.items() if "ATTEMPT" not in k})
    by_hand.asked_to_stop(15)
    by_hand.ended(200)
    assert by_hand.srun_code(200) == 200  # `srun train` by hand: nobody reads the record
    (tmp_path / "file").write_text("")
    unsaid = TaskEnd.under_slurm(str(tmp_path / "file"), "worker:0", ENV)
    unsaid.asked_to_stop(15)
    unsaid.ended(200)
    assert unsaid.srun_code(200) == 200  # no record to read its 200 from: srun must see it
