"""cpu.threads_per_core: whether the usable CPUs are cores of their own, from the kernel's topology files."""

from estimator_mnist.plan.cpu import threads_per_core


def fake_sysfs(tmp_path, siblings):
    for cpu, text in siblings.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(text + "\n")
    return str(tmp_path)


def test_two_cores_of_their_own(tmp_path):
    assert threads_per_core([0, 1], fake_sysfs(tmp_path, {0: "0", 1: "1"})) == 1


def test_two_hardware_threads_of_one_core(tmp_path):
    assert threads_per_core([0, 1], fake_sysfs(tmp_path, {0: "0-1", 1: "0-1"})) == 2


def test_only_the_usable_cpus_count(tmp_path):
    """A trial pinned to cpu 0 and 2 of a machine whose cores are 0,1 and 2,3 has one thread per core."""
    sysfs = fake_sysfs(tmp_path, {0: "0,1", 2: "2-3"})
    assert threads_per_core([0, 2], sysfs) == 1 and threads_per_core([0], sysfs) == 1


def test_unknown_without_the_topology_files(tmp_path):
    assert threads_per_core([0, 1], str(tmp_path)) is None
