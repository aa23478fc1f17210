"""Training CSM through LinguaForge's trainer (`family: csm`), on the reduced random-initialised CSM + Mimi folder.

One module workspace (tests/csm_helpers.py): the folder in the sesame/csm-1b layout, four Amharic espeak clips of
two voices, the folder's Llama-3-layout tokenizer merged with Amharic and the model's `embed_text_tokens` grown to
it (`embeddings extend --family csm`, mean rows). The trainer builds the Mimi codes through the one feature-cache
engine, lays each clip out after a prompt clip of its speaker (the context segment) in padded batches, logs the
backbone's and the depth decoder's losses apart, and keeps the base rows bit-identical. The overfit model decodes
each clip's frames back after its prompt clip — through LinguaForge's decoder with and without the KV cache and
through the published `generate` of its export, which `CsmForConditionalGeneration` and `AutoProcessor` load strictly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.cli import main as cli_main
from core.config import load_settings
from core.data.feature_cache import load_item, open_cache
from core.data.manifest import read_manifest
from core.data.pairs import load_pairs
from core.families.csm.decode import decode_frames, frame_steps
from core.families.csm.layout import layout_ids
from core.families.registry import get_model_family
from core.recipe import prepare_trainer, train
from core.tokenizers.tokenizer import load_tokenizer
from core.training.run_config import run_config_from_dict
from core.training.state import step_checkpoints
from tests.adapter_helpers import LORA, assert_adapter_only
from tests.chatterbox_helpers import with_pieces
from tests.csm_helpers import CODEBOOK_SIZE, CODEBOOKS, TEXT_ROWS, csm_workspace

torch.set_num_threads(2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
STEPS = 150


@pytest.fixture(scope="module")
def ws(module_tmp: Path) -> Any:
    root = module_tmp / "workspace"
    root.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    yield csm_workspace(root)
    patch.undo()


def _short(steps: int) -> dict[str, int]:
    return {"max_steps": steps, "val_every": steps, "save_every": steps, "keep_last": 1, "log_every": 1}


def _config(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name, "family": "csm", "model_dir": "models/csm", "tokenizer": "tokenizers/am.json",
        "base_checkpoint": "checkpoints/csm_am.safetensors", "model": {"dropout": 0.0},
        "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prefetch": 0},
        "optim": {"lr": 3.0e-3, "weight_decay": 0.1, "warmup_steps": 3, "schedule": "constant"},
        "batch": {"size": 4},
        "schedule": {"max_steps": STEPS, "val_every": STEPS, "save_every": STEPS, "keep_last": 1, "log_every": 5},
    }
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def trained(ws: Path) -> Any:
    """Return (the trainer after STEPS steps over the four clips in one padded batch, its cache folder)."""
    trainer = prepare_trainer(run_config_from_dict(_config("am"), "am.yaml"), settings=load_settings())
    trainer.run()
    (cache,) = [p.parent for p in (ws / "cache").glob("*/index.json")]
    return trainer, cache


def test_the_mimi_codes_come_through_the_feature_cache(ws: Path, trained: Any) -> None:
    _, cache = trained
    index = open_cache(cache)
    data = json.loads((cache / "index.json").read_text(encoding="utf-8"))
    assert data["family"] == "csm" and data["codec"]["codebooks"] == CODEBOOKS and len(index.items) == 4
    tokenizer = load_tokenizer(ws / "tokenizers" / "am.json")
    for entry in index.items:
        item = load_item(cache, entry)
        frames = item["codes"].shape[0]
        assert item["depth_codes"].shape == (frames, CODEBOOKS - 1) and frames > 10
        assert item["text_ids"].tolist() == tokenizer.encode(f"[0]{entry['text']}")
        assert item["text_ids"].max() >= TEXT_ROWS                           # the new Amharic ids are used


def test_the_backbone_and_depth_losses_are_logged_apart_and_fall(ws: Path, trained: Any) -> None:
    rows = [json.loads(line) for line in (ws / "runs" / "am" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("split") == "train" and "backbone_loss" in r]
    assert len(train) >= 5 and all("depth_loss" in r and "mel_top1" in r for r in train)
    assert train[-1]["backbone_loss"] < 0.5 * train[0]["backbone_loss"]
    assert train[-1]["depth_loss"] < train[0]["depth_loss"]
    assert train[-1]["loss"] == pytest.approx(train[-1]["backbone_loss"] + train[-1]["depth_loss"], rel=1e-3)


def test_training_keeps_the_base_rows_bit_identical_and_records_the_layout(ws: Path, trained: Any) -> None:
    trainer, _ = trained
    base = load_checkpoint(ws / "checkpoints" / "csm_am.safetensors")
    last = step_checkpoints(trainer.run_dir)[-1]
    saved = load_checkpoint(last)
    key = "embed_text_tokens.weight"
    assert torch.equal(saved.state_dict[key][:TEXT_ROWS], base.state_dict[key][:TEXT_ROWS])
    assert not torch.equal(saved.state_dict[key][TEXT_ROWS:], base.state_dict[key][TEXT_ROWS:])  # the new rows learnt
    status = json.loads((ws / "runs" / "am" / "status.json").read_text())
    assert status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"]
    assert saved.meta["family"] == "csm" and saved.meta["base_size"] == TEXT_ROWS
    assert saved.meta["layout"] == {"family": "csm", "version": 1}
    mimi = {k: v for k, v in base.state_dict.items() if k.startswith("codec_model.")}
    assert all(torch.equal(saved.state_dict[k], v) for k, v in mimi.items() if k in saved.state_dict)


def _clips(ws: Path, cache: Path) -> list[dict[str, Any]]:
    """Return each trained (target, prompt) pair: the target's text ids and frames, the prompt's, and the prompt's wav."""
    index = open_cache(cache)
    entries = {e["id"]: e for e in index.items}
    paths = {row.id: row.path for row in read_manifest(ws / "datasets" / "am" / "manifest.jsonl")[0]}
    clips = []
    for target, prompts in sorted(load_pairs(cache).items()):
        segments = []
        for clip in (target, prompts[0]):
            item = load_item(cache, entries[clip])
            frames = torch.cat([torch.from_numpy(item["codes"]).long()[:, None], torch.from_numpy(item["depth_codes"]).long()], 1)
            segments.append((torch.from_numpy(item["text_ids"]).long(), frames))
        clips.append({"target": segments[0], "prompt": segments[1], "prompt_wav": paths[prompts[0]],
                      "prompt_text": entries[prompts[0]]["text"], "text": entries[target]["text"]})
    return clips


def _first_codebook_match(frames: torch.Tensor, expected: torch.Tensor) -> float:
    n = min(len(frames), len(expected))
    return float((frames[:n, 0] == expected[:n, 0]).sum()) / len(expected)


def test_an_overfit_csm_decodes_its_clips_back_with_and_without_the_cache(ws: Path, trained: Any) -> None:
    trainer, cache = trained
    family = get_model_family("csm")
    tokenizer = load_tokenizer(ws / "tokenizers" / "am.json")
    saved = load_checkpoint(step_checkpoints(trainer.run_dir)[-1])
    model = family.build_model(saved.meta["model_config"], frozen_rows=0).eval()
    family.load_weights(model, saved.state_dict, "last", tokenizer)
    ids = layout_ids(tokenizer, saved.meta["model_config"]["config"])
    for clip in _clips(ws, cache):
        expected = clip["target"][1]
        cached, stopped = decode_frames(model, ids, clip["prompt"], clip["target"][0], len(expected) + 10)
        plain, plain_stopped = decode_frames(model, ids, clip["prompt"], clip["target"][0], len(expected) + 10, use_cache=False)
        assert torch.equal(cached, plain) and stopped == plain_stopped
        print(f"\nour decoder: {_first_codebook_match(cached, expected):.3f} of {len(expected)} first codes, "
              f"{len(cached)} frames")
        assert _first_codebook_match(cached, expected) >= 0.95, (len(cached), len(expected))
        assert stopped and abs(len(cached) - len(expected)) <= 2


def test_the_export_loads_strictly_and_the_published_generate_decodes_the_clips_back(ws: Path, trained: Any) -> None:
    from transformers import AutoProcessor, CsmForConditionalGeneration

    from core.audio import read_audio

    trainer, cache = trained
    settings = load_settings()
    settings.data["families"] = {"csm": {"model_dir": str(ws / "models" / "csm")}}
    out = ws / "export"
    written = get_model_family("csm").export(step_checkpoints(trainer.run_dir)[-1], out, None, settings)
    assert {p.name for p in written} >= {"config.json", "model.safetensors", "tokenizer.json", "linguaforge.json",
                                         "tokenizer_config.json", "chat_template.jinja"}
    model, info = CsmForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    processor = AutoProcessor.from_pretrained(out)
    tokenizer = load_tokenizer(ws / "tokenizers" / "am.json")
    assert len(processor.tokenizer) == tokenizer.size == model.config.text_vocab_size
    for clip in _clips(ws, cache):
        conversation = [{"role": "0", "content": [{"type": "text", "text": clip["prompt_text"]},
                                                  {"type": "audio", "path": read_audio(clip["prompt_wav"], 24000)[0].numpy()}]},
                        {"role": "0", "content": [{"type": "text", "text": clip["text"]}]}]
        inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        expected = clip["target"][1]
        with torch.no_grad():
            frames = model.generate(**inputs, do_sample=False, depth_decoder_do_sample=False,
                                    max_new_tokens=len(expected) + 10)[0]
        ended = (frames[:, :-1] == 0).all(-1).nonzero()
        length = int(ended[0]) if len(ended) else len(frames)
        print(f"\npublished generate: {_first_codebook_match(frames[:length], expected):.3f} of {len(expected)} first "
              f"codes, {length} frames")
        assert _first_codebook_match(frames[:length], expected) >= 0.95
        assert len(ended) and abs(length - len(expected)) <= 2


def test_synthesize_speaks_in_a_clips_voice_what_our_decoder_makes_through_the_folders_mimi_whole_and_streamed(
    ws: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """`synthesize` of the grown checkpoint (untrained: it never stops, so --max-new-tokens ends it) in the voice of
    a training clip: the wav is the folder's Mimi decoding the frames of LinguaForge's greedy decoder, picking
    among Mimi's codes, after that clip's context segment (its transcript found in the dataset's manifest);
    streamed, it is as long."""
    import soundfile

    from core.data.manifest import load_manifest_rows
    from core.families.csm.features import encode_clip, load_mimi
    from core.families.csm.layout import segment_text_ids
    from core.audio import read_audio
    from core.families.csm.model import CsmModelConfig, read_folder_config

    checkpoint, frames_asked = ws / "checkpoints" / "csm_am.safetensors", 12
    prompt, target = load_manifest_rows(ws / "datasets" / "am" / "manifest.jsonl")[:2]
    runs = {}
    for mode in ("whole", "stream"):
        out = ws / "outputs" / f"{mode}.wav"
        code = cli_main(["synthesize", "--checkpoint", str(checkpoint), "--model-dir", str(ws / "models" / "csm"),
                         "--text", target.text, "--reference", str(prompt.path), "--temperature", "0",
                         "--max-new-tokens", str(frames_asked), "--output", str(out), "--json",
                         *(["--stream"] if mode == "stream" else [])])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        report = json.loads(captured.out)
        wav, rate = soundfile.read(out, dtype="float32")
        runs[mode] = (report, torch.from_numpy(wav))
        assert report["family"] == "csm" and rate == 24000 and report["reference_text"] == prompt.text
        assert report["speech_tokens"] == frames_asked and not report["stopped"] and len(wav) == 1920 * frames_asked
    assert runs["stream"][0]["chunks"] > 1 == runs["whole"][0]["chunks"]
    family, tokenizer = get_model_family("csm"), load_tokenizer(ws / "tokenizers" / "am.json")
    loaded = load_checkpoint(checkpoint)
    config = read_folder_config(ws / "models" / "csm")
    model = family.build_model(CsmModelConfig(tokenizer.size, config), frozen_rows=0).eval()
    family.load_weights(model, loaded.state_dict, str(checkpoint), tokenizer)
    mimi = load_mimi(config, ws / "models" / "csm" / "model.safetensors")
    context = (torch.tensor(segment_text_ids(tokenizer, prompt.text)),
               torch.from_numpy(encode_clip(mimi, read_audio(prompt.path, 24000)[0], CODEBOOKS)).long())
    steps = frame_steps(model, layout_ids(tokenizer, config), context, torch.tensor(segment_text_ids(tokenizer, target.text)),
                        frames_asked, pick=lambda logits: logits[..., :CODEBOOK_SIZE].argmax(-1))  # Mimi's codes only
    frames = torch.stack(list(steps))
    with torch.no_grad():
        audio = mimi.decode(frames.T[None]).audio_values[0, 0]
    assert torch.allclose(runs["whole"][1], audio.clamp(-1, 1), atol=1e-4)     # the wav is 16-bit PCM, clipped
    assert len(runs["stream"][1]) == len(audio)


def test_lora_adapts_the_backbone_and_depth_decoder_and_keeps_the_base_rows(ws: Path, trained: Any) -> None:
    result = train(run_config_from_dict(_config("lora", adapter=LORA, schedule=_short(2)), "lora.yaml"), settings=load_settings())
    assert result.state == "finished" and result.base_rows_sha256["start"] == result.base_rows_sha256["now"] is not None
    record = assert_adapter_only(Path(result.last_checkpoint), {"embed_text_tokens.weight_new"})
    adapted = set(record["modules"])
    assert any(n.startswith("backbone_model.layers.") for n in adapted) and any(n.startswith("depth_decoder.") for n in adapted)
    trained_keys = set(load_checkpoint(Path(result.last_checkpoint)).state_dict)
    assert not any(k.startswith("codec_model.") for k in trained_keys)      # Mimi never trains


def test_resume_after_the_vocabulary_grew_restores_every_weight_and_remaps_adam_rows(ws: Path) -> None:
    old = load_tokenizer(ws / "tokenizers" / "am.json")
    with_pieces(old.path, ["ሰላምታ", "qzxw"], ws / "tokenizers" / "am2.json")
    first = train(run_config_from_dict(_config("grow", schedule=_short(2)), "grow.yaml"), settings=load_settings())
    saved = load_checkpoint(Path(first.last_checkpoint))
    grown = _config("grow", tokenizer="tokenizers/am2.json", schedule=_short(4))
    trainer = prepare_trainer(run_config_from_dict(grown, "grow2.yaml"), settings=load_settings(), resume="auto")
    assert trainer.step == 2 and trainer.scheduler.last_epoch == 2
    key = "embed_text_tokens.weight"
    assert trainer.grown_rows == {f"{key}_new": old.size - TEXT_ROWS}
    weights = trainer.model.state_dict()
    assert weights[key].shape[0] == old.size + 2 and torch.isfinite(weights[key][old.size:]).all()
    assert torch.equal(weights[key][:old.size], saved.state_dict[key])         # every trained row as saved
    assert all(torch.equal(weights[k], v) for k, v in saved.state_dict.items() if k != key)
    state = trainer.optimizer.state[trainer.model.embed_text_tokens.weight_new]
    before = saved.extra["optimizer"]["state"][saved.extra["optimizer_names"].index(f"{key}_new")]
    for moment in ("exp_avg", "exp_avg_sq"):
        n = before[moment].shape[0]
        assert n == old.size - TEXT_ROWS and state[moment].shape[0] == n + 2
        assert torch.equal(state[moment][:n], before[moment]) and not state[moment][n:].any()
    result = trainer.run()
    assert result.state == "finished" and result.step == 4
    assert result.base_rows_sha256["start"] == result.base_rows_sha256["now"] == first.base_rows_sha256["start"]
    final = load_checkpoint(Path(result.last_checkpoint)).state_dict[key]
    assert final.shape[0] == old.size + 2
    assert torch.equal(final[:TEXT_ROWS], load_checkpoint(ws / "checkpoints" / "csm_am.safetensors").state_dict[key][:TEXT_ROWS])
