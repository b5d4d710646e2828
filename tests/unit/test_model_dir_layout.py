"""A model_dir's layout known in one place: outside the model_files package and storage/, no module joins a file or
folder name onto a model_dir, none names a model_dir's or a sweep directory's file in a join of its own (their
layouts name each once: model_files/layout.py, sweep/layout.py), and only the modules whose job is a policy about
where a path may live ask which storage holds it (is_bucket, check_url). The rest ask model_files for a record
and hand paths to the storage layer, which answers the same on a disk and a bucket."""

import ast
import re

from estimator_mnist.model_files import layout
from estimator_mnist.sweep import layout as sweep_layout
from tests.helpers import REPO
from tests.unit.test_layout import package_modules, parsed, within

OWNERS = ("estimator_mnist.model_files", "estimator_mnist.storage")
SWEEP_OWNER = "estimator_mnist.sweep.layout"
SCHEME_CALLS = ("is_bucket", "check_url")
# Where which storage a path is on is the module's policy, not storage mechanics: each says why.
POLICY = {
    "estimator_mnist.config.load": "validates each path key: a bucket only where one works, other schemes refused",
    "estimator_mnist.commands": "the preflight: a bucket's credentials checked before any task starts",
    "estimator_mnist.supervise.launch.launcher": "which local directories the launcher makes and checks",
    "estimator_mnist.supervise.private_network": "tasks that reach a bucket need the network a private one cuts",
    "estimator_mnist.kubeflow.pod_storage": "a bucket needs no volume in the pods",
    "estimator_mnist.tf_task.disk_full": "a full disk is a local disk's; a bucket's objects are not measured",
    "estimator_mnist.sweep.records": "--sweep-dir validated: a bucket, or a local path made absolute",
    "estimator_mnist.sweep.run": "a Slurm sweep needs a directory every node mounts, not a bucket",
    "estimator_mnist.supervise.run_summary": "summary RUN_DIR validated: a run directory is local",
    "estimator_mnist.tf_model.predict": "predict --model validated: another scheme refused naming gs://",
    "estimator_mnist.tf_model.serve.server": "serve --model validated: another scheme refused naming gs://",
}


def _names(module) -> set:
    return {value for key, value in vars(module).items() if key.isupper() and isinstance(value, str)}


LAYOUT_NAMES = _names(layout) | _names(sweep_layout)


def _called(node) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _mentions_model_dir(node) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "model_dir" or isinstance(n, ast.Attribute)
               and n.attr == "model_dir" for n in ast.walk(node))


def _is_join(node) -> bool:
    """os.path.join, storage.join, posixpath.join, a bare join: not str.join ("/".join([...]))."""
    return isinstance(node, ast.Call) and _called(node) == "join" and len(node.args) >= 2 \
        and not (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Constant))


def _named(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in LAYOUT_NAMES


def layout_leaks(tree, names_too: bool = True):
    """(line, what) of each join onto a model_dir, each layout name in a join or a Path's `/`, each f-string
    that puts a name after a model_dir."""
    found = []
    for node in ast.walk(tree):
        if _is_join(node):
            if _mentions_model_dir(node.args[0]):
                found.append((node.lineno, "joins a name onto model_dir"))
            elif names_too and any(_named(a) for a in node.args[1:]):
                found.append((node.lineno, "joins a layout's name"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (
                _mentions_model_dir(node.left) or names_too and _named(node.right)):
            found.append((node.lineno, "Path / a layout's name or onto model_dir"))
        elif isinstance(node, ast.JoinedStr):
            parts = node.values
            found += [(node.lineno, "an f-string path under model_dir") for a, b in zip(parts, parts[1:])
                      if isinstance(a, ast.FormattedValue) and _mentions_model_dir(a)
                      and isinstance(b, ast.Constant) and str(b.value).startswith("/")]
    return found


def scheme_questions(tree):
    return [(node.lineno, _called(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _called(node) in SCHEME_CALLS]


def test_no_module_but_model_files_knows_model_dir_s_layout():
    wrong = []
    for name, path in package_modules().items():
        if within(name, OWNERS):
            continue
        names_too = name != SWEEP_OWNER  # the sweep's layout names its own files, and a trial's model/
        wrong += [f"{name}:{line} {what}" for line, what in layout_leaks(parsed(path), names_too)]
    assert not wrong, "ask estimator_mnist.model_files (or sweep/layout.py) for the path:\n" + "\n".join(wrong)


def _names_a_path(target) -> bool:
    return isinstance(target, ast.Name) and re.search(r"(FILE|DIR|SUFFIX)S?$", target.id) is not None


def names_defined(tree):
    """(line, name) of each module-level constant named for a file or folder (X_FILE, X_DIR, X_SUFFIX) whose
    value is a layout's name: a second definition of it."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            target = node.targets[0]
            pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and \
                isinstance(node.value, ast.Tuple) else [(target, node.value)]
            found += [(node.lineno, v.value) for t, v in pairs if _names_a_path(t) and _named(v)]
    return found


def test_each_name_is_defined_once_in_its_layout():
    wrong = [f"{name}:{line} defines {value!r} again" for name, path in package_modules().items()
             if not within(name, ("estimator_mnist.model_files",)) and name != SWEEP_OWNER
             for line, value in names_defined(parsed(path))]
    assert not wrong, "import it from model_files/layout.py or sweep/layout.py:\n" + "\n".join(wrong)


def test_only_policy_asks_which_storage_a_path_is_on():
    wrong = [f"{name}:{line} calls {what}" for name, path in package_modules().items()
             if not within(name, OWNERS) and name not in POLICY
             for line, what in scheme_questions(parsed(path))]
    assert not wrong, "let the storage layer answer for both (or name the policy in POLICY):\n" + "\n".join(wrong)


def test_every_policy_module_still_asks():
    """A module that no longer asks leaves POLICY, so the list stays the policy there is."""
    modules = package_modules()
    idle = [name for name in POLICY if not scheme_questions(parsed(modules[name]))]
    assert not idle, idle


def test_the_checks_see_what_they_look_for():
    tree = ast.parse("storage.join(model_dir, 'x')\nos.path.join(config.model_dir, n)\njoin(base, 'checkpoint')\n"
                     "Path(trial.model_dir) / 'y'\nf'{self.model_dir}/export'\n'/'.join([model_dir, 'a'])\n"
                     "storage.join(run_dir, name)\nif is_bucket(p): check_url(p, 'f', 'k')\n")
    assert [line for line, _ in layout_leaks(tree)] == [1, 2, 3, 4, 5]
    assert scheme_questions(tree) == [(8, "is_bucket"), (8, "check_url")]
    defined = ast.parse("A_FILE, B = 'sweep.json', 'x'\nC_DIR = 'checkpoint'\nD_DIR = ('model', 'x')\n"
                        "DAMAGED, E = 'damaged', 'x'\n")
    assert names_defined(defined) == [(1, "sweep.json"), (2, "checkpoint")]
    assert {"checkpoint", "preempted.json", "restart_budget.json", "sweep.json", "trial.yaml"} <= LAYOUT_NAMES


def test_the_package_root_holds_the_entry_points_and_little_else():
    """What every layer shares lives in its packages (storage/, model_files/); the root keeps the entry points and
    a few modules every layer imports: fewer than the 10 it held before model_files."""
    root = [p.name for p in (REPO / "estimator_mnist").glob("*.py") if not p.name.startswith("__")]
    assert len(root) < 10, sorted(root)
