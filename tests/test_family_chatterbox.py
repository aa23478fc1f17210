"""Chatterbox T3 as a model family, on random-initialised REAL classes at reduced size (no weights exist here).

One module-scoped workspace: the reduced model folder (published file names), the espeak en+am
sample, the real multilingual tokenizer merged with Amharic (`[am]` tag) and the T3 extended to
it. Then: features, the doctor (pass and each failure), 20 training steps with frozen base rows
under weight decay 0.1, vocabulary-growth resume, export with a strict reload into a fresh T3,
and the English-unchanged property.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from core.checkpoint import load_checkpoint
from core.checks.doctor import doctor_context_from_run_config, run_doctor
from core.cli import main as cli_main
from core.config import load_settings
from core.data.feature_cache import INDEX_NAME, open_cache
from core.training.trainer import training_length_bounds
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.errors import InputError
from core.families.chatterbox.text import text_ids
from core.families.registry import get_model_family
from core.tokenizers.tokenizer import load_tokenizer
from core.training.run_config import run_config_from_dict
from core.training.state import step_checkpoints
from core.recipe import prepare_trainer, train
from tests.chatterbox_helpers import REDUCED, chatterbox_workspace, with_pieces

torch.set_num_threads(2)
BASE_ROWS = 2454
# The module fixtures (model folder, features, 20 training steps) take a few CPU minutes; on a
# machine shared by many jobs their wall time can pass the global 900 s per-test limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def ws(module_tmp: Path) -> Any:
    root = module_tmp / "workspace"
    root.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    chatterbox_workspace(root)
    yield root
    patch.undo()


def _config(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name, "family": "chatterbox", "model_dir": "models/chatterbox", "tokenizer": "tokenizers/am.json",
        "base_checkpoint": "checkpoints/t3_am.safetensors",
        "data": {"manifest": "datasets/espeak/manifest.jsonl", "val_ratio": 0.2},
        "optim": {"lr": 2.0e-3, "weight_decay": 0.1, "warmup_steps": 2},
        "batch": {"size": 4},
        "schedule": {"max_steps": 20, "val_every": 20, "save_every": 20, "keep_last": 1, "log_every": 5},
    }
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def trained(ws: Path) -> Any:
    return train(run_config_from_dict(_config("cb"), "cb.yaml"), settings=load_settings())


def test_features_match_chatterbox_inference_inputs(ws: Path, trained: Any) -> None:
    cache = next(p for p in (ws / "cache").iterdir() if (p / INDEX_NAME).is_file())
    index = open_cache(cache)
    assert index.data["family"] == "chatterbox" and index.tokenizer_fingerprint == load_tokenizer(ws / "tokenizers" / "am.json").fingerprint
    assert 0 <= index.data["max_code"] < 6561 and len(index.items) == 12
    entry = next(e for e in index.items if e["language"] == "am")
    with np.load(cache / entry["file"]) as item:
        assert item["speaker_emb"].shape == (256,) and abs(float(np.linalg.norm(item["speaker_emb"])) - 1) < 1e-3
        assert 0 < item["prompt"].shape[0] <= 150
        assert item["codes"].shape[0] == entry["n_codes"]
        rows = [json.loads(line) for line in (ws / "datasets" / "espeak" / "manifest.jsonl").read_text().splitlines()]
        seconds = next(r["duration"] for r in rows if r["id"] == entry["id"])
        assert abs(item["codes"].shape[0] - 25 * seconds) <= 2  # 25 S3 tokens per second
        tokenizer = load_tokenizer(ws / "tokenizers" / "am.json")
        tag = tokenizer.encode("[am]")[0]
        assert item["text_ids"][0] == tag >= BASE_ROWS
    assert (cache / "pairs.json").is_file()


SPEAKER_EMB_TOLERANCE = 1e-5   # absolute, on a unit-norm 256-d embedding: float rounding of batched LSTM matmuls


def test_batched_features_equal_clip_by_clip_features(ws: Path) -> None:
    """6 clips of different lengths through the S3 tokenizer and VoiceEncoder 4 at a time give the cache
    of 1 at a time: the same fingerprint folder, speech and prompt tokens identical, embeddings within tolerance."""
    from core.data.feature_cache import build_feature_cache
    from core.families.chatterbox.features import ChatterboxFeatures

    family = get_model_family("chatterbox")
    files = family.published_files(ws / "models" / "chatterbox")
    tokenizer = load_tokenizer(ws / "tokenizers" / "am.json")
    lines = (ws / "datasets" / "espeak" / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    manifest = ws / "datasets" / "espeak" / "batch-check.jsonl"
    manifest.write_text("\n".join(lines[::2]) + "\n", encoding="utf-8")   # 6 clips, en and am
    source = ChatterboxFeatures(tokenizer, files, torch.device("cpu"))
    caches = {size: build_feature_cache(source, manifest, tokenizer, ws / "batch-check" / str(size), 0.2, size).path for size in (1, 4)}
    assert caches[1].name == caches[4].name                                    # batching is not in the fingerprint
    one, four = (open_cache(caches[size]).items for size in (1, 4))
    assert len(one) == 6 and len({e["n_codes"] for e in one}) > 3 and {e["language"] for e in one} == {"en", "am"}
    for a, b in zip(one, four):
        assert {k: v for k, v in a.items() if k != "sha256"} == {k: v for k, v in b.items() if k != "sha256"}
        with np.load(caches[1] / a["file"]) as x, np.load(caches[4] / b["file"]) as y:
            for key in ("text_ids", "codes", "prompt"):
                assert np.array_equal(x[key], y[key]), (a["id"], key)
            assert np.abs(x["speaker_emb"] - y["speaker_emb"]).max() <= SPEAKER_EMB_TOLERANCE, a["id"]
    # an interrupted build (no index yet, one item missing) continues: the written items are reused as they are
    (caches[4] / INDEX_NAME).unlink()
    (caches[4] / four[0]["file"]).unlink()
    written = {e["file"]: (caches[4] / e["file"]).stat().st_mtime_ns for e in four[1:]}
    assert build_feature_cache(source, manifest, tokenizer, ws / "batch-check" / "4", 0.2, 4).path == caches[4]
    again = open_cache(caches[4]).items
    assert [{k: v for k, v in e.items() if k != "sha256"} for e in again] == [{k: v for k, v in e.items() if k != "sha256"} for e in four]
    assert again[1:] == four[1:] and {f: (caches[4] / f).stat().st_mtime_ns for f in written} == written


def test_training_keeps_base_rows_bit_identical_under_weight_decay(ws: Path, trained: Any) -> None:
    assert trained.state == "finished" and trained.step == 20
    status = json.loads((trained.run_dir / "status.json").read_text())
    assert status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"] is not None
    base = load_checkpoint(ws / "checkpoints" / "t3_am.safetensors").state_dict
    final = load_checkpoint(step_checkpoints(trained.run_dir)[-1])
    assert final.meta["family"] == "chatterbox" and final.meta["rows"] == base["text_emb.weight"].shape[0]
    # the length detector's bounds: S3 speech tokens per character of the run's training clips
    caches = [i.parent for i in (ws / "cache").glob(f"*/{INDEX_NAME}") if i.parent.name != "bad"]
    assert final.meta["length_bounds"] in [training_length_bounds(cache) for cache in caches]
    for key in ("text_emb.weight", "text_head.weight"):
        assert torch.equal(final.state_dict[key][:BASE_ROWS], base[key][:BASE_ROWS]), key
        assert not torch.equal(final.state_dict[key][BASE_ROWS:], base[key][BASE_ROWS:]), key
    assert not torch.equal(final.state_dict["speech_head.weight"], base["speech_head.weight"])
    lines = [json.loads(line) for line in (trained.run_dir / "metrics.jsonl").read_text().splitlines()]
    train_lines = [m for m in lines if m["split"] == "train"]
    assert {"text_loss", "mel_loss", "mel_top1", "loss"} <= set(train_lines[0])
    assert train_lines[-1]["mel_loss"] < train_lines[0]["mel_loss"]
    assert any(m["split"] == "val" for m in lines)


def test_stop_file_stops_at_a_checkpoint_and_resume_equals_an_uninterrupted_run(ws: Path, trained: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.families.chatterbox.family import ChatterboxFamily
    from tests.trainer_helpers import stop_file_at_step

    def config(name: str) -> Any:
        return run_config_from_dict(_config(name, data={"manifest": "datasets/espeak/manifest.jsonl", "val_ratio": 0.2, "prefetch": 0},
                                            batch={"size": 2},
                                            schedule={"max_steps": 3, "val_every": 3, "save_every": 3, "log_every": 1, "keep_last": 1}),
                                     f"{name}.yaml")

    straight = train(config("cb-straight"), settings=load_settings())
    stop_file_at_step(monkeypatch, ChatterboxFamily, ws / "runs" / "cb-paused" / "STOP", 1)
    stopped = train(config("cb-paused"), settings=load_settings())
    status = json.loads((ws / "runs" / "cb-paused" / "status.json").read_text())
    assert stopped.state == status["state"] == "stopped" and stopped.step == status["step"] == 1
    assert status["last_checkpoint"].endswith("step_0000001.pt") and status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"]
    monkeypatch.undo()
    resumed = train(config("cb-paused"), settings=load_settings(), resume="auto")
    assert straight.state == resumed.state == "finished" and resumed.step == 3
    a = load_checkpoint(step_checkpoints(straight.run_dir)[-1]).state_dict
    b = load_checkpoint(step_checkpoints(resumed.run_dir)[-1]).state_dict
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:5]
    losses = {name: {m["step"]: m["loss"] for m in map(json.loads, (ws / "runs" / name / "metrics.jsonl").read_text().splitlines())
                     if m["split"] == "train"} for name in ("cb-straight", "cb-paused")}
    assert losses["cb-paused"] == losses["cb-straight"] and sorted(losses["cb-paused"]) == [1, 2, 3]
    for run_dir in (straight.run_dir, resumed.run_dir):   # 1 GB of checkpoints that no later test reads
        shutil.rmtree(run_dir)


def test_length_bucketing_applies_to_family_samples(ws: Path, trained: Any) -> None:
    """The run's padding share is that of length-bucketed batches of the family's samples (target text +
    speech + 4 start/stop tokens), lower than the same samples in shuffled batches."""
    from core.data.pairs import load_pairs, training_pairs
    from core.training.data import Batcher

    cache = next(p for p in (ws / "cache").iterdir() if (p / INDEX_NAME).is_file() and p.name != "bad")
    index = open_cache(cache)
    entries = {e["id"]: e for e in index.items}
    chosen, _ = training_pairs(index.items, load_pairs(cache), "train", 254, 508, 1)
    lengths = [entries[t]["n_text"] + entries[t]["n_codes"] + 4 for t, _ in chosen]
    status = json.loads((trained.run_dir / "status.json").read_text())
    assert status["train_samples"] == len(lengths) > 4
    assert status["padding_share"] == round(Batcher(lengths, 4, seed=0).padding_share(0), 4)
    shuffled = [Batcher(lengths, 4, seed=0, bucket=False).padding_share(epoch) for epoch in range(12)]
    assert status["padding_share"] < sum(shuffled) / len(shuffled)


def test_resume_grows_the_vocabulary_and_remaps_adam_rows(ws: Path, trained: Any) -> None:
    old = load_tokenizer(ws / "tokenizers" / "am.json")
    with_pieces(old.path, ["ሰላምታ", "qzxw"], ws / "tokenizers" / "am2.json")
    saved = load_checkpoint(step_checkpoints(trained.run_dir)[-1])
    config = run_config_from_dict(_config("cb", tokenizer="tokenizers/am2.json", schedule={
        "max_steps": 22, "val_every": 22, "save_every": 22, "keep_last": 1, "log_every": 1}), "cb2.yaml")
    trainer = prepare_trainer(config, settings=load_settings(), resume="auto")
    assert trainer.step == 20 and trainer.model.text_emb.rows == old.size + 2
    names = trainer.param_names
    index = names.index("text_emb.weight_new")
    saved_index = saved.extra["optimizer_names"].index("text_emb.weight_new")
    state = trainer.optimizer.state_dict()["state"][index]["exp_avg"]
    before = saved.extra["optimizer"]["state"][saved_index]["exp_avg"]
    assert torch.equal(state[: before.shape[0]], before) and torch.count_nonzero(state[before.shape[0]:]) == 0
    assert trainer.grown_rows["text_emb.weight_new"] == before.shape[0]
    result = trainer.run()
    assert result.state == "finished" and result.step == 22
    assert result.base_rows_sha256["start"] == result.base_rows_sha256["now"]


def test_export_loads_strictly_into_a_fresh_published_t3(ws: Path, trained: Any) -> None:
    from chatterbox.models.t3 import T3

    from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams

    family = get_model_family("chatterbox")
    out = ws / "export"
    written = family.export(step_checkpoints(trained.run_dir)[-1], out, "am", load_settings())
    assert [p.name for p in written] == ["t3_am.safetensors", "am.json", "linguaforge.json", "speak_chatterbox.py"]
    note = json.loads((out / "linguaforge.json").read_text())
    rows = note["text_tokens_dict_size"]
    assert rows == load_tokenizer(out / "am.json").size and note["is_multilingual"] is False and "am" in note["language_tags"]
    assert note["layout"] == {"family": "chatterbox", "version": 2}
    assert "initial_speech_tokens=torch.zeros(2, 0" in note["published_inference"]
    fresh = T3(t3_hparams(ChatterboxConfig(text_tokens_dict_size=rows, **REDUCED)))
    fresh.load_state_dict(load_file(str(out / "t3_am.safetensors")), strict=True)
    assert type(fresh.text_emb) is torch.nn.Embedding and fresh.text_emb.weight.shape[0] == rows
    # synthesis refuses a language the tokenizer has no tag for, in one line with exit 2
    code = cli_main(["synthesize", "--family", "chatterbox", "--model-dir", str(ws / "models" / "chatterbox"),
                     "--checkpoint", str(out / "t3_am.safetensors"), "--tokenizer", str(out / "am.json"),
                     "--language", "xx", "--text", "selam", "--output", str(ws / "x.wav")])
    assert code == 2 and not (ws / "x.wav").exists()


def test_english_is_unchanged_by_the_extension(ws: Path) -> None:
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    from core.families.chatterbox.t3 import ChatterboxConfig, build_t3
    from core.families.chatterbox.decode import Sampling, decode_speech
    from core.families.chatterbox.layout import t3_cond_embeds, wrap_text

    base_tok = load_tokenizer(ws / "models" / "chatterbox" / "grapheme_mtl_merged_expanded_v1.json")
    am_tok = load_tokenizer(ws / "tokenizers" / "am.json")
    sentence = ENGLISH_SENTENCES[0]
    ids = text_ids(base_tok, sentence, "en")
    assert ids == text_ids(am_tok, sentence, "en")
    models = []
    for path, tok in ((ws / "models" / "chatterbox" / "t3_mtl23ls_v2.safetensors", base_tok),
                      (ws / "checkpoints" / "t3_am.safetensors", am_tok)):
        model = build_t3(ChatterboxConfig(text_tokens_dict_size=tok.size, **REDUCED), frozen_rows=BASE_ROWS).eval()
        model.load_state_dict(load_checkpoint(path).state_dict)
        models.append(model)
    g = torch.Generator().manual_seed(0)
    cond = T3Cond(speaker_emb=torch.randn(1, 256, generator=g), cond_prompt_speech_tokens=torch.randint(0, 6561, (1, 150), generator=g),
                  emotion_adv=0.5 * torch.ones(1, 1, 1))
    text = wrap_text(ids)
    greedy = Sampling(temperature=0.0, cfg_weight=0.5)
    tokens = [decode_speech(m, t3_cond_embeds(m, cond), text, 12, greedy).tokens for m in models]
    assert len(tokens[0]) > 0 and tokens[0] == tokens[1]


def _doctor(ws: Path, config: dict[str, Any], cache_dir: Path | None = None) -> dict[str, Any]:
    run = run_config_from_dict(config, "doc.yaml")
    ctx = doctor_context_from_run_config(run, None, load_settings())
    ctx.cache_dir = cache_dir
    return {c.id: c for c in run_doctor(ctx).checks}


def test_doctor_passes_and_fails_each_chatterbox_problem(ws: Path, trained: Any) -> None:
    checks = _doctor(ws, _config("doc"))
    assert all(c.status != "fail" for c in checks.values()), [c for c in checks.values() if c.status == "fail"]
    assert checks["chatterbox.files"].status == "pass"
    # published T3 (2454 rows) with the grown tokenizer: rows refused
    rows = _doctor(ws, _config("doc", base_checkpoint=None))
    assert rows["checkpoint.rows"].status == "fail"
    declared = _doctor(ws, _config("doc", model={"text_tokens_dict_size": 2454}))
    assert declared["config.declared_vocab"].status == "fail"
    with pytest.raises(InputError, match=r"config.declared_vocab: declared vocab 2454 disagrees with the tokenizer.s 3120 ids"):
        train(run_config_from_dict(_config("declared", model={"text_tokens_dict_size": 2454}), "d.yaml"), settings=load_settings())
    missing = ws / "models" / "incomplete"
    missing.mkdir()
    shutil.copy(ws / "models" / "chatterbox" / "ve.pt", missing)
    assert _doctor(ws, _config("doc", model_dir="models/incomplete", base_checkpoint="checkpoints/t3_am.safetensors"))[
        "chatterbox.files"].status == "fail"
    # cache problems: a speech id ≥ 6561, text > 2048, speech > 4096; tokens ≥ V against the base tokenizer
    cache = next(p for p in (ws / "cache").iterdir() if (p / INDEX_NAME).is_file())
    bad = ws / "cache" / "bad"
    shutil.copytree(cache, bad)
    index = json.loads((bad / INDEX_NAME).read_text())
    index["items"][0]["max_code"] = 6561
    index["items"][1]["n_text"] = 2049
    index["items"][2]["n_codes"] = 4097
    (bad / INDEX_NAME).write_text(json.dumps(index))
    failed = _doctor(ws, _config("doc"), bad)["chatterbox.cache"]
    assert failed.status == "fail" and "≥ 6561" in failed.message
    assert "1 clip(s) have more than 2048 text tokens" in failed.message and "more than 4096 speech" in failed.message
    assert _doctor(ws, _config("doc"), cache)["chatterbox.cache"].status == "pass"
    base_tok = _config("doc", tokenizer="models/chatterbox/grapheme_mtl_merged_expanded_v1.json",
                       base_checkpoint="models/chatterbox/t3_mtl23ls_v2.safetensors")
    assert _doctor(ws, base_tok, cache)["cache.max_text_id"].status == "fail"


def test_run_config_rejects_an_unknown_family(ws: Path) -> None:
    with pytest.raises(InputError, match="family: 'bark' is not one of linguaforge, chatterbox, indextts"):
        run_config_from_dict(_config("x", family="bark"), "x.yaml")
    written = yaml.safe_load(yaml.safe_dump(_config("x")))
    assert run_config_from_dict(written, "x.yaml").model_dir == "models/chatterbox"
    assert run_config_from_dict(_config("x", eval={"synthesis": {"cfm_steps": 2}}), "x.yaml").eval.synthesis == {"cfm_steps": 2}
    with pytest.raises(InputError, match="eval.synthesis: applies to model-family runs"):
        run_config_from_dict(_config("x", family="linguaforge", eval={"synthesis": {"temperature": 0}}), "x.yaml")


def test_synthesis_speaks_amharic_through_the_full_s3gen_at_24_khz(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The extended T3 (reduced) speaks `am` greedily through the full published S3Gen (random weights,
    built once per session): a 24 kHz wav of (speech tokens − 1) × 960 samples, 25 tokens per second.
    What random weights cannot show: that the words are intelligible and the voice is the reference's."""
    from core.audio import read_audio, write_wav
    from core.families.base import SynthesisRequest
    from tests.chatterbox_helpers import make_chatterbox_speech_folder

    speech = make_chatterbox_speech_folder(ws / "models" / "chatterbox-speech")
    clip, rate = read_audio(ws / "datasets" / "espeak" / "audio" / "am_0000.wav")
    reference = write_wav(ws / "spoken" / "reference.wav", clip[:rate], rate)   # 1 s: S3Gen's work grows with the prompt
    family = get_model_family("chatterbox")
    request = SynthesisRequest(
        checkpoint=ws / "checkpoints" / "t3_am.safetensors", text=AMHARIC_SENTENCES[1], output=ws / "spoken" / "am.wav",
        tokenizer=ws / "tokenizers" / "am.json", reference=reference, language="am", model_dir=speech,
        max_new_tokens=12, options={"temperature": 0, "cfm_steps": 2},
    )
    report = family.synthesize(request, load_settings())
    wav, rate = read_audio(report["output"])
    assert rate == report["sample_rate"] == 24000
    assert report["language"] == "am" and report["upstream_supported"] is False   # not in SUPPORTED_LANGUAGES
    assert 1 <= report["speech_tokens"] <= 12
    assert wav.numel() == max(1, report["speech_tokens"] - 1) * 960 and report["seconds"] == round(wav.numel() / 24000, 3)
    assert torch.isfinite(wav).all() and wav.abs().max() > 0
    # a language tag the tokenizer lacks is refused in one line, exit 2, before S3Gen loads
    code = cli_main(["synthesize", "--family", "chatterbox", "--model-dir", str(speech), "--checkpoint",
                     str(request.checkpoint), "--tokenizer", str(request.tokenizer), "--language", "xx", "--reference",
                     str(reference), "--text", "selam", "--output", str(ws / "spoken" / "xx.wav")])
    err = capsys.readouterr().err
    assert code == 2 and "has no [xx] tag" in err and "Traceback" not in err and not (ws / "spoken" / "xx.wav").exists()

    # the whole quality report through the same speech folder: 2 Amharic sentences, 1 s references
    from core.eval.tts import evaluate_checkpoint

    second, rate = read_audio(ws / "datasets" / "espeak" / "audio" / "am_0001.wav")
    references = [reference, write_wav(ws / "spoken" / "reference2.wav", second[:rate], rate)]
    result = evaluate_checkpoint(request.checkpoint, list(AMHARIC_SENTENCES[:2]), references, "am", load_settings(),
                                 wer=False, device="cpu", model_dir=speech, tokenizer=request.tokenizer,
                                 options={"temperature": 0, "cfm_steps": 2, "max_seconds": 0.5})
    quality = result["quality"]
    assert set(quality["flags"]) == {"no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored"}
    assert all(isinstance(f["flagged"], bool) and f["words"] for f in quality["flags"].values())
    assert all(1 <= row["tokens"] <= 13 for row in quality["per_sentence"])   # capped at 0.5 s = 12.5 tokens
    assert -1.0 <= quality["speaker_similarity"] <= 1.0 and 0.0 < quality["mos_estimate"] <= 5.0
