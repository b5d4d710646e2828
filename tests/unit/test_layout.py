"""The shape a newcomer relies on: small modules of one job, no programs hidden in strings, no TensorFlow
where input is validated or tasks are launched, and a README that fits on a few screens."""

import ast
import functools
import subprocess
import sys

import pytest

from tests.helpers import REPO

MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 300, 150, 60
TREES = ("estimator_mnist", "tests", "benchmarks")
# The layers, by rule (docs/development.md, "Layout"). TensorFlow is imported only inside these two
# subpackages; tensorflow-datasets only in data preparation.
TF_PACKAGES = ("estimator_mnist.tf_task", "estimator_mnist.tf_model")
TFDS_MODULES = ("estimator_mnist.mnist_data.prepare",)
# Imports between the layers go one way: the training task builds and exports the model with tf_model,
# and nothing below it imports what is above it.
MAY_NOT_IMPORT = {
    "estimator_mnist.tf_model": ("estimator_mnist.tf_task",),
    "estimator_mnist.mnist_data": ("estimator_mnist.tf_task", "estimator_mnist.tf_model"),
}


def python_files():
    return sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py"))


@functools.lru_cache(maxsize=None)  # the import graph's tests and test_timeouts.py read the same trees again
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


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules():
    return {module_name(p): p for p in sorted((REPO / "estimator_mnist").rglob("*.py")) if p.name != "__main__.py"}


def imports_of(path, module_level_only=False):
    """(line, imported module) for every import in the file, at module level or inside a function."""
    tree = parsed(path)
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_tensorflow_is_imported_only_inside_the_tensorflow_subpackages():
    wrong = []
    for name, path in package_modules().items():
        for line, imported in imports_of(path):
            top = imported.split(".")[0]
            if top == "tensorflow_datasets" and name not in TFDS_MODULES:
                wrong.append(f"{name}:{line} imports {imported} (only {', '.join(TFDS_MODULES)} may)")
            elif top == "tensorflow" and not within(name, TF_PACKAGES):
                wrong.append(f"{name}:{line} imports {imported} (only {', '.join(TF_PACKAGES)} may)")
    assert not wrong, "\n".join(wrong)


def test_imports_between_the_layers_go_one_way():
    """Before TensorFlow, a module imports the TF layers only inside a function, except a module of theirs that
    loads no TensorFlow (tf_task/__init__.py: the TensorFlow process's name, which `train`'s parent starts)."""
    free = set(tensorflow_free_modules())
    modules = package_modules()

    def loads_tensorflow(imported: str) -> bool:
        module = imported if imported in modules else imported.rsplit(".", 1)[0]  # from M import NAME
        return within(imported, TF_PACKAGES) and module not in free

    wrong = []
    for name, path in package_modules().items():
        for below, forbidden in MAY_NOT_IMPORT.items():
            if within(name, (below,)):
                wrong += [f"{name}:{line} imports {imported}" for line, imported in imports_of(path)
                          if within(imported, forbidden)]
        if not within(name, TF_PACKAGES):  # before TensorFlow: the TF layers only inside a function, once checked
            wrong += [f"{name}:{line} imports {imported} at module level" for line, imported
                      in imports_of(path, module_level_only=True) if loads_tensorflow(imported)]
    assert not wrong, "\n".join(wrong)


# What a task's TensorFlow process must never read: its TaskSpec holds the whole task (plan/task_spec.py).
CONFIG_READERS = {"read_yaml", "load_config", "config_from_dict", "apply_overrides", "resolve_task"}


def test_the_tensorflow_process_reads_no_yaml_no_argv_and_no_caller_s_tf_config():
    """Inside tf_task, the YAML readers are never imported, sys.argv is never read, and "TF_CONFIG" appears
    only where its entry point sets it from the spec (tf_task/__main__.py, set_tf_config)."""
    wrong = []
    for path in sorted((REPO / "estimator_mnist" / "tf_task").glob("*.py")):
        tree = parsed(path)
        setter = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "set_tf_config"]
        allowed = {id(n) for f in setter for n in ast.walk(f)} if path.name == "__main__.py" else set()
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and CONFIG_READERS & {a.name for a in node.names}:
                wrong.append(f"{where} imports a YAML reader")
            elif isinstance(node, ast.Attribute) and node.attr == "argv":
                wrong.append(f"{where} reads sys.argv")
            elif isinstance(node, ast.Constant) and node.value == "TF_CONFIG" and id(node) not in allowed \
                    and id(node) not in docstrings:
                wrong.append(f"{where} names TF_CONFIG")
    assert not wrong, "\n".join(wrong)


def tensorflow_free_modules():
    """Every module that imports no TensorFlow at module level, by rule: all outside the two subpackages,
    and those inside that import it only in a function (predict's and serve's checks of their input)."""
    free = []
    for name, path in package_modules().items():
        if not within(name, TF_PACKAGES):
            free.append(name)
        elif not any(i.split(".")[0] == "tensorflow" or within(i, TF_PACKAGES) and i != name
                     for _, i in imports_of(path, module_level_only=True)):
            free.append(name)
    return free


def test_validating_and_launching_import_no_tensorflow():
    """One fresh interpreter (this process has TensorFlow loaded already) imports every module that should
    be free of it, then validates the default cluster file."""
    modules = tensorflow_free_modules()
    assert "estimator_mnist.cli" in modules and "estimator_mnist.supervise.launch.launcher" in modules
    result = subprocess.run([sys.executable, "-m", "tests.unit.import_probe", *modules], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "clean", result.stdout + result.stderr[-2000:]


def test_every_package_module_names_its_job():
    missing = [str(p.relative_to(REPO)) for p in (REPO / "estimator_mnist").rglob("*.py")
               if p.name != "__main__.py" and not ast.get_docstring(parsed(p))]
    assert not missing, missing


@pytest.mark.parametrize("name, limit", [("README.md", 250), ("docs/performance.md", 300)])
def test_readme_fits_a_few_screens(name, limit):
    assert (REPO / name).read_text(encoding="utf-8").count("\n") <= limit


def test_code_and_yaml_comments_carry_no_dated_figures():
    """Measurements live in docs/performance.md, made from the benchmarks' results file with their date, commit
    and CPU; a comment points there rather than keep a copy that goes stale."""
    import re

    date = re.compile(r"\b20\d\d-\d\d-\d\d\b")
    paths = [*(REPO / "estimator_mnist").rglob("*.py"), *(REPO / "config").rglob("*.yaml"),
             *(REPO / "scripts").glob("*"), REPO / "run_local.sh"]
    dated = [f"{path.relative_to(REPO)}:{number}" for path in paths if path.is_file()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if date.search(line)]
    assert not dated, "a date in code or YAML; put the figure in docs/performance.md: " + ", ".join(dated)


def test_every_tensorflow_work_around_names_a_test_that_exists():
    import re

    text = (REPO / "estimator_mnist" / "tf_task" / "tf_workarounds.py").read_text(encoding="utf-8")
    cited = re.findall(r"(tests/[\w/]+\.py)::(\w+)", text.replace("\n    ", " "))
    assert len(cited) >= 7, cited
    for path, name in cited:
        assert f"def {name}(" in (REPO / path).read_text(encoding="utf-8"), f"{path}::{name}"
