"""Keeping the base language: the verdict's thresholds, the doctor's warning, and replay against no replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.checks.doctor import doctor_context_from_run_config, run_doctor
from core.config import load_settings
from core.errors import InputError
from core.eval.quality.retention import KEPT_LOSS_RISE, LOST_LOSS_RISE, retention_verdict
from core.training.retention import DEFAULT_RETENTION, retention_overlay, retention_record
from core.training.run_config import load_run_config


@pytest.mark.parametrize(("loss_change", "before", "after", "verdict"), [
    (0.03, 0.80, 0.78, "kept"),         # +3 % loss, −2.5 % identification
    (0.10, 0.80, 0.72, "kept"),         # both exactly at the kept limits
    (0.25, 0.80, 0.78, "degraded"),     # the loss alone past +10 %
    (0.03, 0.80, 0.60, "degraded"),     # identification alone −25 %
    (1.06, 0.80, 0.78, "lost"),         # the quickstart's +106 % before retention
    (0.05, 0.80, 0.30, "lost"),         # identification −62.5 %
    (None, 0.80, 0.80, "kept"),
    (0.40, None, None, "degraded"),
    (None, None, None, "unmeasured"),
])
def test_the_verdict_follows_its_thresholds(loss_change, before, after, verdict) -> None:
    result = retention_verdict("English", loss_change, before, after, chance=0.05)
    assert result["verdict"] == verdict
    assert result["words"].startswith(f"English: {verdict}")
    assert result["thresholds"]["kept_loss_rise"] == KEPT_LOSS_RISE and result["thresholds"]["lost_loss_rise"] == LOST_LOSS_RISE


def test_a_base_that_never_read_is_not_judged_by_identification() -> None:
    result = retention_verdict("English", 0.02, identification_before=0.05, identification_after=0.0, chance=0.05)
    assert result["verdict"] == "kept"  # judged by the loss alone
    assert result["identification_drop"] is None
    assert "no better than chance" in result["words"] and "nothing to keep" in result["identification_note"]


def test_the_status_record_carries_the_verdict_and_warns_past_its_share() -> None:
    record = retention_record(3.0, 500, 2.0, 0.25, "en")
    assert record["change"] == 0.5 and record["verdict"] == "degraded" and "rose 50%" in record["warning"]
    steady = retention_record(2.1, 500, 2.0, 0.25, "en")
    assert steady["verdict"] == "kept" and steady["warning"] is None


def test_retention_overlays() -> None:
    assert retention_overlay("full") == {"freeze": {"mode": "none"}}
    replay = retention_overlay("replay", "datasets/en.jsonl")
    assert replay["data"]["replay"] == {"manifest": "datasets/en.jsonl", "share": DEFAULT_RETENTION["share"]}
    assert retention_overlay("lora+replay", "en.jsonl", 0.1)["adapter"]["kind"] == "lora"
    with pytest.raises(InputError, match="give the base language's manifest"):
        retention_overlay("replay")
    with pytest.raises(InputError, match="choose one of"):
        retention_overlay("forget")


def _doctor_check(workspace: Path, extra: str) -> object:
    (workspace / "checkpoints").mkdir(exist_ok=True)
    (workspace / "checkpoints" / "base.safetensors").write_bytes(b"")
    config = workspace / "runs" / "ft" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("name: ft\ntask: tts\ndata: {manifest: datasets/am/manifest.jsonl" + extra, encoding="utf-8")
    report = run_doctor(doctor_context_from_run_config(load_run_config(config), config, load_settings()), only="retention.")
    assert [c.id for c in report.checks] == ["retention.base_data"]
    return report.checks[0]


def test_the_doctor_warns_for_a_backbone_fine_tune_without_base_language_data(workspace: Path) -> None:
    warned = _doctor_check(workspace, "}\nbase_checkpoint: checkpoints/base.safetensors\n")
    assert warned.status == "warn"
    assert "shared backbone on datasets/am/manifest.jsonl alone" in warned.message and "+106 %" in warned.message
    assert "data.replay.manifest" in warned.fix
    replayed = _doctor_check(workspace, ", replay: {manifest: datasets/en/manifest.jsonl, share: 0.25}}\n"
                                        "base_checkpoint: checkpoints/base.safetensors\n")
    assert replayed.status == "pass" and "25% of each batch" in replayed.message
    new_rows = _doctor_check(workspace, "}\nbase_checkpoint: checkpoints/base.safetensors\nfreeze: {mode: all-but-new-rows}\n")
    assert new_rows.status == "pass"


def test_the_doctor_says_nothing_of_a_model_trained_from_scratch(workspace: Path) -> None:
    config = workspace / "runs" / "scratch" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("name: scratch\ntask: tts\ndata: {manifest: datasets/am/manifest.jsonl}\n", encoding="utf-8")
    report = run_doctor(doctor_context_from_run_config(load_run_config(config), config, load_settings()), only="retention.")
    assert report.checks == []
