"""The exit codes every command keeps to, and the exceptions that become them.

| code | meaning | restarted by launch (restart.policy: on_failure) and by Kubernetes' ExitCode policy |
| 0    | success | no |
| 1    | a failure a restart would not cure | no |
| 2    | bad input (YAML, flag, --set, TF_CONFIG, port, data): one line on stderr | no |
| 200  | RETRYABLE: a peer lost or unreachable, the session never formed, a collective or an operation timed out, a stall, a stop requested by the cluster (SIGTERM) | yes |
| 130  | Ctrl-C | no |

200 is 128 or more, so Kubernetes retries it, and it is no common signal's code (130, 137, 143).
"""

SUCCESS_EXIT_CODE = 0
FAILURE_EXIT_CODE = 1
USAGE_EXIT_CODE = 2
RETRYABLE_EXIT_CODE = 200
INTERRUPTED_EXIT_CODE = 130  # Ctrl-C, as a shell reports it
RETRYABLE_NOTE = (f"exiting with {RETRYABLE_EXIT_CODE} (retryable) so that a restart of the tasks resumes from "
                  "the last checkpoint")


class UsageError(Exception):
    """Bad input from the user. The message names what is wrong and how to fix it."""

    def __init__(self, message: str):
        # One line, always: the launcher and CI grep these.
        super().__init__(" ".join(str(message).split()))


class RetryableFailure(Exception):
    """A failure that starting the task again can cure; the message names what was lost."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class PermanentFailure(Exception):
    """A failure that a restart would not cure (exit 1), with a one-line message."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
