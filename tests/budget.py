"""The suite's time budget, printed at the end of every run: each test file's total time, the slowest
tests, and the tests over the per-test budget — a report, never a failure.

Times are setup + call + teardown summed from the test reports, so they add up the same in one process
and under pytest-xdist, where the reports reach the controller and only the controller prints. Loaded
from tests/conftest.py (`pytest_plugins`); `--budget-seconds` sets the per-test budget and
`--budget-slowest` how many of the slowest tests are listed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

DEFAULT_BUDGET_S = 60.0
DEFAULT_SLOWEST = 15


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the budget's two options (also settable in pytest.ini as `budget_seconds`, `budget_slowest`)."""
    group = parser.getgroup("budget", "the suite's time budget report")
    group.addoption("--budget-seconds", type=float, default=None,
                    help=f"per-test budget in seconds; tests over it are named (default {DEFAULT_BUDGET_S:g})")
    group.addoption("--budget-slowest", type=int, default=None,
                    help=f"how many of the slowest tests to list (default {DEFAULT_SLOWEST})")
    parser.addini("budget_seconds", "per-test budget in seconds (a report, never a failure)",
                  default=str(DEFAULT_BUDGET_S))
    parser.addini("budget_slowest", "how many of the slowest tests the budget report lists",
                  default=str(DEFAULT_SLOWEST))


class Budget:
    """Sums each test's phases from its reports and prints the summary at the end of the run."""

    def __init__(self, budget_s: float, slowest: int) -> None:
        self.budget_s = budget_s
        self.slowest = slowest
        self.per_test: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add one phase (setup, call or teardown) of one test to its total."""
        self.per_test[report.nodeid] += report.duration

    def per_file(self) -> dict[str, float]:
        """Each test file's total seconds."""
        files: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.per_test.items():
            files[nodeid.split("::")[0]] += seconds
        return files

    def over_budget(self) -> list[tuple[str, float]]:
        """The tests whose total passed the budget, slowest first."""
        return sorted(((n, s) for n, s in self.per_test.items() if s > self.budget_s), key=lambda x: -x[1])

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Print the per-file times, the slowest tests and those over the budget."""
        if not self.per_test:
            return
        write = terminalreporter.write_line
        files = self.per_file()
        terminalreporter.write_sep("=", f"time per file ({len(files)} files, "
                                        f"{sum(files.values()):.1f} s of test time)")
        for path, seconds in sorted(files.items(), key=lambda x: -x[1]):
            write(f"{seconds:9.1f} s  {path}")
        terminalreporter.write_sep("=", f"slowest {min(self.slowest, len(self.per_test))} tests "
                                        "(setup + call + teardown)")
        for nodeid, seconds in sorted(self.per_test.items(), key=lambda x: -x[1])[: self.slowest]:
            write(f"{seconds:9.1f} s  {nodeid}")
        over = self.over_budget()
        terminalreporter.write_sep("=", f"over the {self.budget_s:g} s per-test budget: {len(over)}")
        for nodeid, seconds in over:
            write(f"{seconds:9.1f} s  {nodeid}  (over by {seconds - self.budget_s:.1f} s)")


def pytest_configure(config: pytest.Config) -> None:
    """Register the report on the process that prints: the only process, or xdist's controller."""
    if hasattr(config, "workerinput"):
        return
    budget = config.getoption("budget_seconds")
    slowest = config.getoption("budget_slowest")
    config.pluginmanager.register(Budget(
        float(config.getini("budget_seconds")) if budget is None else budget,
        int(config.getini("budget_slowest")) if slowest is None else slowest,
    ), "linguaforge-budget")
