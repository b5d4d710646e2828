"""The table of every bound on a wait (config/timeouts.py): complete for the config keys and for the numbers in the
code, each row enforced where it says, one watcher per situation, and docs/timeouts.md generated from it."""

import ast
import re
from pathlib import Path

import pytest

from estimator_mnist.config import load_config
from estimator_mnist.config.keys import all_keys
from estimator_mnist.config.timeouts import LAUNCH, NOT_BOUNDS, PARENT_ALONE, TIMEOUTS, bounds_named
from estimator_mnist.config.timeouts_text import describe_timeouts, timeouts_markdown
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.storage import bounds as storage_bounds
from estimator_mnist.plan.task_spec import TaskSpec
from estimator_mnist.supervise.task_parent import TaskParent, stopped_child_limit
from tests.unit.test_layout import parsed

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "estimator_mnist"
# A name that says it bounds time.
TIMED = re.compile(r"(secs|_ms|timeout|grace|deadline|seconds)$|timeout", re.IGNORECASE)
# Numbers in the code under such names that bound no wait: nothing fires when they pass. (module, name): why.
NOT_BOUNDS_IN_CODE = {
    ("model_files/checkpoints.py", "poll_secs"): "how often the final evaluation is looked for",
    ("storage/local.py", "FIRST_RETRY_SECS"): "the first pause before a failing disk is asked again",
    ("storage/gcs_retry.py", "LAST_SLEEP_SECS"): "below it, a bucket retry's last pause is not cut to the time left",
    ("model_files/progress.py", "WRITE_EVERY_SECS"): "how often a progress record is written",
    ("model_files/progress.py", "FRESH_SECS"): "how recent a record must be for its rate to count",
    ("supervise/child_stderr.py", "PARTIAL_LINE_SECS"): "when a partial line is passed on",
    ("supervise/launch/monitor.py", "RATE_WINDOW_SECS"): "the window of the step rate",
    ("supervise/launch/report.py", "PROGRESS_EVERY_SECS"): "the rhythm of launch's progress lines",
    ("supervise/launch/report.py", "WAITING_EVERY_SECS"): "the rhythm of launch's waiting lines",
    ("supervise/launch/supervisor.py", "POLL_SECS"): "how often launch looks at its tasks",
    ("supervise/slurm_step.py", "POLL_SECS"): "how often a Slurm step is looked at",
    ("plan/slurm_ports.py", "POLL_SECS"): "how often a Slurm step's tasks look for their peers' ports",
    ("supervise/task_parent.py", "REPEAT_SECS"): "a second SIGTERM within it is the same request",
    ("supervise/task_parent.py", "GATE_POLL_SECS"): "how often the evaluator's start gate is looked at",
    ("supervise/task_parent.py", "POLL_SECS"): "how often train's parent looks at its TensorFlow process",
    ("frozen_time.py", "FROZEN_GAP_SECS"): "how late a poll tells a process stopped from a slow one: no bound",
    ("sweep/scheduler.py", "POLL_SECS"): "how often the sweep looks at its trials",
    ("tf_model/serve/server.py", "TRIM_SECS"): "how often serve hands freed memory back to the system",
    ("tf_model/serve/fair_queue.py", "SMALL_RECENT_SECS"): "how recent a small request keeps calls small",
    ("sweep/scheduler.py", "SAVE_EVERY_SECS"): "how often sweep.json is written",
    ("sweep/table.py", "TABLE_EVERY_SECS"): "the rhythm of the sweep's table",
    ("sweep/table.py", "LINE_EVERY_SECS"): "the rhythm of the sweep's lines in a log",
    ("tf_model/serve/batcher.py", "TIMEOUT_SECS"): "serve --batch-timeout-ms's default: a batching window",
    ("tf_model/serve/versions.py", "POLL_SECS"): "how often serve looks for a newer export",
    ("tf_task/evaluator.py", "EVAL_POLL_SECS"): "how often the evaluator looks for a checkpoint",
    ("tf_task/ps_preemption.py", "POLL_SECS"): "how often a ps task after SIGTERM looks whether the trainers left",
    ("tf_task/hooks.py", "delay_secs"): "tasks.<task>.step_delay_ms, a rehearsal",
    ("tf_task/preemption.py", "REPEAT_SECS"): "a second SIGTERM within it is the same request",
    ("tf_task/ps_done.py", "DEQUEUE_TIMEOUT_MS"): "how often a ps task looks at its done queue",
    ("tf_task/ps_done.py", "timeout_ms"): "0: a ps-only session without a limit of its own",
    ("tf_task/ps_done.py", "check_every_secs"): "how often a ps task probes its trainers",
    ("tf_task/ps_done.py", "timeout"): "one connection attempt of that probe; ps_idle_timeout_secs is the bound",
    ("tf_task/teardown.py", "poll_secs"): "how often the teardown watchdog looks for the final checkpoint",
    ("tf_task/tf_workarounds.py", "READY_POLL_SECS"): "how often a chief's readiness is looked at",
    ("storage/lease.py", "POLL_SECS"): "how often a held lease is looked at again",
    ("storage/local.py", "LISTING_PAUSE_SECS"): "the pause between two listings (VERSIONED_READ_SECS bounds them)",
    ("storage/bounds.py", "LOCK_MARGIN_SECS"): "the gap between LOCK_HOLD_SECS and LOCK_STALE_SECS, both bounds",
    ("storage/bounds.py", "LOCK_HEARTBEAT_SECS"): "how often a holder renews its lease (LOCK_STALE_SECS bounds)",
    ("sweep/array_task.py", "POLL_SECS"): "how often a Slurm sweep's array task looks at its trial",
    ("sweep/array_task.py", "PROGRESS_SECS"): "the rhythm of the array task's progress lines",
    ("tf_model/serve/lifecycle.py", "delay_secs"): "0: no drain, for a Lifecycle built without serve's flags",
    ("tf_model/serve/lifecycle.py", "drain_secs"): "0: no drain, for a Lifecycle built without serve's flags",
    ("serve_flags.py", "SWITCH_INTERVAL_MS"): "the GIL's switch interval: how often Python threads take turns",
    ("tf_model/serve/http_server.py", "SWEEP_SECS"): "how often serve looks for REST requests still arriving",
    ("tf_model/serve/grpc_api.py", "REFUSAL_DELAY_SECS"): "a refusal held back, within the request's deadline",
}


def _number(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _defaults(function):
    args = function.args
    positional = args.posonlyargs + args.args
    yield from zip(positional[len(positional) - len(args.defaults):], args.defaults)
    yield from ((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)


def timed_numbers(tree):
    """(name, value) of every number the code binds to a timed name: an assignment, a keyword, a default."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets if not isinstance(t, ast.Tuple)] + [
                pair for t in node.targets if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                for pair in zip(t.elts, node.value.elts)]  # A, B_SECS = 3, 2.0
            for target, value in pairs:
                name = getattr(target, "id", None) or getattr(target, "attr", None)
                if name and TIMED.search(name) and _number(value):
                    yield name, value.value
        elif isinstance(node, ast.Call):
            yield from ((k.arg, k.value.value) for k in node.keywords if k.arg and TIMED.search(k.arg)
                        and _number(k.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from ((a.arg, d.value) for a, d in _defaults(node) if TIMED.search(a.arg) and _number(d))


def test_every_number_that_bounds_a_wait_in_the_code_has_its_row():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module == "config/timeouts.py":
            continue
        listed = {b.name for b in TIMEOUTS}  # storage/bounds.py: the layer's bounds, each with its row
        for name, value in timed_numbers(parsed(path)):
            if (module, name) not in NOT_BOUNDS_IN_CODE and not (module == "storage/bounds.py" and name in listed):
                found[f"{module}: {name} = {value}"] = True
    assert not found, ("numbers that bound a wait, outside config/timeouts.py: make each a constant there with its "
                       f"row in TIMEOUTS and read it from there, or, if nothing fires, list it in NOT_BOUNDS_IN_CODE: "
                       f"{sorted(found)}")


def test_the_scan_sees_a_number_under_a_timed_name():
    code = "X_TIMEOUT = 4\nN, WAIT_SECS = 3, 2.0\ndef f(grace_secs=10): g(timeout=900)\nPOLL = 1\n"
    assert sorted(timed_numbers(ast.parse(code))) == [("WAIT_SECS", 2.0), ("X_TIMEOUT", 4), ("grace_secs", 10),
                                                      ("timeout", 900)]


def test_every_config_key_that_bounds_a_wait_has_a_row():
    timed = {k.name for k in all_keys() if TIMED.search(k.name.rsplit(".", 1)[-1])}
    assert set(NOT_BOUNDS) <= timed, "NOT_BOUNDS names a key that is gone"
    missing = sorted(timed - set(NOT_BOUNDS) - {b.name for b in TIMEOUTS})
    assert not missing, f"keys that bound a wait without a row in config/timeouts.py's TIMEOUTS: {missing}"


def test_every_row_names_a_key_or_constant_that_its_module_uses():
    keys = {k.name: k for k in all_keys()}
    for bound in TIMEOUTS:
        text = (PACKAGE / bound.where).read_text(encoding="utf-8")
        if bound.is_key:
            assert bound.name in keys, f"{bound.name}: no such config key"
            assert bound.default == keys[bound.name].default
            assert bound.name.rsplit(".", 1)[-1] in text, f"{bound.where} does not read {bound.name}"
        elif bound.name in vars(storage_bounds):  # the storage layer's, below the config: read by name there
            assert bound.name in text, f"{bound.where} does not read {bound.name}"
        else:
            assert f"timeouts.{bound.name}" in text, f"{bound.where} does not read timeouts.{bound.name}"
        assert bound.enforcer and bound.phase and bound.fires and bound.exit_code, bound


def test_the_issue_s_bounds_are_all_in_the_table():
    names = {b.name for b in TIMEOUTS}
    for key in ("strategy.collective_timeout_secs", "training.session_creation_timeout_secs",
                "training.teardown_timeout_secs", "training.preemption_grace_secs", "training.ps_idle_timeout_secs",
                "evaluation.final_timeout_secs", "launcher.grace_secs", "launcher.finish_timeout_secs",
                "launcher.stall_timeout_secs", "session.operation_timeout_ms"):
        assert key in names, key
    values = {b.name: b.default for b in TIMEOUTS}
    assert (values["EVALUATOR_START_GATE_SECS"], values["INTERRUPT_GRACE_SECS"], values["SIGTERM_BACKSTOP_SECS"],
            values["PORT_RELEASE_SECS"], values["SWEEP_STOP_GRACE_SECS"], values["PIP_DOWNLOAD_SECS"]) == \
        (60, 10, 5, 60, 30, 900)


def test_a_stopped_task_is_watched_by_one_process_per_situation():
    stopped = [b for b in bounds_named("launcher.stall_timeout_secs") if "stopped by a signal" in b.message]
    assert sorted(b.enforcer for b in stopped) == sorted([LAUNCH, PARENT_ALONE])


def test_a_task_s_parent_watches_its_stopped_child_only_when_no_launch_does():
    config = load_config("config/local.yaml", ("launcher.stall_timeout_secs=7",))
    from estimator_mnist.config import TaskId  # pylint: disable=import-outside-toplevel

    by_hand = TaskSpec(config, plan_task(config, TaskId("worker", 0)))
    assert stopped_child_limit(by_hand) == 7
    assert stopped_child_limit(TaskSpec(config, by_hand.plan, launched=True)) is None
    unwatched = TaskParent(by_hand.plan, session_timeout_secs=300, stall_secs=None)
    assert unwatched.stopped_too_long() is False  # never asks about a child: launch does


def test_launch_writes_specs_that_say_it_watches():
    from estimator_mnist.supervise.launch.group import TaskGroup  # pylint: disable=import-outside-toplevel

    config = load_config("config/local.yaml")
    group = TaskGroup(config, Path("/nonexistent"))
    assert all(spec.launched for spec in group.specs.values())


@pytest.mark.parametrize("render", [timeouts_markdown, describe_timeouts])
def test_each_bound_is_listed_once_per_situation(render):
    text = render()
    for bound in TIMEOUTS:
        assert bound.name in text and bound.phase.replace("|", "\\|") in text, bound.name
    assert len({(b.name, b.enforcer, b.phase) for b in TIMEOUTS}) == len(TIMEOUTS)


def test_docs_timeouts_md_is_generated_from_the_table():
    """Regenerate with: estimator-mnist timeouts --markdown > docs/timeouts.md"""
    assert (REPO / "docs" / "timeouts.md").read_text(encoding="utf-8") == timeouts_markdown()
