"""Errors the suite raises on purpose.

`SuiteError` is a user-facing error: the CLI prints its message as one line and exits non-zero,
without a traceback. `EnvironmentUnavailable` means a part (Docker, a GPU, a runtime) cannot run on
this machine: that arm or test is skipped with the reason, not the whole run.
"""


class SuiteError(Exception):
    """A problem with the user's input or environment, reported as one line."""


class EnvironmentUnavailable(SuiteError):
    """A backend, runtime or device is not available here; the caller skips it with this reason."""


class RuntimeStartError(SuiteError):
    """A runtime died or never became ready; carries the error line from its log.

    `refused`: its log matched one of the definition's refusal patterns (the runtime said it does
    not support what it was asked); otherwise it failed for another reason (a crash, a timeout)."""

    def __init__(self, message: str, error_line: str | None = None, log_path: str | None = None,
                 refused: bool = False, ended: str | None = None, after_s: float | None = None,
                 timed_out: bool = False):
        super().__init__(message)
        self.error_line = error_line
        self.log_path = log_path
        self.refused = refused
        self.ended = ended  # how the process ended ("crashed: SIGSEGV (segmentation fault)"); None: it had not
        self.after_s = after_s  # seconds from its start to the failure
        self.timed_out = timed_out
        self.returncode: int | None = None  # the process's return code, where the launcher knows it
