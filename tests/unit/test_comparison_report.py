"""benchmarks/comparison_report.py's RESULT line: an emulated CPU's figures are marked as such."""

import sys

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))
from comparison_figures import Run  # noqa: E402  (benchmarks/ is not a package)
from comparison_report import more_figures, result_line  # noqa: E402

RUNS = [Run(system, workers, 64, "float32", ips, 4.0, 40.0, 45.0, 0.988)
        for system, workers, ips in (("trainer", 1, 1000.0), ("trainer", 2, 1800.0), ("reference", 2, 1200.0))]
DEFAULTS = [{"time_to_992": 61.3, "precision": "float32", "exit_after_last_step": 4.0, "final_accuracy": 0.9938}]


def test_the_result_line_says_when_onednn_was_held_to_another_isa():
    emulated = result_line(RUNS, DEFAULTS, "AVX2").split()
    assert emulated[-1] == "emulated_isa=AVX2" and "fp32_2w_ratio=1.500" in emulated
    assert "time_to_992=61.300" in emulated
    native = result_line(RUNS, DEFAULTS).split()
    assert native[-1].startswith("cpu=") and not any(f.startswith("emulated_isa=") for f in native)


def test_the_results_file_also_gets_images_per_second_start_up_and_the_steps_and_images_at_992():
    defaults = [dict(DEFAULTS[0], seconds_to_first_step=s, step_at_992=step, max_steps=300,
                     images_at_992=step and step * 512) for s, step in ((4.8, 150), (3.7, None), (4.0, 300))]
    runs = RUNS + [Run("trainer_defaults", 2, 256, "mixed_bfloat16", 4161.0, 4.0, 40.0, 45.0, 0.99)]
    assert more_figures(runs, defaults) == {"trainer_2w_images_per_sec": 1800.0, "defaults_2w_images_per_sec": 4161.0,
                                           "first_step_after_launch": 4.0, "steps_at_992": [150, None, 300],
                                           "images_at_992": 115200.0, "default_max_steps": 300}
