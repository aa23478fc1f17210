"""TTS trainer tests on the espeak sample: English base → Amharic extension → frozen fine-tune → prune → speak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.cli import main
from core.config import load_settings
from core.training.embeddings import extend_checkpoint
from core.eval.tts import collect_evaluations
from core.training.run_config import run_config_from_dict
from core.data.sample_text import AMHARIC_SENTENCES
from core.training.periodic_eval import best_recorded
from core.training.trainer import training_length_bounds
from core.recipe import train
from tests.trainer_helpers import tts_workspace

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tts_ws(module_tmp: Path):
    """A workspace with the espeak sample (en + am), a 64-code codec and en / en+am SentencePiece models."""
    root = module_tmp / "workspace"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
        yield tts_workspace(root)


def _run(name: str, manifest: str, tokenizer: str, steps: int, **extra) -> dict:  # noqa: ANN003
    return {
        "preset": extra.pop("preset", "tiny"), "name": name, "tokenizer": tokenizer, "codec": "codecs/c64.pt",
        "data": {"manifest": manifest, "val_ratio": 0.2},
        "model": {"preset": "tiny", "max_speech_tokens": 400},
        "batch": {"size": 4},
        "optim": {"lr": 2.0e-3, "warmup_steps": 3, "weight_decay": 0.1},
        "schedule": {"max_steps": steps, "val_every": steps, "save_every": steps, "log_every": 5},
        **extra,
    }


def _metrics(root: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (root / "runs" / run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # 39 s at load 12 (issue 50: the quick loop keeps tests under ~5 s)
def test_english_base_then_frozen_amharic_finetune_prune_and_speak(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    settings = load_settings()
    base = train(run_config_from_dict(_run("en-base", "datasets/sample/en.jsonl", "tokenizers/en.model", 30)), None, settings)
    train_mel = [m["mel_loss"] for m in _metrics(tts_ws, "en-base") if m["split"] == "train"]
    assert train_mel[-1] < train_mel[0] - 0.4, train_mel
    assert 0.0 < base.val["mel_top1"] <= 1.0 and base.info["padding_share"] < 0.2
    best = json.loads((tts_ws / "runs" / "en-base" / "status.json").read_text())["best"]  # no evaluation: val loss
    assert best["metric"] == "val_loss" and best["step"] == 30 and "lowest validation loss" in best["why"]

    extended = tts_ws / "checkpoints" / "en_am.pt"
    extend_checkpoint(base.last_checkpoint, tts_ws / "tokenizers/en.model", tts_ws / "tokenizers/en_am.model", extended)
    fine = train(run_config_from_dict(_run(
        "am-ft", "datasets/sample/manifest.jsonl", "tokenizers/en_am.model", 10,
        preset="new-language", base_checkpoint="checkpoints/en_am.pt",
    )), None, settings)
    assert fine.info["frozen_rows"] == 200
    before, after = load_checkpoint(extended).state_dict, load_checkpoint(fine.last_checkpoint).state_dict
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert after[key].shape[0] == 700
        assert torch.equal(after[key][:200], before[key][:200]), key
        assert not torch.equal(after[key][200:], before[key][200:]), key
    assert fine.base_rows_sha256["start"] == fine.base_rows_sha256["now"] is not None
    meta = load_checkpoint(fine.last_checkpoint).meta
    assert meta["base_size"] == 200 and meta["rows"] == 700 and meta["parent"] == load_checkpoint(extended).sha256

    monkeypatch.chdir(tts_ws)  # command-line paths resolve against the current directory
    assert main(["prune", "--checkpoint", fine.last_checkpoint, "--output", "pruned/am.safetensors"]) == 0
    assert (tts_ws / "pruned" / "am.tokenizer.model").is_file() and (tts_ws / "pruned" / "am.codec.pt").is_file()
    reference = sorted((tts_ws / "datasets" / "sample" / "audio").glob("am_*.wav"))[0]
    code = main(["synthesize", "--checkpoint", "pruned/am.safetensors", "--text", AMHARIC_SENTENCES[0],
                 "--reference", str(reference), "--output", "out/am.wav", "--language", "am", "--json"])
    assert code == 0 and (tts_ws / "out" / "am.wav").stat().st_size > 44


@pytest.mark.slow  # 61 s at load 12
def test_periodic_eval_logs_eval_lines_and_best_metric_picks_the_best_eval(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    settings = load_settings()
    schedule = {"max_steps": 4, "val_every": 2, "save_every": 2, "log_every": 2, "keep_last": 5,
                "eval_every": 1, "best_metric": "eval_mcd"}
    config = _run("en-eval", "datasets/sample/en.jsonl", "tokenizers/en.model", 4, schedule=schedule,
                  eval={"count": 3})
    result = train(run_config_from_dict(config), None, settings)
    assert result.state == "finished"
    evals = [m for m in _metrics(tts_ws, "en-eval") if m["split"] == "eval"]
    assert [m["step"] for m in evals] == [2, 4]
    for line in evals:
        assert 0 < line["mcd_db"] < 100 and 0 < line["codec_mcd_db"] < line["mcd_db"]
        assert 0.0 <= line["dtw_identification"] <= 1.0 and line["chance"] == pytest.approx(1 / 3, abs=1e-3)
    folder = tts_ws / "runs" / "en-eval" / "checkpoints"
    stored = json.loads((folder / "eval.json").read_text())["checkpoints"]
    assert set(stored) == {"step_0000002.pt", "step_0000004.pt"}
    assert stored["step_0000004.pt"]["rows"]["model"]["mcd_db"] == evals[-1]["mcd_db"]
    # best.pt is the checkpoint with the lowest recorded eval MCD (ties: the newer one)
    best_mcd = min(m["mcd_db"] for m in evals)
    best_step = max(m["step"] for m in evals if m["mcd_db"] == best_mcd)
    assert load_checkpoint(folder / "best.pt").meta["step"] == best_step
    assert result.info["best_eval"] == best_mcd
    # what a resume reads back from eval.json, in each metric's direction
    assert best_recorded(folder / "eval.json", "eval_mcd", 2) == evals[0]["mcd_db"]
    assert best_recorded(folder / "eval.json", "eval_mcd", 4) == best_mcd
    assert best_recorded(folder / "eval.json", "eval_dtw_accuracy", 4) == max(m["dtw_identification"] for m in evals)
    summaries = collect_evaluations(tts_ws / "runs" / "en-eval")
    assert [s["step"] for s in summaries] == [2, 4] and all(s["exists"] for s in summaries)
    assert all(len(s["audio"]) == 3 and all(a and Path(a).is_file() for a in s["audio"]) for s in summaries)

    # a failing eval (missing sentences file) is logged and training finishes anyway
    broken = _run("en-eval-broken", "datasets/sample/en.jsonl", "tokenizers/en.model", 2,
                  schedule={**schedule, "max_steps": 2}, eval={"sentences": "missing.txt", "references": "espeak"})
    result = train(run_config_from_dict(broken), None, settings)
    assert result.state == "finished"
    log = (tts_ws / "runs" / "en-eval-broken" / "log.txt").read_text()
    assert "eval at step 2 failed: InputError" in log and "missing.txt: sentences file not found" in log
    assert not [m for m in _metrics(tts_ws, "en-eval-broken") if m["split"] == "eval"]


def test_doctor_fails_before_any_preprocessing(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.checkpoint import save_checkpoint
    from core.errors import InputError

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    rows = 300  # the tokenizer has 700 ids: the doctor's checkpoint.rows check must fail
    stale = {"text_embedding.weight": torch.zeros(rows, 8), "text_head.weight": torch.zeros(rows, 8),
             "text_head.bias": torch.zeros(rows)}
    save_checkpoint(tts_ws / "checkpoints" / "stale.pt", stale, {"family": "linguaforge", "task": "tts", "rows": rows})
    config = _run("mismatch", "datasets/sample/manifest.jsonl", "tokenizers/en_am.model", 2,
                  base_checkpoint="checkpoints/stale.pt")
    config["data"]["val_ratio"] = 0.3  # a cache fingerprint no other test builds
    caches = lambda: sorted(p.name for p in (tts_ws / "cache").glob("*"))  # noqa: E731
    before = caches()
    with pytest.raises(InputError, match="checkpoint.rows|300"):
        train(run_config_from_dict(config), None, load_settings())
    assert caches() == before, "no preprocessing may run while the doctor fails"
    assert json.loads((tts_ws / "runs" / "mismatch" / "status.json").read_text())["state"] == "failed"


@pytest.mark.slow  # 70 s at load 12
def test_best_by_quality_and_base_language_retention_warning(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Periodic evaluation chooses best.pt by the quality score unless told otherwise, and status.json says
    why, part by part; every evaluation speaks the run's one evaluation set (eval_set.json: Amharic and
    English sections of the val split, chosen at the first evaluation) and eval.json carries a section per
    language. `val_base_loss` (the English val samples of an en+am run) is measured at step 0 and at every
    eval, and a learning rate that wrecks the model makes it rise past `eval.base_loss_warn`: warned in
    status.json and log.txt."""
    from core.eval.quality.report import quality_score

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    schedule = {"max_steps": 4, "val_every": 2, "save_every": 2, "log_every": 2, "keep_last": 5, "eval_every": 1}
    config = _run("am-quality", "datasets/sample/manifest.jsonl", "tokenizers/en_am.model", 4, schedule=schedule,
                  optim={"lr": 0.5, "warmup_steps": 1, "weight_decay": 0.0},
                  eval={"count": 2, "base_count": 2, "mos": False, "base_language": "en", "base_loss_warn": 0.05})
    result = train(run_config_from_dict(config), None, load_settings())
    assert result.state == "finished"
    run = tts_ws / "runs" / "am-quality"
    status = json.loads((run / "status.json").read_text())
    retention = status["retention"]
    assert retention["step"] == 4 and retention["start"] > 0 and retention["change"] > 0.05
    assert retention["warning"] and "rose" in retention["warning"]
    assert "WARNING: base-language loss (val_base_loss) rose" in (run / "log.txt").read_text()
    evals = [m for m in _metrics(tts_ws, "am-quality") if m["split"] == "eval"]
    assert [m["step"] for m in evals] == [2, 4] and all("val_base_loss" in m for m in evals)
    assert evals[-1]["val_base_loss"] == pytest.approx(retention["val_base_loss"], rel=1e-4)
    stored = json.loads((run / "checkpoints" / "eval.json").read_text())["checkpoints"]
    scores = {e["step"]: quality_score(e, e["val_loss"]) for e in stored.values()}
    best_step = min(sorted(scores, reverse=True), key=lambda s: scores[s])  # ties go to the newer checkpoint
    assert load_checkpoint(run / "checkpoints" / "best.pt").meta["step"] == best_step
    assert status["best"]["metric"] == "quality" and status["best"]["step"] == best_step
    assert f"step {best_step}:" in status["best"]["why"] and "flag" in status["best"]["why"]
    assert set(stored[f"step_{best_step:07d}.pt"]["quality"]["flags"]) == {
        "no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored"}
    # the length detector judges by the training data's tokens per character, which the checkpoints record
    bounds = load_checkpoint(run / "checkpoints" / "best.pt").meta["length_bounds"]
    assert 0 < bounds[0] < bounds[1]
    assert bounds in [training_length_bounds(index.parent) for index in (tts_ws / "cache").glob("*/index.json")]
    assert all(e["quality"]["length_bounds"] == bounds and e["quality"]["length_bounds_source"] == "training data"
               for e in stored.values())
    parts = status["best"]["parts"]
    assert parts["intelligibility"]["measure"] == "dtw_identification" and parts["val_loss"] == stored[
        f"step_{best_step:07d}.pt"]["val_loss"]
    assert list(status["best"]["score"]) == [len(parts["flags_raised"]), -parts["intelligibility"]["value"], parts["val_loss"]]
    # one evaluation set, chosen at step 2 from the val split, spoken at steps 2 and 4 section by section
    eval_set = json.loads((run / "eval_set.json").read_text())
    assert eval_set["chosen_at_step"] == 2 and "evaluation set chosen at step 2" in (run / "log.txt").read_text()
    new, base = eval_set["sections"]
    assert (new["role"], new["language"], len(new["sentences"])) == ("new_language", "am", 2)
    assert (base["role"], base["language"], base["asked"]) == ("base_language", "en", 2)
    for entry in stored.values():
        sections = entry["sections"]
        assert [p["sentence"] for p in entry["rows"]["model"]["per_sentence"]] == new["sentences"]
        assert sections["new_language"]["used"] == 2 and sections["new_language"]["language"] == "am"
        assert sections["base_language"]["language"] == "en"
        if len(base["sentences"]) >= 2:  # the English held-out clips of this sample spoken too, into their own folder
            assert [p["sentence"] for p in sections["base_language"]["rows"]["model"]["per_sentence"]] == base["sentences"]
            assert all(Path(a).parent.name == "en" and Path(a).is_file() for a in sections["base_language"]["audio"])
            assert set(sections["base_language"]["quality"]["flags"]) == set(entry["quality"]["flags"])
            # English is judged by its own references' length range, not by the Amharic training data's
            assert sections["base_language"]["quality"]["length_bounds_source"] == "evaluation references"
        else:
            assert sections["base_language"]["note"].startswith("skipped:")
    assert all(("base_dtw_identification" in m) == (len(base["sentences"]) >= 2) for m in evals)
