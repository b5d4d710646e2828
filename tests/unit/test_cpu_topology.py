"""The CPU facts benchmarks name beside their figures (benchmarks/cpu_facts.py): the CPU's kind and model, whether
TensorFlow turns oneDNN on by itself, and whether the usable CPUs are cores of their own (the kernel's topology
files)."""

import sys

import pytest

from estimator_mnist.plan import cpu
from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))
import cpu_facts  # noqa: E402  (benchmarks/ is not a package)
from cpu_facts import cpu_kind, cpu_model, threads_per_core  # noqa: E402


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


@pytest.mark.parametrize("flags, kind", [("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "amx"),
                                         ("fpu avx2 avx512f avx512_bf16", "avx512_bf16"),
                                         ("fpu avx2 avx512f", "avx512"), ("fpu avx2 fma", "avx2"), ("fpu sse2", "other")])
def test_cpu_kind_names_the_widest_instructions(tmp_path, flags, kind):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC 7R13 Processor\nflags\t\t: {flags}\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_kind(str(path)) == kind
    assert cpu_model(str(path)) == "AMD EPYC 7R13 Processor"


@pytest.mark.parametrize("flags, on", [("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", True),  # Xeon with AMX
                                       ("fpu avx2 avx512f avx512_vnni avx512_bf16", True),  # Zen 4
                                       ("fpu avx2 avx512f avx512_vnni", True), ("fpu avx2 avx_vnni", True),
                                       ("fpu avx2 fma", False),  # AVX2-only EPYC: TF 2.15 falls back to Eigen
                                       ("fpu avx2 avx512f", False)])
def test_tf_turns_onednn_on_by_itself_only_on_cpus_with_vnni_bf16_or_amx(tmp_path, flags, on, monkeypatch):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n")
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    assert cpu_facts.tf_onednn_by_default(str(path)) is on
    monkeypatch.setattr(cpu.platform, "machine", lambda: "aarch64")
    assert not cpu.is_x86() and not cpu_facts.tf_onednn_by_default(str(path))
