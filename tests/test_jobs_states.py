"""The one table of job states (issue 23): every transition on a real jobs database moves a job only from
its listed states, the table is whole, and no module of the runner, the CLI's jobs commands, the journeys
or the dashboard spells a state out instead of using the table."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

from jobs import states
from jobs.records import JobStore
from jobs.states import FINAL, INITIAL, STATES, TRANSITIONS
from jobs.supervise import worker_identity

REPO_ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("jobs", "journeys", "gradio_app", "core/cli/jobs.py", "app.py")
CALLS = {  # each transition's method with the arguments it needs
    "claim": lambda store, job_id, target: store.claim(job_id, worker_identity(), None),
    "reject": lambda store, job_id, target: store.reject(job_id, "damaged"),
    "finish": lambda store, job_id, target: store.finish(job_id, target, exit_code=0),
    "interrupt": lambda store, job_id, target: store.interrupt(job_id, "worker gone"),
    "cancel": lambda store, job_id, target: store.cancel(job_id),
    "resume": lambda store, job_id, target: store.resume(job_id),
    "auto_resume": lambda store, job_id, target: store.auto_resume(job_id),
}
PATH_TO = {  # how a new job reaches each state, through the transitions alone
    states.QUEUED: [],
    states.RUNNING: [("claim", states.RUNNING)],
    states.SUCCEEDED: [("claim", states.RUNNING), ("finish", states.SUCCEEDED)],
    states.FAILED: [("claim", states.RUNNING), ("finish", states.FAILED)],
    states.CANCELLED: [("cancel", states.CANCELLED)],
    states.INTERRUPTED: [("claim", states.RUNNING), ("interrupt", states.INTERRUPTED)],
}


def _job(store: JobStore, state: str) -> str:
    job = store.insert({"kind": "doctor", "params": {}, "argv": ["doctor"], "log_path": "l", "progress_path": "p"})
    for name, target in PATH_TO[state]:
        assert CALLS[name](store, job["id"], target)
    assert store.get(job["id"])["status"] == state
    return job["id"]


def _row(path: Path, job_id: str) -> tuple:
    with sqlite3.connect(path) as conn:
        return conn.execute("select * from jobs where id = ?", (job_id,)).fetchone()


def test_the_table_is_whole() -> None:
    assert INITIAL in STATES and set(FINAL) < set(STATES)
    reached, frontier = {INITIAL}, [INITIAL]
    while frontier:
        state = frontier.pop()
        for move in TRANSITIONS.values():
            assert set(move.sources) | set(move.targets) <= set(STATES)
            if state in move.sources:
                frontier.extend(t for t in move.targets if t not in reached)
                reached.update(move.targets)
    assert reached == set(STATES)
    leaving_final = {name for name, move in TRANSITIONS.items() if set(move.sources) & set(FINAL)}
    assert leaving_final == {"resume"}  # only an explicit resume changes a final state
    assert set(CALLS) == set(TRANSITIONS) and all(callable(getattr(JobStore, name)) for name in TRANSITIONS)


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_each_transition_moves_only_from_its_sources(tmp_path: Path, name: str) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    move = TRANSITIONS[name]
    for target in move.targets:
        for state in STATES:
            job_id = _job(store, state)
            before = _row(store.path, job_id)
            moved = CALLS[name](store, job_id, target)
            assert moved == (state in move.sources), (name, state, target)
            if moved:
                assert store.get(job_id)["status"] == target
            else:  # refused: the record is untouched, byte for byte
                assert _row(store.path, job_id) == before


def test_transitions_keep_the_counters(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    job_id = _job(store, states.INTERRUPTED)
    store.request_cancel(job_id)  # not running: refused
    assert not store.get(job_id)["cancel_requested"]
    assert store.auto_resume(job_id) and store.claim(job_id, worker_identity(), "/s.yaml")
    assert store.request_cancel(job_id) and store.get(job_id)["cancel_requested"]
    job = store.get(job_id)
    assert (job["attempts"], job["interruptions"], job["settings_path"], job["finished_at"]) == (2, 1, "/s.yaml", None)
    assert store.finish(job_id, states.CANCELLED, error="cancelled by request") and store.resume(job_id)
    job = store.get(job_id)
    assert (job["status"], job["cancel_requested"], job["pid"], job["finished_at"]) == (states.QUEUED, False, None, None)


def test_status_changes_only_through_a_transition(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    job_id = _job(store, states.QUEUED)
    with pytest.raises(ValueError, match="transition method"):
        store.update(job_id, status=states.RUNNING)
    with pytest.raises(ValueError, match="not a final job state"):
        store.finish(job_id, states.INTERRUPTED)
    assert store.get(job_id)["status"] == states.QUEUED


def spelled_states(source: str) -> list[tuple[int, str]]:
    """Return (line, state) for each state written as a literal where code tests or sets a job's state:
    a comparison operand, an item of a tuple/list/set, or the value of a `status=`-like keyword."""
    found = []
    for node in ast.walk(ast.parse(source)):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            operands = list(node.elts)
        elif isinstance(node, ast.keyword) and node.arg in ("status", "when_status", "statuses"):
            operands = [node.value]
        found += [(op.lineno, op.value) for op in operands if isinstance(op, ast.Constant) and op.value in STATES]
    return found


def test_no_module_spells_a_state_out() -> None:
    planted = 'if job["status"] in ("queued", "running"):\n    store.update(job_id, when_status=("running",))\n'
    assert spelled_states(planted) == [(1, "queued"), (1, "running"), (2, "running")]
    files = [p for name in SCANNED for p in ((REPO_ROOT / name).rglob("*.py") if (REPO_ROOT / name).is_dir()
                                            else [REPO_ROOT / name])]
    assert len(files) > 20
    spelled = {f"{path.relative_to(REPO_ROOT)}:{line}: {state!r}" for path in files if path.name != "states.py"
               for line, state in spelled_states(path.read_text(encoding="utf-8"))}
    assert not spelled, f"use the constants of jobs.states: {sorted(spelled)}"
