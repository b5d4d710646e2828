"""The benchmark results file (benchmarks/results.py) and the tables made from it (benchmarks/results_table.py):
what a line holds, where it goes, and that docs/performance.md shows what the committed file says."""

import json
import sys

import pytest

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))
import results  # noqa: E402  (benchmarks/ is not a package)
import results_table  # noqa: E402
from common import benchmark_parser  # noqa: E402

ZEN4_CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                "model name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
ZEN4 = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "model_name": "AMD EPYC", "kind": "avx512_bf16",
        "cpus": 2}
XEON = {"vendor": "GenuineIntel", "family": None, "model": None, "model_name": "Intel(R) Xeon(R) Processor",
        "kind": "amx", "cpus": 2}


def parser():
    made = benchmark_parser("a benchmark", not_measured=("ddp",))
    made.add_argument("--repeats", type=int, default=3)
    made.add_argument("--isa")
    made.add_argument("--ddp", default="auto")
    made.add_argument("--smoke", action="store_true")
    return made


def line(benchmark="keras_comparison", date="2026-11-25T05:56:08Z", cpu=None, variant="", **figures):
    return {"format": 1, "benchmark": benchmark, "date": date, "commit": "ca9b1d2", "cpu": cpu or ZEN4,
            "variant": variant, "load_average": None, "figures": figures}


def test_a_line_names_the_cpu_by_vendor_family_model_and_kind(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(ZEN4_CPUINFO)
    record = results.make_record("core_sharing", {"together_over_alone": 1.99}, "--seconds 2", "quiet",
                                 cpuinfo_path=str(cpuinfo), now=0)
    assert record["cpu"] | {"cpus": 2} == {"vendor": "AuthenticAMD", "family": 25, "model": 17,
                                           "model_name": "AMD EPYC 9R14", "kind": "avx512_bf16", "cpus": 2}
    assert record["date"] == "1970-01-01T00:00:00Z" and record["format"] == 1
    assert record["benchmark"] == "core_sharing" and record["variant"] == "--seconds 2" and record["note"] == "quiet"
    assert record["figures"] == {"together_over_alone": 1.99}
    assert record["commit"] is None or len(record["commit"].removesuffix("-dirty")) == 7


def test_a_result_line_becomes_numbers_nulls_and_texts():
    assert results.figures_of("RESULT time_to_992=41.408 steps=500 ddp_2w_ratio=none precision=mixed_bfloat16 "
                              "restarts_reported=4/4") == {
        "time_to_992": 41.408, "steps": 500, "ddp_2w_ratio": None, "precision": "mixed_bfloat16",
        "restarts_reported": "4/4"}


def test_the_variant_lists_only_measured_flags_that_differ_from_their_defaults(tmp_path):
    args = parser().parse_args(["--repeats", "0", "--isa", "AVX2", "--ddp", "on", "--note", "x",
                                "--json", str(tmp_path / "f.json"), "--results", str(tmp_path / "r.jsonl")])
    assert args.variant == "--repeats 0 --isa AVX2"
    assert parser().parse_args(["--repeats", "3", "--smoke"]).variant == "--smoke"


def test_the_line_goes_to_results_flag_else_the_environment_else_the_committed_file(tmp_path, monkeypatch):
    assert results.results_path(parser().parse_args(["--results", str(tmp_path / "r")])) == tmp_path / "r"
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "env"))
    assert results.results_path(parser().parse_args([])) == tmp_path / "env"
    assert results.results_path(parser().parse_args(["--no-results"])) is None
    monkeypatch.delenv(results.RESULTS_ENV)
    assert results.results_path(parser().parse_args([])) == REPO / "docs" / "benchmark_results.jsonl"


def test_each_run_appends_one_line_and_no_results_appends_none(benchmark_results, capsys):
    for note in ("first", "second"):
        results.record_run(parser().parse_args(["--isa", "AVX2", "--note", note]), "onednn_kernels",
                           {"trainer_ms_per_step": 55.8})
    assert results.record_run(parser().parse_args(["--no-results"]), "onednn_kernels", {}) is None
    lines = results.read_results(benchmark_results)
    assert [r["note"] for r in lines] == ["first", "second"]
    assert all(r["variant"] == "--isa AVX2" and r["figures"] == {"trainer_ms_per_step": 55.8} for r in lines)
    assert capsys.readouterr().out.count(str(benchmark_results)) == 2


def test_a_line_that_is_not_a_result_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(line()) + "\n\n" + '{"benchmark": "soak"}\n')
    with pytest.raises(ValueError, match="line 3 is not a JSON object with benchmark, date, cpu, figures"):
        results.read_results(path)


def test_the_table_keeps_the_newest_line_per_cpu_and_variant():
    lines = [line(date="2026-11-24T10:50:00Z", time_to_992=39.271, final_accuracy=0.994),
             line(date="2026-11-25T05:56:08Z", time_to_992=41.408, final_accuracy=0.994, steps_at_992=[250, 300]),
             line(date="2026-11-24T14:22:00Z", variant="--isa AVX2", time_to_992=62.124, final_accuracy=0.994),
             line(date="2026-11-23T12:28:00Z", cpu=XEON, time_to_992=32.748, final_accuracy=0.993),
             line(date="2026-11-26T00:00:00Z", fp32_2w_ratio=1.2, final_accuracy=None)]
    rows = results_table.render(results_table.VIEWS[0], lines).splitlines()[2:]
    assert [r.split(" | ")[1] for r in rows] == ["2026-11-23 12:28, ca9b1d2", "2026-11-25 05:56, ca9b1d2",
                                                 "2026-11-24 14:22, ca9b1d2"]
    assert rows[0].startswith("| Intel(R) Xeon(R) Processor, amx, 2 CPUs |")
    assert "| AMD EPYC (family 25 model 17), avx512_bf16, 2 CPUs |" in rows[1] and "| 41.4 | 250, 300 |" in rows[1]
    assert "| `--isa AVX2` |" in rows[2]


def test_the_kind_table_has_a_line_per_cpu_saying_measured_or_carried():
    zen3 = dict(ZEN4, model=1, kind="avx2")
    lines = [line(date="2026-11-25T07:18:00Z", time_to_992=37.9, final_accuracy=0.994, steps_at_992=[250, 250, 300]),
             line(date="2026-11-26T10:10:00Z", time_to_992=24.0, final_accuracy=0.9941, images_at_992=76800,
                  default_max_steps=300),
             line(date="2026-11-26T10:30:00Z", fp32_2w_ratio=1.2, ddp_2w_ratio=1.31, startup_ratio=0.6),
             line(date="2026-11-26T11:00:00Z", variant="--isa AVX2", time_to_992=50.0, fp32_2w_ratio=2.0),
             line(date="2026-11-25T12:00:00Z", cpu=zen3, time_to_992=117.0, steps_at_992=[250, 250, 250],
                  default_max_steps=500)]
    rows = results_table.render_by_kind(lines, today_steps=300).splitlines()[2:]
    assert len(rows) == 2  # the emulation is no CPU kind's line
    zen4 = next(r for r in rows if "model 17" in r).split(" | ")
    assert zen4[1:5] == ["24.0", "76,800", "0.994", "measured 2026-11-26, ca9b1d2"]
    assert zen4[5:9] == ["1.20", "1.31", "0.60", "2026-11-26, ca9b1d2 |"]
    old = next(r for r in rows if "model 1)" in r).split(" | ")
    assert old[1:5] == ["117.0", "128,000", "-", "carried: 2026-11-25, ca9b1d2, the 500-step defaults"]
    assert old[5:] == ["-", "-", "-", "not measured |"]


def test_benchmarks_without_a_view_of_their_own_share_one_table():
    soak = line("soak", minutes=41, accuracy=0.9949, growth=[1, 2])
    soak["figures"]["cpu"] = "avx512_bf16"  # the CPU column says it already
    table = results_table.render(results_table.VIEWS[-1], [soak, line("keras_comparison", time_to_992=1.0)])
    (row,) = table.splitlines()[2:]
    assert row.startswith("| soak | AMD EPYC") and "| minutes=41 accuracy=0.9949 |" in row


def test_rewriting_replaces_each_table_block_and_nothing_else():
    doc = "".join(f"{name} before\n<!-- results_table.py: {name} -->\nold\n<!-- /results_table.py -->\nafter\n"
                  for name in ("default_run", "peers", "by_kind", "other"))
    made = results_table.rewrite(doc, [line(time_to_992=41.408, final_accuracy=0.994)])
    assert "old" not in made and made.count("before\n") == 4 and made.count("after\n") == 4
    assert "| 41.4 |" in made
    assert results_table.rewrite(made, [line(time_to_992=41.408, final_accuracy=0.994)]) == made


@pytest.mark.parametrize("doc, error", [
    ("<!-- results_table.py: default_run -->\n<!-- /results_table.py -->\n", "no block for the table 'peers'"),
    ("<!-- results_table.py: nonsense -->\n<!-- /results_table.py -->\n", "unknown table 'nonsense'")])
def test_a_doc_without_its_blocks_is_refused(doc, error):
    with pytest.raises(ValueError, match=error):
        results_table.rewrite(doc, [])


def test_the_script_refuses_a_bad_results_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "r.jsonl"
    bad.write_text("not json\n")
    assert results_table.main(["--results", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (f"results_table.py: error: {bad}: line 1 is not a JSON object with "
                                               "benchmark, date, cpu, figures: fix or remove it")


@pytest.mark.parametrize("name", results_table.DOCS)
def test_the_docs_show_the_tables_of_the_committed_results_file(name):
    """Regenerate with: .venv/bin/python benchmarks/results_table.py --write"""
    doc = (REPO / "docs" / name).read_text(encoding="utf-8")
    assert results_table.rewrite(doc, results.read_results(results.RESULTS_FILE), name) == doc


def test_the_fault_and_network_benchmarks_figures_are_lines_of_the_results_file():
    names = {record["benchmark"] for record in results.read_results(results.RESULTS_FILE)}
    assert {"fault_campaign", "degraded_network", "fault_injection"} <= names
    for benchmark in ("fault_campaign", "degraded_network"):  # each appends its line as it prints its RESULT
        assert f'record_run(args, "{benchmark}"' in (REPO / "benchmarks" / f"{benchmark}.py").read_text()


def test_a_cell_can_join_several_figures():
    column = results_table.Column(("a", "b"), "a / b", 2)
    assert column.of({"a": 0.5, "b": None}) == "0.50 / -"
