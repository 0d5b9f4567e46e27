"""The doctor's verdicts and its report: one line per check, `PASS|WARN|FAIL <check>: <detail>`, printed as
soon as the check is done (a person watches it), and the exit code (1 once anything failed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TextIO


class Verdict(enum.Enum):
    """What a check found."""

    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class Result:
    """One check's verdict and what it found, with the fix when there is one."""

    verdict: Verdict
    check: str
    detail: str

    @property
    def line(self) -> str:
        """The report's line for it."""
        return f"{self.verdict.value} {self.check}: {self.detail}"


def passed(check: str, detail: str) -> Result:
    """A PASS."""
    return Result(Verdict.PASS, check, detail)


def warned(check: str, detail: str) -> Result:
    """A WARN: works, but something deserves a look."""
    return Result(Verdict.WARN, check, detail)


def failed(check: str, detail: str) -> Result:
    """A FAIL: this link of the chain is broken."""
    return Result(Verdict.FAIL, check, detail)


def not_checked(check: str, why: str) -> Result:
    """A check that could not run because an earlier one failed: a WARN that says why."""
    return Result(Verdict.WARN, check, f"not checked: {why}")


class Report:
    """Prints each result as it comes and remembers the verdicts."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.results: list[Result] = []

    def add(self, result: Result) -> Result:
        """Print a result now (flushed) and keep it."""
        self.results.append(result)
        print(result.line, file=self._out, flush=True)
        return result

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, else 1."""
        return 1 if any(r.verdict is Verdict.FAIL for r in self.results) else 0
