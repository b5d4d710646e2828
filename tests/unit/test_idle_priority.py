"""What the evaluator's log line says SCHED_IDLE does: the kernel's autogroups decide (plan/cpu.py idle_priority)."""

from estimator_mnist.plan import cpu


def test_without_autogroups_idle_means_only_the_cores_training_leaves(tmp_path):
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("0\n")
    assert cpu.idle_priority(str(switch)) == cpu.IDLE_PRIORITY
    assert cpu.idle_priority(str(tmp_path / "absent")) == cpu.IDLE_PRIORITY  # a kernel without the switch


def test_with_autogroups_idle_says_the_session_shares_the_cores_as_an_equal(tmp_path):
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("1\n")
    said = cpu.idle_priority(str(switch))
    assert said == cpu.IDLE_IN_AUTOGROUP and said.startswith("SCHED_IDLE") and "leaves idle" not in said
