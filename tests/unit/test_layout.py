"""The shape a newcomer relies on: small modules of one job, no programs hidden in strings, no TensorFlow
where input is validated or tasks are launched, and a README that fits on a few screens."""

import ast
import subprocess
import sys

import pytest

from tests.helpers import REPO

MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 300, 150, 60
TREES = ("estimator_mnist", "tests", "benchmarks")
# Everything that validates input or launches tasks: rejected in under a second, without TensorFlow.
TF_FREE = ["estimator_mnist.errors", "estimator_mnist.config", "estimator_mnist.config.schema",
           "estimator_mnist.config.values", "estimator_mnist.config.cluster", "estimator_mnist.config.rules",
           "estimator_mnist.config.overrides", "estimator_mnist.config.load", "estimator_mnist.config.keys",
           "estimator_mnist.topology", "estimator_mnist.hosts", "estimator_mnist.tasklog", "estimator_mnist.task_plan", "estimator_mnist.cpu",
           "estimator_mnist.files", "estimator_mnist.progress", "estimator_mnist.checkpoints", "estimator_mnist.disk_full",
           "estimator_mnist.netns", "estimator_mnist.netns_holder", "estimator_mnist.peers", "estimator_mnist.task_process",
           "estimator_mnist.data_prep", "estimator_mnist.decoded_mnist", "estimator_mnist.splits",
           "estimator_mnist.config.identity", "estimator_mnist.ensemble_selection", "estimator_mnist.ensemble_report", "estimator_mnist.mnist_files", "estimator_mnist.launch",
           "estimator_mnist.predict", "estimator_mnist.run_summary", "estimator_mnist.tf_noise",
           "estimator_mnist.tf_config_env", "estimator_mnist.tfjob", "estimator_mnist.ensemble_plan",
           "estimator_mnist.slurm", "estimator_mnist.slurm.environment", "estimator_mnist.slurm.hostlist",
           "estimator_mnist.slurm.batch_script", "estimator_mnist.slurm.script_body", "estimator_mnist.slurm.progress",
           "estimator_mnist.slurm.reruns",
           "estimator_mnist.sweep", "estimator_mnist.sweep.run", "estimator_mnist.sweep.space", "estimator_mnist.sweep.devices",
           "estimator_mnist.sweep.stopping", "estimator_mnist.sweep.records", "estimator_mnist.sweep.trials",
           "estimator_mnist.sweep.scheduler", "estimator_mnist.sweep.table",
           "estimator_mnist.launch.processes", "estimator_mnist.launch.group", "estimator_mnist.launch.monitor",
           "estimator_mnist.launch.supervisor", "estimator_mnist.launch.restarts", "estimator_mnist.launch.report",
           "estimator_mnist.launch.launcher", "estimator_mnist.commands", "estimator_mnist.cli",
           "estimator_mnist.serve", "estimator_mnist.serve.serving_errors", "estimator_mnist.serve.json_values",
           "estimator_mnist.serve.request_json", "estimator_mnist.serve.response_json",
           "estimator_mnist.serve.versions", "estimator_mnist.serve.batcher", "estimator_mnist.serve.app",
           "estimator_mnist.serve.server"]


def python_files():
    return sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py"))


def parsed(path):
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_modules_classes_and_functions_stay_small():
    too_big = []
    for path in python_files():
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_MODULE_LINES:
            too_big.append(f"{path.relative_to(REPO)}: {lines} lines")
        for node in ast.walk(parsed(path)):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else \
                MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if limit and node.end_lineno - node.lineno + 1 > limit:
                too_big.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: "
                               f"{node.end_lineno - node.lineno + 1} lines (limit {limit})")
    assert not too_big, "\n".join(too_big)


def _is_program(text: str) -> bool:
    """A multi-line string that is Python code with an import: a program hidden where no linter reads it."""
    if text.count("\n") < 2:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree))


def _runs_python_dash_c(node) -> bool:
    """[sys.executable, "-c", ...]: the interpreter handed a program as a string."""
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else []
    return any(isinstance(a, ast.Attribute) and a.attr == "executable" and isinstance(b, ast.Constant)
               and b.value == "-c" for a, b in zip(items, items[1:]))


def test_no_program_lives_inside_a_string():
    found = []
    for path in python_files():
        for node in ast.walk(parsed(path)):
            hidden = isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_program(node.value)
            if hidden or _runs_python_dash_c(node):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "run helper programs as modules (python -m), not from strings: " + ", ".join(found)


def test_validating_and_launching_import_no_tensorflow():
    """One fresh interpreter: this process has TensorFlow loaded already."""
    result = subprocess.run([sys.executable, "-m", "tests.unit.import_probe", *TF_FREE], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "clean", result.stdout + result.stderr[-2000:]


def test_every_package_module_names_its_job():
    missing = [str(p.relative_to(REPO)) for p in (REPO / "estimator_mnist").rglob("*.py")
               if p.name != "__main__.py" and not ast.get_docstring(parsed(p))]
    assert not missing, missing


@pytest.mark.parametrize("name, limit", [("README.md", 250)])
def test_readme_fits_a_few_screens(name, limit):
    assert (REPO / name).read_text(encoding="utf-8").count("\n") <= limit


def test_every_tensorflow_work_around_names_a_test_that_exists():
    import re

    text = (REPO / "estimator_mnist" / "tf_workarounds.py").read_text(encoding="utf-8")
    cited = re.findall(r"(tests/[\w/]+\.py)::(\w+)", text.replace("\n    ", " "))
    assert len(cited) >= 7, cited
    for path, name in cited:
        assert f"def {name}(" in (REPO / path).read_text(encoding="utf-8"), f"{path}::{name}"
