"""`estimator-mnist slurm`: the batch script's directives, commands and budget from the YAML; each refusal."""

import subprocess

import pytest

from estimator_mnist import cli
from estimator_mnist.config import load_config
from estimator_mnist.errors import UsageError
from estimator_mnist.slurm.batch_script import SIGNAL_MARGIN_SECS, SbatchOptions, render

PS_YAML = "config/ps_async.yaml"


def script(*flags, file="config/local.yaml", capsys=None):
    args = cli.build_parser().parse_args(["slurm", "--cluster", file, *flags])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_one_slurm_task_per_cluster_task_in_one_killing_step(capsys):
    text = script("--nodes", "2", "--time", "1:00:00", "--partition", "gpu", "--account", "lab",
                  "--cpus-per-task", "2", "--gpus-per-task", "1", "--job-name", "mnist", capsys=capsys)
    for line in ("#SBATCH --ntasks=3", "#SBATCH --nodes=2", "#SBATCH --time=1:00:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=lab", "#SBATCH --cpus-per-task=2", "#SBATCH --gpus-per-task=1",
                 "#SBATCH --job-name=mnist", "#SBATCH --requeue", "#SBATCH --open-mode=append"):
        assert line + "\n" in text
    assert "srun --kill-on-bad-exit=1 --ntasks=3 --distribution=block" in text
    assert " train \"${TRAIN_ARGS[@]}\"" in text and "--cluster /" in text
    assert "rank 0 chief:0, rank 1 evaluator:0, rank 2 worker:0" in text
    assert "must be on storage that every node sees" in text


def test_the_signal_lead_and_the_restart_budget_follow_the_yaml(capsys):
    text = script("--set", "training.preemption_grace_secs=40", "--set", "restart.max_restarts=5", capsys=capsys)
    assert f"#SBATCH --signal=B:TERM@{40 + SIGNAL_MARGIN_SECS}" in text
    # No count of its own: the reruns are counted by the restart budget, which reads the same YAML and --sets.
    assert '-m estimator_mnist.supervise.slurm_job_end "${TRAIN_ARGS[@]}" --signalled "$stop"' in text
    assert "--set training.preemption_grace_secs=40 --set restart.max_restarts=5" in text  # the tasks see them too


def test_the_default_job_name_is_the_yaml_s_and_paths_are_absolute(tmp_path, capsys):
    text = script("--run-dir", "relative/run", capsys=capsys, file=PS_YAML)
    assert "#SBATCH --job-name=ps-async" in text and "#SBATCH --ntasks=4" in text
    assert "RUN_DIR=/" in text and "relative/run" in text


def test_data_is_prepared_on_every_node_unless_shared(capsys):
    each = script(capsys=capsys)
    assert '--ntasks-per-node=1 \\\n  "${EM[@]}" prepare-data --data-dir "$DATA_DIR" || exit $?' in each
    shared = script("--data-shared", capsys=capsys)
    assert '\n"${EM[@]}" prepare-data --data-dir "$DATA_DIR" || exit $?' in shared and "ntasks-per-node" not in shared


def test_further_sbatch_options_pass_through(capsys):
    text = script("--", "--qos=high", "--mail-type=END", capsys=capsys)
    assert "#SBATCH --qos=high\n#SBATCH --mail-type=END\n" in text


def test_the_script_is_valid_bash(tmp_path, capsys):
    path = tmp_path / "job.sh"
    path.write_text(script(capsys=capsys))
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("options, message", [
    (SbatchOptions(nodes=4), "--nodes 4 is more than the cluster's 3 tasks"),
    (SbatchOptions(extra=("--ntasks=2",)), "'--ntasks=2' contradicts the script: use the YAML's cluster"),
    (SbatchOptions(extra=("-n2",)), "'-n2' contradicts the script"),
    (SbatchOptions(extra=("-N", "2")), "'-N' contradicts the script: use --nodes"),
    (SbatchOptions(extra=("--time=5",)), "'--time=5' contradicts the script: use --time"),
    (SbatchOptions(extra=("--signal=B:USR1@60",)), "use training.preemption_grace_secs"),
    (SbatchOptions(extra=("--no-requeue",)), "'--no-requeue' contradicts the script"),
    (SbatchOptions(extra=("qos=high",)), "'qos=high' is not an sbatch option; pass further sbatch options after --"),
])
def test_each_contradiction_is_one_line(options, message):
    with pytest.raises(UsageError, match=message):
        render(load_config("config/local.yaml"), "config/local.yaml", (), options)


def test_a_contradiction_exits_2_with_one_line(capsys):
    assert cli.main(["slurm", "--cluster", "config/local.yaml", "--nodes", "9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nodes 9 is more than the cluster's 3 tasks" in err


def test_a_bucket_model_dir_reaches_every_task_as_the_url(tmp_path):
    """os.path.abspath made gs://bucket/run a folder <cwd>/gs:/bucket/run on every node."""
    from estimator_mnist.config import load_config  # pylint: disable=import-outside-toplevel
    from estimator_mnist.slurm.batch_script import SbatchOptions, render  # pylint: disable=import-outside-toplevel

    path = tmp_path / "c.yaml"
    path.write_text("cluster: {chief: ['localhost:2222'], worker: ['localhost:2223']}\nmodel_dir: gs://bkt/run\n")
    script = render(load_config(str(path)), str(path), [], SbatchOptions())
    assert "--model-dir gs://bkt/run " in script and "gs:/bkt" not in script.replace("gs://bkt", "")
