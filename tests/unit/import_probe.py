"""Run as `python -m tests.unit.import_probe MODULE...` by test_layout.py, in a fresh interpreter.

Imports each module in turn, then validates the default cluster file through
the CLI, and prints the first step that loaded TensorFlow, or "clean".
"""

import contextlib
import importlib
import io
import sys


def main(modules) -> int:
    for name in modules:
        importlib.import_module(name)
        if "tensorflow" in sys.modules:
            print(f"importing {name} loaded tensorflow")
            return 0
    from estimator_mnist import cli

    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["validate", "--cluster", "config/local.yaml", "--set", "training.max_steps=300"])
    if code != 0 or "tensorflow" in sys.modules:
        print(f"validate exited {code}; tensorflow loaded: {'tensorflow' in sys.modules}")
        return 0
    print("clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
