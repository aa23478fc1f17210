"""Chatterbox T3 trains what it decodes: one sequence layout for the collate and every decoder.

A reduced random-initialised published T3 (one Llama layer) is overfit by LinguaForge's trainer on
four Amharic espeak clips of different text lengths (two voices, each clip prompted by its
speaker's other clip) in padded batches of four, then decoded greedily by LinguaForge's decoder
with and without the KV cache, by the published `T3.inference` called as docs/guides/chatterbox.md documents, and
by `synthesize` through the full published S3Gen. Each must give the clips' speech tokens back.
A second test shows padding cannot leak: per-sample losses alone equal those inside a padded batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.config import load_settings
from core.data.feature_cache import load_item, open_cache
from core.data.pairs import load_pairs
from core.families.chatterbox.t3 import ChatterboxConfig, build_t3
from core.families.chatterbox.decode import Sampling, decode_speech
from core.families.chatterbox.layout import LAYOUT, collate, condition_embeds, wrap_text
from core.training.run_config import run_config_from_dict
from core.training.state import step_checkpoints
from core.recipe import prepare_trainer
from tests.chatterbox_helpers import REDUCED, extend_to_amharic, make_chatterbox_speech_folder
from tests.data_helpers import make_espeak_dataset, run_cli

torch.set_num_threads(2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
GREEDY = Sampling(temperature=0.0, cfg_weight=0.0)
STEPS = 50


@pytest.fixture(scope="module")
def ws(module_tmp: Path) -> Any:
    root = module_tmp / "workspace"
    root.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    model_dir = make_chatterbox_speech_folder(root / "models" / "chatterbox")
    make_espeak_dataset(root / "datasets" / "am", per_language=4, languages=("am",))
    extend_to_amharic(root, model_dir)
    yield root
    patch.undo()


@pytest.fixture(scope="module")
def overfit(ws: Path) -> Any:
    """Return (trainer after STEPS steps over all four clips in one padded batch, its cache folder)."""
    config = run_config_from_dict({
        "name": "overfit", "family": "chatterbox", "model_dir": "models/chatterbox", "tokenizer": "tokenizers/am.json",
        "base_checkpoint": "checkpoints/t3_am.safetensors",
        "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prefetch": 0},
        "optim": {"lr": 1.0e-3, "weight_decay": 0.0, "warmup_steps": 5, "schedule": "constant"},
        "batch": {"size": 4},
        "schedule": {"max_steps": STEPS, "val_every": STEPS, "save_every": STEPS, "keep_last": 1, "log_every": 10},
    }, "overfit.yaml")
    trainer = prepare_trainer(config, settings=load_settings())
    trainer.run()
    return trainer, open_cache_dir(ws)


def open_cache_dir(ws: Path) -> Path:
    """Return the one feature cache the run built."""
    (index,) = [p.parent for p in (ws / "cache").glob("*/index.json")]
    return index


def _clips(cache_dir: Path) -> list[dict[str, Any]]:
    """Return each training target with its text ids, codes and its prompt clip's prompt, speaker embedding and id."""
    index = open_cache(cache_dir)
    entries = {e["id"]: e for e in index.items}
    pairs = load_pairs(cache_dir)
    clips = []
    for target_id, prompts in sorted(pairs.items()):
        target = load_item(index.path, entries[target_id])
        prompt = load_item(index.path, entries[prompts[0]])
        clips.append({"id": target_id, "prompt_id": prompts[0], "text_ids": torch.from_numpy(target["text_ids"].astype("int64")),
                      "codes": torch.from_numpy(target["codes"].astype("int64")),
                      "prompt": torch.from_numpy(prompt["prompt"].astype("int64")),
                      "speaker_emb": torch.from_numpy(prompt["speaker_emb"].astype("float32"))})
    return clips


def _reproduced(generated: list[int], codes: list[int]) -> float:
    """Return the share of the clip's tokens generated at their own position."""
    return sum(a == b for a, b in zip(generated, codes)) / len(codes)


def test_padding_cannot_leak_into_a_samples_loss() -> None:
    """The token-weighted losses of samples alone equal the loss of the same samples in one padded batch."""
    torch.manual_seed(0)
    model = build_t3(ChatterboxConfig(text_tokens_dict_size=2454, **REDUCED)).eval()
    g = torch.Generator().manual_seed(1)
    samples = [{"text_ids": torch.randint(1, 2454, (n_text,), generator=g), "codes": torch.randint(0, 6561, (n_codes,), generator=g),
                "prompt": torch.randint(0, 6561, (n_prompt,), generator=g), "speaker_emb": torch.randn(256, generator=g)}
               for n_text, n_codes, n_prompt in ((5, 40, 150), (17, 12, 90), (11, 60, 150))]
    with torch.no_grad():
        alone = [model(batch=collate([s])) for s in samples]
        batch = collate(samples)
        together = model(batch=batch)
    assert batch["text_ids"].shape == (3, 19) and batch["prompt"].shape == (3, 150)  # padded: lengths differ
    text_counts = [len(s["text_ids"]) + 1 for s in samples]
    speech_counts = [len(s["codes"]) + 1 for s in samples]
    for name, counts in (("text_loss", text_counts), ("mel_loss", speech_counts)):
        weighted = sum(float(out[name]) * n for out, n in zip(alone, counts)) / sum(counts)
        assert float(together[name]) == pytest.approx(weighted, rel=1e-5, abs=1e-5), name
    assert (int(together["text_tokens"]), int(together["mel_tokens"])) == (sum(text_counts), sum(speech_counts))
    assert sum(text_counts) + sum(speech_counts) == batch["n_tokens"]


def test_an_overfit_t3_decodes_its_clips_back_with_every_decoder(ws: Path, overfit: Any) -> None:
    trainer, cache_dir = overfit
    model = trainer.model.eval()
    clips = _clips(cache_dir)
    assert len(clips) == 4 and len({len(c["text_ids"]) for c in clips}) >= 3, "clips must differ in text length"
    with torch.no_grad():
        top1 = float(model(batch=collate(clips))["mel_top1"])
    assert top1 >= 0.99, f"teacher-forced top-1 {top1:.3f} after {STEPS} steps"
    assert trainer._meta().layout == LAYOUT

    from chatterbox.models.t3.modules.cond_enc import T3Cond

    for clip in clips:
        codes = clip["codes"].tolist()
        text = wrap_text(clip["text_ids"])
        cond = condition_embeds(model, clip["speaker_emb"][None], [clip["prompt"]])[0]
        cached = decode_speech(model, cond, text, len(codes) + 5, GREEDY, use_cache=True)
        uncached = decode_speech(model, cond, text, len(codes) + 5, GREEDY, use_cache=False)
        assert cached == uncached, clip["id"]
        print(f"\n{clip['id']}: {len(clip['text_ids'])} text ids, {len(codes)} codes; LinguaForge decoder reproduced "
              f"{_reproduced(cached.tokens, codes):.3f}, generated {len(cached.tokens)}, stopped {cached.stopped}")
        assert _reproduced(cached.tokens, codes) >= 0.95 and cached.stopped and abs(len(cached.tokens) - len(codes)) <= 1, \
            (clip["id"], _reproduced(cached.tokens, codes), len(cached.tokens), len(codes))
        # The published call that matches the layout (docs/guides/chatterbox.md, export notes): no initial speech tokens,
        # the text twice (its CFG batch), argmax by a vanishing temperature, no penalty or filtering.
        t3_cond = T3Cond(speaker_emb=clip["speaker_emb"][None], cond_prompt_speech_tokens=clip["prompt"][None],
                         emotion_adv=0.5 * torch.ones(1, 1, 1))
        published = model.inference(t3_cond=t3_cond, text_tokens=torch.stack([text, text]),
                                     initial_speech_tokens=torch.zeros(2, 0, dtype=torch.long), max_new_tokens=len(codes) + 5,
                                     temperature=1e-6, cfg_weight=0.0, repetition_penalty=1.0, min_p=0.0, top_p=1.0)[0].tolist()
        assert published[-1] == 6562 and published[:-1] == cached.tokens, clip["id"]


def test_synthesize_speaks_an_overfit_clip_back_as_its_tokens(ws: Path, overfit: Any) -> None:
    """`synthesize` (no --family: the checkpoint names it) with the clip's prompt clip as the reference."""
    trainer, cache_dir = overfit
    clip = _clips(cache_dir)[0]
    rows = {r["id"]: r for r in map(json.loads, (ws / "datasets" / "am" / "manifest.jsonl").read_text().splitlines())}
    target, prompt = rows[clip["id"]], rows[clip["prompt_id"]]
    checkpoint = step_checkpoints(trainer.run_dir)[-1]  # no val split, so no best.pt
    voice = ("--checkpoint", checkpoint, "--language", "am", "--text", target["text"],
             "--reference", ws / "datasets" / "am" / prompt["audio"], "--temperature", "0")
    refused = run_cli("synthesize", *voice, "--option", "top_k=5", "--output", ws / "said.wav")
    assert refused.code == 2 and "--option top_k" in refused.stderr and "cfg_weight" in refused.stderr
    assert not (ws / "said.wav").exists()
    result = run_cli("synthesize", *voice, "--option", "cfg_weight=0", "--option", "cfm_steps=2",
                     "--output", ws / "said.wav", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    codes = clip["codes"].tolist()
    assert _reproduced(report["tokens"], codes) >= 0.95 and report["stopped"], (report["tokens"], codes)
    assert (ws / "said.wav").stat().st_size > 1000
