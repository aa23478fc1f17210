"""tests/budget.py: every run ends with each file's time, the slowest tests and the tests over the
budget, in one process and under pytest-xdist (on the controller), and never fails a test for its time."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

# Two files: one test whose fixture's setup and teardown each wait 0.3 s (the budget counts all three
# phases), and a quick one. The waits are the measured quantity here, not a wait for an event.
SLOW_FILE = """
import time, pytest

@pytest.fixture
def phases():
    time.sleep(0.3)
    yield
    time.sleep(0.3)

def test_slow(phases):
    time.sleep(0.3)
"""
QUICK_FILE = "def test_quick():\n    assert True\n"


@pytest.fixture
def two_files(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytest project with the budget plugin (imported from this checkout) and two test files."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    # Only the plugins these runs use: the installed ones' autoloading (Playwright, anyio…) costs seconds.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest('pytest_plugins = ("tests.budget",)\n')
    pytester.makepyfile(test_slowfile=SLOW_FILE, test_quickfile=QUICK_FILE)
    return pytester


def _seconds(output: str, name: str) -> float:
    match = re.search(rf"^\s*([\d.]+) s  {re.escape(name)}\s*$", output, re.M)
    assert match, f"{name} missing from the budget report:\n{output}"
    return float(match.group(1))


@pytest.mark.parametrize("workers", [
    pytest.param([], id="one-process"),
    pytest.param(["-p", "xdist", "-n", "2"], id="xdist", marks=pytest.mark.slow),  # two workers start: ~7 s loaded
])
def test_the_report_gives_each_files_time_the_slowest_tests_and_those_over_budget(
        two_files: pytest.Pytester, workers: list[str]) -> None:
    result = two_files.runpytest_subprocess(*workers, "--budget-seconds", "0.5", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)  # over the budget is a report, never a failure
    output = result.stdout.str()
    assert "time per file (2 files" in output
    slow_file = _seconds(output, "test_slowfile.py")
    assert 0.9 <= slow_file < 30, slow_file  # setup + call + teardown, not the call alone
    assert _seconds(output, "test_quickfile.py") < slow_file
    assert "slowest 2 tests (setup + call + teardown)" in output
    assert _seconds(output, "test_slowfile.py::test_slow") == pytest.approx(slow_file, abs=0.05)
    assert "over the 0.5 s per-test budget: 1" in output
    assert re.search(r"test_slowfile\.py::test_slow  \(over by [\d.]+ s\)", output)
    assert "test_quickfile.py::test_quick  (over" not in output
    # Printed once, by the controller: workers' own summaries are not shown.
    assert output.count("time per file") == 1


def test_the_budget_comes_from_the_ini_and_a_run_with_none_over_says_so(two_files: pytest.Pytester) -> None:
    two_files.makeini("[pytest]\nbudget_seconds = 120\nbudget_slowest = 1\n")
    result = two_files.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    output = result.stdout.str()
    assert "over the 120 s per-test budget: 0" in output
    assert "slowest 1 tests" in output
    assert "test_quickfile.py::test_quick" not in output.split("slowest 1 tests")[1]
