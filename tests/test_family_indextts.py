"""IndexTTS2's GPT trained through the family interface, on the published classes at reduced size.

No published weights exist here: the model folder holds random-initialised modules of the real
classes (`UnifiedVoice`, `Wav2Vec2BertModel`, MaskGCT `RepCodec`) with IndexTTS2's file names
(tests/indextts_helpers.py). What the random weights cannot show — that the speech is good — is
out of scope; everything about shapes, rows, freezing, caches, files and loaders is checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from core.checkpoint import load_checkpoint
from core.config import load_settings
from core.data.feature_cache import build_feature_cache, load_item, open_cache
from core.errors import InputError
from core.families.indextts.features import CACHE_FORMAT
from core.families.registry import get_model_family
from core.tokenizers.tokenizer import load_tokenizer
from tests.indextts_helpers import W2V_LAYERS, amharic_workspace, build_model_folder
from tests.sp_helpers import grow_to

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]


@pytest.fixture(scope="module")
def folder(module_tmp: Path) -> Path:
    """The reduced IndexTTS2 folder (read-only for the tests; copy before changing), inside the workspace
    `ws`: a run config's `model_dir` must lie inside the roots, and `train --config` loads only the defaults."""
    return build_model_folder(module_tmp / "workspace" / "models" / "IndexTTS-2")


@pytest.fixture(scope="module")
def ws(folder: Path, module_tmp: Path):
    """A workspace: 4 espeak Amharic clips (2 speakers), tokenizers grown 12,000 → 12,008 → 12,016,
    and `gpt.pth` extended to 12,008 + 1 rows by `embeddings extend` (mean init, extra row moved last)."""
    root = module_tmp / "workspace"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
        amharic_workspace(root, folder)
        grow_to(folder / "bpe.model", 12016, root / "tokenizers" / "am16.model")
        yield root


def _settings(folder: Path):
    settings = load_settings()
    settings.data["families"] = {"indextts": {"model_dir": str(folder), "w2v_layer": W2V_LAYERS}}
    return settings


def _run(name: str, folder: Path, tokenizer: str, steps: int, **extra) -> dict:  # noqa: ANN003
    return {
        "name": name, "task": "tts", "family": "indextts", "model_dir": str(folder),
        "tokenizer": tokenizer, "base_checkpoint": "checkpoints/gpt_am8.pt",
        "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prompts_per_target": 1},
        "freeze": {"mode": "base-rows", "until": "auto"},
        "batch": {"size": 2},
        "optim": {"lr": 1.0e-2, "warmup_steps": 0, "weight_decay": 0.1},
        "schedule": {"max_steps": steps, "val_every": steps, "save_every": steps, "log_every": 5},
        **extra,
    }


# ------------------------------------------------------------------ loading and sizing


def test_published_gpt_loads_strictly_with_v_plus_one_rows(folder: Path) -> None:
    from core.families.indextts.gpt import IndexTTSModelConfig, gpt_kwargs_from_state_dict, load_gpt_state_dict, read_indextts_config

    family = get_model_family("indextts")
    files = family.published_files(folder)
    assert set(files) == {"config", "gpt", "bpe", "w2v_stats"}
    state = load_gpt_state_dict(files["gpt"])
    tokenizer = load_tokenizer(files["bpe"])
    assert tokenizer.size == 12000 and state["text_embedding.weight"].shape[0] == 12001
    kwargs = gpt_kwargs_from_state_dict(state, read_indextts_config(files["config"]), tokenizer.size)
    assert (kwargs["layers"], kwargs["model_dim"], kwargs["max_text_tokens"], kwargs["max_mel_tokens"]) == (2, 64, 600, 1815)
    assert kwargs["condition_module"]["num_blocks"] == 1 and kwargs["condition_module"]["output_size"] == 32
    model = family.build_model(IndexTTSModelConfig(kwargs, {}), frozen_rows=12000)
    family.load_weights(model, state, str(files["gpt"]), tokenizer)
    assert model.text_embedding.frozen == 12000 and model.text_embedding.frozen_tail == 1
    assert torch.equal(model.state_dict()["text_head.bias"], state["text_head.bias"])
    small = grow_to(files["bpe"], 12004, folder.parent / "t4.model")
    with pytest.raises(InputError, match="12001 text rows.*12004 ids.*needs 12005.*embeddings extend"):
        family.load_weights(model, state, str(files["gpt"]), load_tokenizer(small))


def test_missing_feature_model_names_the_file_and_where_indextts_expects_it(folder: Path, tmp_path: Path) -> None:
    from core.families.indextts.models import model_paths

    paths = model_paths(folder, {"w2v_layer": W2V_LAYERS})
    with pytest.raises(InputError, match=r"campplus_cn_common\.bin.*never does.*families\.indextts\.campplus"):
        paths.path("campplus")
    with pytest.raises(InputError, match="IndexTTS2 expects s2mel.pth"):
        paths.path("s2mel.pth")
    override = model_paths(folder, {"semantic_codec": str(tmp_path / "nope.safetensors")})
    with pytest.raises(InputError, match="nope.safetensors: missing amphion/MaskGCT"):
        override.path("semantic_codec")


# ------------------------------------------------------------------ the doctor


def test_doctor_reads_indextts_config_as_a_foreign_config(folder: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.checks.doctor import doctor_context_from_run_config, run_doctor
    from core.training.run_config import run_config_from_dict

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    settings = _settings(folder)
    config = run_config_from_dict(_run("doc", folder, "tokenizers/am8.model", 1))
    ctx = doctor_context_from_run_config(config, None, settings)
    by_id = {c.id: c for c in run_doctor(ctx, only="indextts.").checks}
    assert by_id["indextts.config"].status == "pass"                     # the folder's own pair: 12000 ↔ bpe.model
    assert "sized from its tokenizer (12008 ids, 12009 rows)" in by_id["indextts.config"].message
    ctx = doctor_context_from_run_config(config, None, settings)
    ctx.extras["indextts_config"] = str(folder / "config.yaml")         # the same file as the config to use with am8
    by_id = {c.id: c for c in run_doctor(ctx, only="indextts.").checks}
    assert by_id["indextts.config"].status == "fail"
    assert "`gpt.number_text_tokens` is 12000, but the tokenizer has 12008 ids" in by_id["indextts.config"].message
    assert "\n" not in by_id["indextts.config"].message and "\n" not in by_id["indextts.config"].fix
    ctx.target_config_path = folder / "config.yaml"                     # `doctor --target-config`: the same gate, the same verdict
    assert {c.id: c for c in run_doctor(ctx, only="config.target").checks}["config.target"].message == by_id["indextts.config"].message
    fixed = ws / "families" / "indextts" / "config.12008.yaml"
    assert str(fixed) in by_id["indextts.config"].fix
    written = yaml.safe_load(fixed.read_text())
    assert written["gpt"]["number_text_tokens"] == 12008 and written["dataset"]["bpe_model"].endswith("am8.model")
    ctx.extras["indextts_config"] = str(fixed)
    assert {c.id: c for c in run_doctor(ctx, only="indextts.config").checks}["indextts.config"].status == "pass"
    assert by_id["indextts.tokenizer_prefix"].status == "pass"

    shuffled = ws / "tokenizers" / "bad.model"
    from core.tokenizers.sp_proto import parse_model_proto

    proto = parse_model_proto((ws / "tokenizers" / "am8.model").read_bytes())
    proto.pieces[500].piece, proto.pieces[501].piece = proto.pieces[501].piece, proto.pieces[500].piece
    shuffled.write_bytes(proto.SerializeToString())
    bad = run_config_from_dict(_run("doc", folder, "tokenizers/bad.model", 1))
    result = {c.id: c for c in run_doctor(doctor_context_from_run_config(bad, None, settings), only="indextts.").checks}
    assert result["indextts.tokenizer_prefix"].status == "fail"
    assert "id 500" in result["indextts.tokenizer_prefix"].message


def test_unreadable_indextts_configs_fail_in_one_line_through_the_gate(tmp_path: Path) -> None:
    from core.families.indextts.gpt import read_indextts_config

    cases = {
        "binary.yaml": (bytes(range(256)) * 2, "not UTF-8 text"),
        "broken.yaml": (b"gpt: [a\n  b: {\n", r"not valid YAML \(line 2: expected ',' or '\]', but got ':'\)"),
        "t3.yaml": (b"t3: {text_tokens_dict_size: 2454}\n", "declares `t3.text_tokens_dict_size`, not `gpt.number_text_tokens`"),
        "no_vocab.yaml": (b"gpt: {layers: 2}\n", "no text vocabulary size found"),
        "no_heads.yaml": (b"gpt: {number_text_tokens: 12000, model_dim: 64}\n", "`gpt.heads` is missing"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError, match=message) as raised:
            read_indextts_config(tmp_path / name)
        assert "\n" not in str(raised.value) and str(tmp_path / name) in str(raised.value)


def test_feature_batch_size_defaults_by_device_and_refuses_nonsense() -> None:
    from core.data.feature_cache import DEFAULT_BATCH, feature_batch_size

    assert feature_batch_size({}, "cpu", "indextts") == DEFAULT_BATCH["cpu"] < DEFAULT_BATCH["cuda"] == feature_batch_size(None, "cuda", "indextts")
    assert feature_batch_size({"feature_batch_size": 3}, "cuda", "indextts") == 3
    for bad in (0, -2, "8", True, 2.5):
        with pytest.raises(InputError, match=r"families\.indextts\.feature_batch_size is .*positive integer"):
            feature_batch_size({"feature_batch_size": bad}, "cpu", "indextts")


def test_doctor_cache_limits_fail_each(tmp_path: Path) -> None:
    from core.checks.doctor import DoctorContext, run_doctor

    items = [
        {"id": "ok", "n_text": 10, "n_codes": 100, "max_code": 8191},
        {"id": "long-text", "n_text": 601, "n_codes": 100, "max_code": 10},
        {"id": "long-codes", "n_text": 10, "n_codes": 1816, "max_code": 10},
        {"id": "start-code", "n_text": 10, "n_codes": 10, "max_code": 8192},
    ]
    (tmp_path / "index.json").write_text(json.dumps({"format": CACHE_FORMAT, "items": items}))
    ctx = DoctorContext(cache_dir=tmp_path, extras={"model_config": {"kwargs": {"max_text_tokens": 600, "max_mel_tokens": 1815}}})
    check = {c.id: c for c in run_doctor(ctx, only="cache.indextts").checks}["cache.indextts"]
    assert check.status == "fail"
    assert "1 clip(s) with text longer than max_text_tokens 600 (long-text)" in check.message
    assert "1 clip(s) with codes longer than max_mel_tokens 1815 (long-codes)" in check.message
    assert "1 clip(s) with a semantic code ≥ 8192 (start-code)" in check.message
    (tmp_path / "index.json").write_text(json.dumps({"format": CACHE_FORMAT, "items": items[:1]}))
    assert {c.id: c for c in run_doctor(ctx, only="cache.indextts").checks}["cache.indextts"].status == "pass"


# ------------------------------------------------------------------ features, training, export, growth


@pytest.fixture(scope="module")
def trained(folder: Path, ws: Path):
    """20 steps of the extended model on the Amharic clips, frozen base rows, weight decay 0.1."""
    from core.training.run_config import run_config_from_dict
    from core.recipe import train

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
        settings = _settings(folder)
        result = train(run_config_from_dict(_run("am-gpt", folder, "tokenizers/am8.model", 20)), None, settings)
        yield result, settings


def test_features_are_computed_as_indextts2_does_and_cached_by_fingerprint(folder: Path, ws: Path, trained) -> None:
    from core.data.manifest import load_manifest_rows
    from core.families.indextts.gpt import IndexTextNormalizer
    from core.data.pairs import load_pairs

    caches = [p.parent for p in (ws / "cache").glob("*/index.json")]
    assert len(caches) == 1
    index = open_cache(caches[0], (CACHE_FORMAT,)).data
    rows = {r.id: r for r in load_manifest_rows(ws / "datasets" / "am" / "manifest.jsonl")}
    tokenizer = load_tokenizer(ws / "tokenizers" / "am8.model")
    assert index["tokenizer"]["fingerprint"] == tokenizer.fingerprint and len(index["items"]) == 4
    normalizer = IndexTextNormalizer()
    for entry in index["items"]:
        item = load_item(caches[0], entry)
        assert item["text_ids"].tolist() == normalizer.text_ids(rows[entry["id"]].text, tokenizer)
        seconds = rows[entry["id"]].duration
        assert abs(item["codes"].size - 50 * seconds) <= 2          # 50 semantic frames per second
        assert 0 <= item["codes"].min() and item["codes"].max() < 8192
        assert item["condition"].shape == (32, 64) and item["emo_vec"].shape == (64,)
    pairs = load_pairs(caches[0])
    speaker = {e["id"]: e["speaker"] for e in index["items"]}
    assert all(p != t and speaker[p] == speaker[t] for t, ps in pairs.items() for p in ps)


def test_audio_front_end_is_indextts2s_and_in_the_cache_fingerprint(ws: Path, trained) -> None:
    """The one front end the cache and synthesis read clips through gives, bit for bit, what IndexTTS2's
    inference gives: `_load_and_cut_audio` (librosa at 22.05 kHz, 15 s) then `Resample(sr, 16000)` for the
    speaker, `_load_and_cut_audio(sr=16000)` for the emotion prompt; its version is a fingerprint part."""
    import torchaudio

    from core.families.indextts.audio import FRONT_END_VERSION, emotion_audio, speaker_audio
    from indextts.infer_v2 import IndexTTS2

    for wav in sorted((ws / "datasets" / "am" / "audio").glob("*.wav")):       # 16 kHz espeak clips
        audio, sr = IndexTTS2._load_and_cut_audio(None, wav, 15)                 # self is not used by it
        ours = speaker_audio(wav)
        assert sr == 22050 and torch.equal(ours.wav_22k, audio)
        assert torch.equal(ours.wav_16k, torchaudio.transforms.Resample(sr, 16000)(audio))
        assert torch.equal(emotion_audio(wav), IndexTTS2._load_and_cut_audio(None, wav, 15, sr=16000)[0])
    cache = next(p.parent for p in (ws / "cache").glob("*/index.json"))
    assert open_cache(cache, (CACHE_FORMAT,)).data["parts"]["front_end"] == FRONT_END_VERSION


FLOAT_TOLERANCE = 1e-4   # absolute, on latents / emotion vectors of magnitude ~1: float rounding of batched matmuls


def test_batched_features_equal_clip_by_clip_features(folder: Path, ws: Path) -> None:
    """Clips of different lengths through the feature models 3 at a time give the cache of 1 at a time:
    the same fingerprint folder, text ids and semantic codes identical, conditioning within FLOAT_TOLERANCE."""
    from core.data.manifest import load_manifest_rows
    from core.families.indextts.gpt import IndexTextNormalizer, load_gpt_state_dict, load_unified_voice, read_indextts_config
    from core.families.indextts.features import IndexTTSFeatures
    from core.families.indextts.models import BatchFeaturizer, SemanticFeatures, model_paths

    config = read_indextts_config(folder / "config.yaml")
    semantic = SemanticFeatures(model_paths(folder, {"w2v_layer": W2V_LAYERS}), config["semantic_codec"], "cpu", W2V_LAYERS)
    gpt, _ = load_unified_voice(load_gpt_state_dict(folder / "gpt.pth"), config, 12000)
    tokenizer = load_tokenizer(ws / "tokenizers" / "am8.model")
    featurize = BatchFeaturizer(semantic, gpt, IndexTextNormalizer(), tokenizer)
    rows = load_manifest_rows(ws / "datasets" / "am" / "manifest.jsonl")
    assert len({round(r.duration, 2) for r in rows}) == len(rows) == 4          # every clip a different length
    manifest = ws / "datasets" / "am" / "manifest.jsonl"
    source = IndexTTSFeatures({"m": "x"}, featurize)
    caches = {size: build_feature_cache(source, manifest, tokenizer, ws / "batch-check" / str(size), 0.0, size).path for size in (1, 3)}
    assert caches[1].name == caches[3].name                                    # batching is not in the fingerprint
    one, three = (open_cache(caches[size], (CACHE_FORMAT,)).data["items"] for size in (1, 3))
    assert [e["id"] for e in one] == [e["id"] for e in three]
    for a, b in zip(one, three):
        assert {k: v for k, v in a.items() if k != "sha256"} == {k: v for k, v in b.items() if k != "sha256"}
        x, y = load_item(caches[1], a), load_item(caches[3], b)
        assert np.array_equal(x["text_ids"], y["text_ids"]) and np.array_equal(x["codes"], y["codes"]), a["id"]
        for key in ("condition", "emo_vec"):
            assert np.abs(x[key] - y[key]).max() <= FLOAT_TOLERANCE, (a["id"], key, np.abs(x[key] - y[key]).max())


def test_the_cache_and_the_speaker_make_each_clips_voice_with_one_maker(folder: Path, ws: Path) -> None:
    """The cache item's speaker latents and emotion vector are those the speaker makes of the same clip as a
    reference (`voice_conditioning` of that clip alone, as `IndexTTSSpeaker._voice` calls it, the 15 s cut made
    and w2v-BERT run again), within FLOAT_TOLERANCE; a clip over 15 s is cut the same way on both paths."""
    import soundfile

    from core.data.manifest import ManifestRow, load_manifest_rows
    from core.families.indextts.gpt import IndexTextNormalizer, load_gpt_state_dict, load_unified_voice, read_indextts_config
    from core.families.indextts.models import BatchFeaturizer, SemanticFeatures, model_paths, voice_conditioning

    config = read_indextts_config(folder / "config.yaml")
    semantic = SemanticFeatures(model_paths(folder, {"w2v_layer": W2V_LAYERS}), config["semantic_codec"], "cpu", W2V_LAYERS)
    gpt, _ = load_unified_voice(load_gpt_state_dict(folder / "gpt.pth"), config, 12000)
    rows = load_manifest_rows(ws / "datasets" / "am" / "manifest.jsonl")
    long = ws / "datasets" / "am" / "long.wav"                    # 16 s: past the 15 s prompt cut
    wav, rate = soundfile.read(rows[0].path)
    soundfile.write(long, np.tile(wav, int(16 * rate / len(wav)) + 1)[: 16 * rate], rate)
    rows.append(ManifestRow(id="long", audio="long.wav", text=rows[0].text, speaker="s", language="am", path=long))
    items = BatchFeaturizer(semantic, gpt, IndexTextNormalizer(), load_tokenizer(ws / "tokenizers" / "am8.model"))(rows)
    for row, item in zip(rows, items):
        voice = voice_conditioning(semantic, gpt, [row.path])[0]
        assert voice.condition.shape == item["condition"].shape == (32, 64) and voice.emo_vec.shape == (64,)
        assert np.abs(item["condition"] - voice.condition.numpy()).max() <= FLOAT_TOLERANCE, row.id
        assert np.abs(item["emo_vec"] - voice.emo_vec.numpy()).max() <= FLOAT_TOLERANCE, row.id
    assert items[-1]["codes"].size >= 16 * 50 - 2 and abs(voice.features.shape[1] - 15 * 50) <= 2   # codes whole, prompt cut


def test_twenty_steps_keep_base_rows_and_the_extra_row_bit_identical(ws: Path, trained) -> None:
    result, _ = trained
    assert result.state == "finished" and result.step == 20
    start = load_checkpoint(ws / "checkpoints" / "gpt_am8.pt").state_dict
    end = load_checkpoint(result.run_dir / result.last_checkpoint if not Path(result.last_checkpoint).is_absolute() else result.last_checkpoint)
    assert end.meta["family"] == "indextts" and end.meta["rows"] == 12009 and end.meta["base_size"] == 12000
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        before, after = start[key], end.state_dict[key]
        assert after.shape[0] == 12009
        assert torch.equal(before[:12000], after[:12000]), key          # base rows: not one bit moved
        assert torch.equal(before[12008], after[12008]), key            # the extra row, untouched at the end
    assert not torch.equal(start["text_embedding.weight"][12000:12008], end.state_dict["text_embedding.weight"][12000:12008])
    assert not torch.equal(start["mel_head.weight"], end.state_dict["mel_head.weight"])
    assert torch.equal(start["conditioning_encoder.embed.out.0.weight"], end.state_dict["conditioning_encoder.embed.out.0.weight"])
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if m["split"] == "train"]
    assert train[0]["mel_loss"] > train[-1]["mel_loss"]
    assert {"text_loss", "mel_loss", "mel_top1", "loss"} <= set(train[-1])
    status = json.loads((result.run_dir / "status.json").read_text())
    assert status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"]


def test_stop_file_stops_at_a_checkpoint_and_resume_equals_an_uninterrupted_run(
    folder: Path, ws: Path, trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.training.run_config import run_config_from_dict
    from core.training.state import step_checkpoints
    from core.recipe import train

    _, settings = trained
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    config = {"schedule": {"max_steps": 4, "val_every": 4, "save_every": 4, "log_every": 1},
              "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prompts_per_target": 1, "prefetch": 0}}
    straight = train(run_config_from_dict(_run("straight", folder, "tokenizers/am8.model", 4, **config)), None, settings)
    assert straight.state == "finished" and straight.step == 4
    from core.families.indextts.family import IndexTTSFamily
    from tests.trainer_helpers import stop_file_at_step

    stop_file_at_step(monkeypatch, IndexTTSFamily, ws / "runs" / "paused" / "STOP", 2)
    stopped = train(run_config_from_dict(_run("paused", folder, "tokenizers/am8.model", 4, **config)), None, settings)
    assert stopped.state == "stopped" and stopped.step == 2
    status = json.loads((ws / "runs" / "paused" / "status.json").read_text())
    assert status["state"] == "stopped" and status["step"] == 2 and status["last_checkpoint"].endswith("step_0000002.pt")
    assert status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"]
    assert load_checkpoint(Path(status["last_checkpoint"])).extra["step"] == 2
    monkeypatch.undo()
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    resumed = train(run_config_from_dict(_run("paused", folder, "tokenizers/am8.model", 4, **config)), None, settings, resume="auto")
    assert resumed.state == "finished" and resumed.step == 4 and resumed.info["resumed_from"].endswith("step_0000002.pt")
    a = load_checkpoint(step_checkpoints(straight.run_dir)[-1]).state_dict
    b = load_checkpoint(step_checkpoints(resumed.run_dir)[-1]).state_dict
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:5]
    losses = {name: {m["step"]: m["loss"] for m in map(json.loads, (ws / "runs" / name / "metrics.jsonl").read_text().splitlines())
                     if m["split"] == "train"} for name in ("straight", "paused")}
    assert losses["paused"] == losses["straight"] and sorted(losses["paused"]) == [1, 2, 3, 4]
    for run_dir in (straight.run_dir, resumed.run_dir):   # checkpoints that no later test reads
        shutil.rmtree(run_dir)


def test_length_bucketing_applies_to_family_samples(ws: Path, trained) -> None:
    """The run's reported padding share is that of length-bucketed batches of the family's samples
    (target text + codes), lower than the same batches in shuffled order."""
    from core.families.indextts.training import paired_samples
    from core.training.data import Batcher

    result, _ = trained
    cache = next(p.parent for p in (ws / "cache").glob("*/index.json"))
    lengths = paired_samples(cache, 600, 1815)["train"].lengths
    assert len(set(lengths)) == len(lengths) == 4
    status = json.loads((result.run_dir / "status.json").read_text())
    pairs = sorted(lengths)                                   # batch 2: the two shortest, the two longest
    best = 1 - sum(lengths) / (2 * pairs[1] + 2 * pairs[3])
    assert status["padding_share"] == round(best, 4) == round(Batcher(lengths, 2, seed=0).padding_share(0), 4)
    shuffled = [Batcher(lengths, 2, seed=0, bucket=False).padding_share(epoch) for epoch in range(12)]
    assert status["padding_share"] < sum(shuffled) / len(shuffled)


def test_sigterm_to_a_cli_family_run_ends_it_stopped_with_a_checkpoint(folder: Path, ws: Path, trained, tmp_path: Path) -> None:
    """`python -m core train` of an IndexTTS2 run (features from the run's cache folder, as an imported
    one is used) gets SIGTERM once it trains; it saves, exits 0 and reports `stopped`."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cache = next(p.parent for p in (ws / "cache").glob("*/index.json"))
    run = _run("sigterm", folder, "tokenizers/am8.model", 100000,
               schedule={"max_steps": 100000, "val_every": 100000, "save_every": 100000, "log_every": 1})
    run["data"]["manifest"] = str(cache)
    config = tmp_path / "sigterm.yaml"
    config.write_text(yaml.safe_dump(run), encoding="utf-8")
    env = dict(os.environ, LINGUAFORGE_WORKSPACE=str(ws))
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen([sys.executable, "-m", "core", "train", "--config", str(config), "--json"], cwd=root, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status_path = ws / "runs" / "sigterm" / "status.json"
    deadline = time.monotonic() + 600
    try:
        while process.poll() is None and time.monotonic() < deadline:       # wait until it trains (the handler is in place)
            if status_path.is_file() and json.loads(status_path.read_text() or "{}").get("step", 0) >= 1:
                break
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()[1][-2000:]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-2000:]
    result = json.loads(out)
    status = json.loads(status_path.read_text())
    assert result["state"] == status["state"] == "stopped" and 1 <= status["step"] < 100000
    saved = load_checkpoint(Path(status["last_checkpoint"]))
    assert saved.extra["step"] == saved.meta["step"] == status["step"] and saved.meta["family"] == "indextts"
    assert status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"]
    shutil.rmtree(status_path.parent)                      # a checkpoint that no later test reads


def test_export_is_accepted_by_indextts2s_own_loader(folder: Path, ws: Path, trained, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.utils.checkpoint import load_checkpoint as indextts_load_checkpoint

    result, settings = trained
    written = get_model_family("indextts").export(Path(result.last_checkpoint), tmp_path / "export", "am", settings)
    assert [p.name for p in written][:4] == ["gpt_am.pth", "config.yaml", "am.model", "linguaforge.json"]
    cfg = OmegaConf.load(tmp_path / "export" / "config.yaml")
    assert cfg.gpt.number_text_tokens == 12008 and cfg.dataset.bpe_model == "am.model" and cfg.gpt_checkpoint == "gpt_am.pth"
    assert load_tokenizer(tmp_path / "export" / "am.model").size == 12008
    model = UnifiedVoice(**cfg.gpt)                      # exactly how IndexTTS2.__init__ builds it
    indextts_load_checkpoint(model, str(tmp_path / "export" / cfg.gpt_checkpoint))   # strict=True inside
    trained_rows = load_checkpoint(Path(result.last_checkpoint)).state_dict["text_embedding.weight"]
    assert torch.equal(model.text_embedding.weight.detach(), trained_rows)
    notes = json.loads((tmp_path / "export" / "linguaforge.json").read_text())
    assert notes["family"] == "indextts" and notes["layout"] == {"family": "indextts", "version": 2}
    assert notes["published_inference"]["layout"] == notes["layout"] and "warning" not in notes["published_inference"]
    assert "inference_speech(" in notes["published_inference"]["gpt_call"] and "transformers" in notes["published_inference"]["versions"]
    from core.checkpoint import save_checkpoint                       # a checkpoint of layout version 1 (before) is flagged
    saved = load_checkpoint(Path(result.last_checkpoint))
    older = save_checkpoint(tmp_path / "older.pt", saved.state_dict, {**saved.meta, "layout": None})
    get_model_family("indextts").export(older, tmp_path / "older", "am", settings)
    warning = json.loads((tmp_path / "older" / "linguaforge.json").read_text())["published_inference"]["warning"]
    assert "records layout None" in warning and "train it again" in warning
    with pytest.raises(RuntimeError, match="size mismatch"):            # the uncorrected config would not load it
        indextts_load_checkpoint(UnifiedVoice(**OmegaConf.load(folder / "config.yaml").gpt), str(tmp_path / "export" / "gpt_am.pth"))


def test_vocabulary_growth_resume_moves_the_extra_row_and_remaps_adam(folder: Path, ws: Path, trained, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.training.run_config import run_config_from_dict
    from core.recipe import prepare_trainer

    result, settings = trained
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    saved = load_checkpoint(Path(result.last_checkpoint))
    config = run_config_from_dict(_run("am-gpt", folder, "tokenizers/am16.model", 24))
    trainer = prepare_trainer(config, None, settings, resume="auto")
    assert trainer.step == 20 and trainer.grown_rows == {
        "text_embedding.weight_new": 8, "text_head.weight_new": 8, "text_head.bias_new": 8}
    state = trainer.optimizer.state[trainer.model.text_embedding.weight_new]
    old = saved.extra["optimizer"]["state"][saved.extra["optimizer_names"].index("text_embedding.weight_new")]
    assert state["exp_avg"].shape[0] == 16
    assert torch.equal(state["exp_avg"][:8], old["exp_avg"]) and not state["exp_avg"][8:].any()
    grown = trainer.run()
    assert grown.state == "finished" and grown.step == 24
    final = load_checkpoint(Path(grown.last_checkpoint))
    base = load_checkpoint(folder / "gpt.pth").state_dict
    assert final.meta["rows"] == 12017
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert final.state_dict[key].shape[0] == 12017
        assert torch.equal(final.state_dict[key][:12000], base[key][:12000])
        assert torch.equal(final.state_dict[key][12016], base[key][12000])   # the published extra row, now last


def test_english_codes_unchanged_by_the_extension(folder: Path, ws: Path) -> None:
    from core.families.indextts.gpt import IndexTextNormalizer, load_gpt_state_dict, load_unified_voice, read_indextts_config

    config = read_indextts_config(folder / "config.yaml")
    text = "THE WEATHER IS NICE TODAY, SO WE WALK TO THE PARK."
    codes = []
    for checkpoint, tokenizer in ((folder / "gpt.pth", folder / "bpe.model"),
                                  (ws / "checkpoints" / "gpt_am8.pt", ws / "tokenizers" / "am8.model")):
        tok = load_tokenizer(tokenizer)
        model, _ = load_unified_voice(load_gpt_state_dict(checkpoint), config, tok.size)
        model.eval().post_init_gpt2_config(kv_cache=True)
        ids = torch.tensor([IndexTextNormalizer().text_ids(text, tok)])
        assert int(ids.max()) < 12000
        speech = torch.randn(1, 60, 1024, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            out, _ = model.inference_speech(speech, ids, do_sample=False, num_beams=1, max_generate_length=24)
        codes.append(out)
    assert codes[0].shape[1] > 1
    assert torch.equal(codes[0], codes[1])


def test_linguaforge_decoder_equals_the_published_uncached_path_and_caches_one_position_per_code(folder: Path) -> None:
    """LinguaForge's greedy decoder lays out the prompt as training does and gives the codes of the published
    `inference_speech` (transformers 5: no cache, training positions; no repetition penalty) on the same weights;
    with its KV cache it runs the prompt once, then one position per code on a growing cache, and gives the same
    codes as without it."""
    from core.families.indextts.gpt import IndexTextNormalizer, load_gpt_state_dict, load_unified_voice, read_indextts_config
    from core.families.indextts.decode import decode
    from core.families.indextts.models import emotion_vectors, speaker_latents

    tok = load_tokenizer(folder / "bpe.model")
    model, _ = load_unified_voice(load_gpt_state_dict(folder / "gpt.pth"), read_indextts_config(folder / "config.yaml"), tok.size)
    model.eval().post_init_gpt2_config(kv_cache=True)
    with torch.no_grad():                                  # published init leaves speed_emb at 0 and the code logits flat
        model.speed_emb.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
        model.mel_head.weight.mul_(20)
    ids = IndexTextNormalizer().text_ids("HELLO THERE", tok)
    speech = torch.randn(1, 60, 1024, generator=torch.Generator().manual_seed(0))
    length = torch.tensor([60])
    with torch.no_grad():
        published, _ = model.inference_speech(speech, torch.tensor([ids]), speech, cond_lengths=length, emo_cond_lengths=length,
                                              do_sample=False, num_beams=1, repetition_penalty=1.0, max_generate_length=24)
    condition, emotion = speaker_latents(model, speech), emotion_vectors(model, speech)
    backbone_forward, steps = model.gpt.forward, []

    def recording_forward(*args, **kwargs):  # noqa: ANN002, ANN003
        cache = kwargs.get("cache")
        steps.append((kwargs["inputs_embeds"].shape[1], cache.get_seq_length() if cache is not None else 0))
        return backbone_forward(*args, **kwargs)

    model.gpt.forward = recording_forward
    cached = decode(model, condition, emotion, ids, 24, kv_cache=True)
    cached_steps, steps[:] = list(steps), []
    uncached = decode(model, condition, emotion, ids, 24, kv_cache=False)
    prompt = 34 + len(ids) + 2 + 1
    assert cached.codes == uncached.codes == published[0].tolist()[:24] and len(cached.codes) == 24
    assert cached_steps == [(prompt, 0)] + [(1, prompt + i) for i in range(len(cached_steps) - 1)]
    assert steps == [(prompt + i, 0) for i in range(len(steps))] and len(steps) == len(cached_steps) == 24


def _community_folder(cache_dir: Path, dest: Path, tokenizer) -> Path:  # noqa: ANN001
    """Write the cache's clips in the community preprocess_data.py layout (npy files + train/val manifests)."""

    for sub in ("codes", "condition", "emo_vec", "text_ids"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    lines = []
    for entry in open_cache(cache_dir, (CACHE_FORMAT,)).data["items"]:
        item = load_item(cache_dir, entry)
        for sub, key in (("codes", "codes"), ("condition", "condition"), ("emo_vec", "emo_vec"), ("text_ids", "text_ids")):
            np.save(dest / sub / f"{entry['id']}.npy", item[key])
        lines.append(json.dumps({
            "id": entry["id"], "audio_path": f"audio/{entry['id']}.wav", "text": entry["text"], "speaker": entry["speaker"],
            "language": entry["language"], "text_ids_path": f"text_ids/{entry['id']}.npy", "text_len": entry["n_text"],
            "codes_path": f"codes/{entry['id']}.npy", "code_len": entry["n_codes"], "condition_path": f"condition/{entry['id']}.npy",
            "condition_len": 32, "emo_vec_path": f"emo_vec/{entry['id']}.npy"}, ensure_ascii=False))
    (dest / "train_manifest.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (dest / "stats.json").write_text(json.dumps({"tokenizer": str(tokenizer.path)}))
    return dest


def test_import_community_processed_folder_validates_clips_and_refuses_another_tokenizer(ws: Path, trained, tmp_path: Path) -> None:
    from core.cli import main
    from core.families.indextts.community_import import import_processed

    cache = next(p.parent for p in (ws / "cache").glob("*/index.json"))
    am8 = load_tokenizer(ws / "tokenizers" / "am8.model")
    community = _community_folder(cache, tmp_path / "am_processed_data", am8)
    broken = json.loads((community / "train_manifest.jsonl").read_text().splitlines()[0])
    np.save(community / "codes" / "broken.npy", np.array([5, 8193]))
    broken.update(id="broken", codes_path="codes/broken.npy")
    with (community / "train_manifest.jsonl").open("a") as handle:
        handle.write(json.dumps(broken) + "\n" + "{not json\n")
    out = tmp_path / "imported"
    code = main(["dataset", "import", "--format", "indextts-processed", "--input", str(community), "--output", str(out),
                 "--tokenizer", str(am8.path), "--json"])
    assert code == 0
    index = open_cache(out, (CACHE_FORMAT,)).data
    assert len(index["items"]) == 4 and index["tokenizer"]["fingerprint"] == am8.fingerprint
    original = {e["id"]: load_item(cache, e) for e in open_cache(cache, (CACHE_FORMAT,)).data["items"]}
    for entry in index["items"]:
        item = load_item(out, entry)
        assert np.array_equal(item["codes"], original[entry["id"]]["codes"])
        assert np.array_equal(item["text_ids"], original[entry["id"]]["text_ids"])
    assert (out / "pairs.json").is_file()

    # the same folder preprocessed with another tokenizer (an Amharic-only SentencePiece model): refused
    from core.data.sample_text import AMHARIC_SENTENCES
    from core.families.indextts.gpt import IndexTextNormalizer
    from core.tokenizers.train import train_tokenizer

    train_tokenizer([line.upper() for line in AMHARIC_SENTENCES], "sentencepiece", 400, tmp_path / "other.model")
    other = load_tokenizer(tmp_path / "other.model")
    for entry in open_cache(cache, (CACHE_FORMAT,)).data["items"]:
        np.save(community / "text_ids" / f"{entry['id']}.npy", np.array(IndexTextNormalizer().text_ids(entry["text"], other)))
    (community / "stats.json").write_text(json.dumps({"tokenizer": str(other.path)}))
    with pytest.raises(InputError, match=r"built with another tokenizer \(.*other.model\): 4 of 4 clips' stored text ids differ"):
        import_processed(community, am8, tmp_path / "stale")
    assert not (tmp_path / "stale" / "index.json").exists()


@pytest.fixture(scope="module")
def speech(folder: Path, module_tmp: Path) -> Path:
    """The reduced folder plus speech models: a 1-layer GPT at the published width 1280, s2mel, CAMPPlus, BigVGAN."""
    from tests.indextts_helpers import build_speech_folder

    return build_speech_folder(folder, module_tmp / "IndexTTS-2-speech")


def test_synthesis_runs_gpt_s2mel_bigvgan_with_each_stage_shape_checked(folder: Path, ws: Path, speech: Path, tmp_path: Path) -> None:
    """Every stage runs on random weights of the real classes: the GPT (1 layer at the published
    width 1280, because s2mel's gpt_layer is hard-wired to 1280-wide latents), s2mel (CFM with 2
    diffusion steps, length regulator) and BigVGAN. What no test here can cover without weights:
    that the words are intelligible and the voice matches the reference."""
    from core.audio import read_audio
    from core.families.base import SynthesisRequest

    settings = _settings(speech)
    reference = sorted((ws / "datasets" / "am" / "audio").glob("*.wav"))[0]
    request = SynthesisRequest(
        checkpoint=speech / "gpt.pth", text="HELLO THERE", output=tmp_path / "out.wav", tokenizer=speech / "bpe.model",
        reference=reference, model_dir=speech, max_new_tokens=12, options={"temperature": 0, "diffusion_steps": 2},
    )
    report = get_model_family("indextts").synthesize(request, settings)
    wav, rate = read_audio(report["output"])
    assert rate == 22050 and report["speech_tokens"] >= 1
    assert report["mel_frames"] == int(report["speech_tokens"] * 1.72)          # IndexTTS2's code → mel-frame ratio
    assert wav.numel() == report["mel_frames"] * 256                      # BigVGAN hop 256
    with pytest.raises(InputError, match="pass --reference"):
        get_model_family("indextts").synthesize(SynthesisRequest(speech / "gpt.pth", "HI", tmp_path / "x.wav"), settings)
    with pytest.raises(InputError, match=r"s2mel.pth: missing; IndexTTS2 expects s2mel.pth in its model folder"):
        small = SynthesisRequest(checkpoint=folder / "gpt.pth", text="HI", output=tmp_path / "y.wav", tokenizer=folder / "bpe.model",
                                 reference=reference, model_dir=folder)
        get_model_family("indextts").synthesize(small, _settings(folder))


# ------------------------------------------------------------------ periodic evaluation


def _speech_run(model_dir: Path, **schedule) -> dict:  # noqa: ANN003
    """Two steps on the speech folder's GPT extended to am8 (only the 8 new rows train), evaluated on 2 clips."""
    return _run("am-eval", model_dir, "tokenizers/am8.model", 2, base_checkpoint="checkpoints/gpt_speech_am8.pt",
                freeze={"mode": "all-but-new-rows", "until": "auto"},
                schedule={"max_steps": 2, "val_every": 2, "save_every": 2, "log_every": 1, **schedule},
                eval={"sentences": "datasets/am/manifest.jsonl", "count": 2, "language": "am",
                      "synthesis": {"temperature": 0, "diffusion_steps": 2, "max_seconds": 0.5}})


def test_periodic_eval_speaks_through_the_family_and_the_doctor_wants_its_speech_files(
    speech: Path, ws: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """`schedule.eval_every` on an IndexTTS2 run: the saved checkpoint speaks the held-out sentences
    through the family's Speaker (GPT → s2mel → BigVGAN), eval.json and a `split: eval` metrics
    line are written, without a codec row (said in `absent_rows`). A model folder without s2mel.pth
    fails the doctor before training, naming the file and both fixes."""
    from core.audio import read_audio
    from core.checks.doctor import doctor_context_from_run_config, run_doctor
    from core.training.embeddings import extend_checkpoint
    from core.training.run_config import run_config_from_dict
    from core.recipe import train

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    settings = _settings(speech)
    extend_checkpoint(speech / "gpt.pth", speech / "bpe.model", ws / "tokenizers" / "am8.model",
                      ws / "checkpoints" / "gpt_speech_am8.pt", family="indextts", init="mean")
    broken = tmp_path / "no-s2mel"
    broken.mkdir()
    for path in speech.iterdir():
        if path.name != "s2mel.pth":
            (broken / path.name).symlink_to(path)
    config = run_config_from_dict(_speech_run(broken, eval_every=1))
    check = {c.id: c for c in run_doctor(doctor_context_from_run_config(config, None, settings), only="eval.").checks}["eval.speech_files"]
    assert check.status == "fail" and f"{broken / 's2mel.pth'}: missing" in check.message
    assert "Add that file" in check.fix and "schedule.eval_every: 0" in check.fix
    with pytest.raises(InputError, match=r"preflight doctor refused to start: eval\.speech_files: .*s2mel\.pth: missing"):
        train(config, None, settings)
    assert not (ws / "runs" / "am-eval" / "metrics.jsonl").exists()
    without = run_config_from_dict(_speech_run(broken))
    assert "eval.speech_files" not in {c.id for c in run_doctor(doctor_context_from_run_config(without, None, settings), only="eval.").checks}

    result = train(run_config_from_dict(_speech_run(speech, eval_every=1)), None, settings)
    assert result.state == "finished" and result.step == 2
    status = json.loads((result.run_dir / "status.json").read_text())
    assert "eval_error" not in status, status.get("eval_error")
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in lines if m["split"] == "eval"]
    assert len(evals) == 1 and evals[0]["step"] == 2
    assert evals[0]["mcd_db"] > 0 and 0 <= evals[0]["dtw_identification"] <= 1 and evals[0]["chance"] == 0.5
    assert not any(key.startswith("codec_") for key in evals[0])
    stored = json.loads((result.run_dir / "checkpoints" / "eval.json").read_text())["checkpoints"]
    entry = stored[Path(result.last_checkpoint).name]
    assert entry["family"] == "indextts" and entry["step"] == 2 and set(entry["rows"]) == {"model", "references"}
    assert "codec" in entry["absent_rows"] and entry["rows"]["model"]["mcd_db"] == evals[0]["mcd_db"]
    quality = entry["quality"]                        # the whole quality report ran on the family's outputs
    assert set(quality["flags"]) == {"no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored"}
    assert all(1 <= row["tokens"] <= 25 for row in quality["per_sentence"])
    assert quality["length_bounds_source"] == "training data"  # the run's cache of IndexTTS2 codes, via the checkpoint
    assert -1.0 <= quality["speaker_similarity"] <= 1.0 and 0.0 < quality["mos_estimate"] <= 5.0
    assert "val_base_loss" not in evals[0] or evals[0]["val_base_loss"] > 0
    # the run's evaluation set (eval_set.json): the 2 Amharic sentences; no English val clip, so no base set
    eval_set = json.loads((result.run_dir / "eval_set.json").read_text())
    assert [s["role"] for s in eval_set["sections"]] == ["new_language", "base_language"]
    assert entry["sections"]["new_language"]["used"] == 2
    assert entry["sections"]["base_language"]["note"].startswith("skipped: 0 en sentence(s)")
    assert status["best"]["metric"] == "quality" and status["best"]["step"] == 2   # best by quality: the default
    for clip in entry["audio"]:                       # at most 0.5 s of codes: 25 codes → 43 mel frames × 256 samples
        wav, rate = read_audio(clip)
        assert rate == 22050 and 0 < wav.numel() <= int(25 * 1.72) * 256
