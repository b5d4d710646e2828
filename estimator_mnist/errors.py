"""The exit codes, and the one exception type that reaches the user as a one-line message.

Anything the user can fix (a YAML file, a flag, a port, the data) raises
`UsageError`; the CLI prints its message on one line and exits with code 2.
Everything else is a bug or a runtime failure and keeps its traceback.
"""

SUCCESS_EXIT_CODE = 0
FAILURE_EXIT_CODE = 1
USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # Ctrl-C, as a shell reports it


class UsageError(Exception):
    """Bad input from the user. The message names what is wrong and how to fix it."""

    def __init__(self, message: str):
        # One line, always: the launcher and CI grep these.
        super().__init__(" ".join(str(message).split()))
