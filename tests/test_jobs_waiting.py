"""Why a queued job waits, read from real job records: the slot, its holders, the place in line; and the lanes."""

from __future__ import annotations

from pathlib import Path

from core.config import load_settings
from jobs.lanes import DEVICE, HEAVY, JOURNEY, LIGHT, WorkSlots, lane_counts, lane_of
from jobs.records import JobStore
from jobs.waiting import NOT_PICKED, wait_reason, with_reasons


def _job(store: JobStore, job_id: str, kind: str, created: float, **fields: object) -> None:
    store.insert({"id": job_id, "kind": kind, "params": {}, "argv": [], "log_path": "x.log", "progress_path": "x.json",
                  "created_at": created, "gpu": int(kind == "train"), **fields})


def test_a_queued_job_says_what_it_waits_for_who_holds_it_and_its_place(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    _job(store, "long", "train", 1.0, run_dir=str(tmp_path / "runs" / "long"))
    assert store.claim("long", "w1", None)
    _job(store, "next", "train", 2.0, run_dir=str(tmp_path / "runs" / "next"))
    _job(store, "later", "train", 3.0)
    _job(store, "tok", "tokenizer.extend", 4.0, params={"output": "tokenizers/en_am.model"})
    _job(store, "fresh", "dataset.import", 5.0)
    assert store.wait_for("next", DEVICE) and store.wait_for("later", DEVICE) and store.wait_for("tok", LIGHT)
    _job(store, "held", "tokenizer.train", 0.5, params={"output": "tokenizers/en.model"})
    assert store.claim("held", "w1", None)
    jobs = store.list()
    reasons = {job["id"]: job["waits_for"] for job in with_reasons(jobs)}
    assert reasons["next"] == "waiting for the device slot held by training 'long', none ahead"
    assert reasons["later"] == "waiting for the device slot held by training 'long', 1 ahead"
    assert reasons["tok"] == "waiting for the light-work slot held by tokenizer training 'en', none ahead"
    assert reasons["fresh"] == NOT_PICKED
    assert reasons["long"] is None and reasons["held"] is None  # running jobs wait for nothing
    assert store.claim("next", "w1", None)  # a claim clears what it waited for
    assert store.get("next")["waiting"] is None
    assert wait_reason(store.get("later"), store.list()) == (
        "waiting for the device slot held by training 'long', training 'next', none ahead")


def test_lanes_split_light_work_and_journeys_from_long_work() -> None:
    assert lane_of("quickstart.tts") == JOURNEY and lane_of("tokenizer.extend") == LIGHT and lane_of("export") == LIGHT
    assert lane_of("models.pull") == LIGHT  # a release pull waits on the network, never behind a training
    assert lane_of("train") == HEAVY and lane_of("dataset.sample") == HEAVY
    assert lane_counts(load_settings()) == {HEAVY: 2, LIGHT: 1, JOURNEY: 1}
    assert lane_counts(load_settings(), heavy=5)[HEAVY] == 5
    slots = WorkSlots({HEAVY: 1, LIGHT: 1, JOURNEY: 1})
    assert slots.total == 3 and slots.take(LIGHT) == LIGHT and slots.take(LIGHT) == HEAVY  # a free heavy slot serves
    assert slots.take(LIGHT) is None and slots.take(HEAVY) is None and slots.take(JOURNEY) == JOURNEY
    slots.give_back(HEAVY)
    assert slots.take(HEAVY) == HEAVY and slots.take(JOURNEY) is None
