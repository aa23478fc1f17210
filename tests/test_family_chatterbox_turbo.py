"""Chatterbox-Turbo as a model family, on a random-initialised REAL Turbo T3 at reduced size (GPT-2, 2 × 256).

One module workspace: the reduced Turbo folder in the published layout with GPT-2's real tokenizer folder
(tests/turbo_helpers.py), four Amharic espeak clips of different lengths (two voices), the tokenizer merged
with Amharic (`[am]`) and the T3 extended to it. The T3 is overfit by LinguaForge's trainer in padded
batches, then decoded greedily back by LinguaForge's decoder with and without the KV cache and by the
published `T3.inference_turbo` called as the export notes document; a sample's loss is the same alone and
in a padded batch. Then: frozen base rows, detection (Turbo vs Nano by shapes), the doctor, LoRA, and the
export loading strictly into the published T3 built the Turbo way with an `AutoTokenizer` folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from core.checkpoint import load_checkpoint
from core.checks.doctor import doctor_context_from_run_config, run_doctor
from core.config import load_settings
from core.errors import InputError
from core.families import detect_family, explain_family
from core.families.chatterbox.layout import t3_cond_embeds
from core.families.chatterbox_turbo.decode import TurboSampling, decode_speech
from core.families.chatterbox_turbo.layout import LAYOUT, collate
from core.families.chatterbox_turbo.t3 import TurboConfig, backbone_shape, build_turbo_t3, gpt2_config_name, turbo_hparams
from core.families.registry import get_model_family
from core.recipe import prepare_trainer, train
from core.tokenizers.tokenizer import load_tokenizer
from core.training.run_config import run_config_from_dict
from core.training.state import step_checkpoints
from tests.adapter_helpers import LORA, assert_adapter_only
from tests.test_layout_chatterbox import _clips, _reproduced
from tests.turbo_helpers import BASE_ROWS, REDUCED, turbo_workspace

torch.set_num_threads(2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
GREEDY = TurboSampling(temperature=0.0)
# Trained without dropout (`model.dropout: 0`; GPT-2's published 0.1 is the default): the proof is about the layout,
# and under dropout the memorised decode of a clip comes and goes between checkpoints. Without it every clip
# decodes back exactly from step 70 on.
STEPS = 80


@pytest.fixture(scope="module")
def ws(module_tmp: Path) -> Any:
    root = module_tmp / "workspace"
    root.mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    yield turbo_workspace(root)
    patch.undo()


def _config(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name, "family": "chatterbox-turbo", "model_dir": "models/turbo", "tokenizer": "tokenizers/am.json",
        "base_checkpoint": "checkpoints/t3_am.safetensors", "model": {"dropout": 0.0},
        "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prefetch": 0},
        "optim": {"lr": 3.0e-3, "weight_decay": 0.1, "warmup_steps": 5, "schedule": "constant"},
        "batch": {"size": 4},
        "schedule": {"max_steps": STEPS, "val_every": STEPS, "save_every": STEPS, "keep_last": 1, "log_every": 10},
    }
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def overfit(ws: Path) -> Any:
    """Return (the trainer after STEPS steps over the four clips in one padded batch, its cache folder)."""
    trainer = prepare_trainer(run_config_from_dict(_config("overfit"), "overfit.yaml"), settings=load_settings())
    trainer.run()
    (cache,) = [p.parent for p in (ws / "cache").glob("*/index.json")]
    return trainer, cache


def _published_t3(state: dict[str, torch.Tensor], rows: int) -> torch.nn.Module:
    """The published T3 built as `ChatterboxTurboTTS.from_local` builds it (at `rows` text rows), loaded strictly,
    GPT-2's token table then deleted as `from_local` does."""
    from chatterbox.models.t3 import T3

    t3 = T3(turbo_hparams(TurboConfig(text_tokens_dict_size=rows, **REDUCED)))
    t3.load_state_dict(state, strict=True)
    del t3.tfmr.wte
    return t3.eval()


def test_turbo_and_nano_are_told_apart_by_their_shapes() -> None:
    meta = "meta"
    for variant, layers, width, published in (("turbo", 24, 1024, "GPT2_medium"), ("nano", 12, 768, "GPT2_small")):
        state = {f"tfmr.h.{i}.ln_1.weight": torch.empty(width, device=meta) for i in range(layers)}
        state.update({"tfmr.wpe.weight": torch.empty(8196, width, device=meta), "tfmr.wte.weight": torch.empty(50276, width, device=meta),
                      "text_emb.weight": torch.empty(BASE_ROWS, width, device=meta), "text_head.weight": torch.empty(BASE_ROWS, width, device=meta)})
        config = TurboConfig(text_tokens_dict_size=BASE_ROWS, **backbone_shape(state, "t3"))
        assert config.variant == variant and gpt2_config_name(config) == published
        decision = explain_family(state, None, BASE_ROWS)
        assert decision.family.name == "chatterbox-turbo" and "tfmr.h.*" in decision.reason
    multilingual = {"text_emb.weight": torch.zeros(2454, 4), "text_head.weight": torch.zeros(2454, 4), "tfmr.layers.0.x": torch.zeros(1)}
    assert detect_family(multilingual).name == "chatterbox"     # the GPT-2 markers are required for Turbo
    with pytest.raises(Exception, match="Llama T3: use family chatterbox"):
        backbone_shape(multilingual, "t3_mtl23ls_v2.safetensors")


def test_the_turbo_speaker_takes_generates_sampling_options_within_their_ranges() -> None:
    family = get_model_family("chatterbox-turbo")
    assert family.check_speech_options({"top_k": "50", "top_p": 0.9, "repetition_penalty": 1.2, "cfm_steps": 2}) == \
        {"top_k": 50, "top_p": 0.9, "repetition_penalty": 1.2, "cfm_steps": 2}
    with pytest.raises(InputError, match="cfg_weight: not an option of a chatterbox-turbo speaker; it takes top_k"):
        family.check_speech_options({"cfg_weight": 0.5})   # generate() has no CFG
    with pytest.raises(InputError, match="top_k: 2.5 is not a whole number"):
        family.check_speech_options({"top_k": 2.5})


def test_padding_cannot_leak_into_a_samples_loss() -> None:
    """Per-sample losses alone equal the loss of the same samples in one padded batch (prompts of 375, 90, 200)."""
    torch.manual_seed(0)
    model = build_turbo_t3(TurboConfig(text_tokens_dict_size=BASE_ROWS + 20, **REDUCED), frozen_rows=BASE_ROWS).eval()
    g = torch.Generator().manual_seed(1)
    samples = [{"text_ids": torch.randint(0, BASE_ROWS + 20, (n_text,), generator=g), "codes": torch.randint(0, 6561, (n_codes,), generator=g),
                "prompt": torch.randint(0, 6561, (n_prompt,), generator=g), "speaker_emb": torch.randn(256, generator=g)}
               for n_text, n_codes, n_prompt in ((5, 40, 400), (17, 12, 90), (11, 60, 200))]
    with torch.no_grad():
        alone = [model(batch=collate([s])) for s in samples]
        batch = collate(samples)
        together = model(batch=batch)
    assert batch["text_ids"].shape == (3, 17) and batch["prompt"].shape == (3, 375)  # padded; the prompt cut at 375
    text_counts = [len(s["text_ids"]) for s in samples]
    speech_counts = [len(s["codes"]) + 1 for s in samples]
    for name, counts in (("text_loss", text_counts), ("mel_loss", speech_counts)):
        weighted = sum(float(out[name]) * n for out, n in zip(alone, counts)) / sum(counts)
        assert float(together[name]) == pytest.approx(weighted, rel=1e-5, abs=1e-5), name
    assert (int(together["text_tokens"]), int(together["mel_tokens"])) == (sum(text_counts), sum(speech_counts))
    assert sum(text_counts) + sum(speech_counts) == batch["n_tokens"]


def test_an_overfit_turbo_t3_decodes_its_clips_back_with_every_decoder(ws: Path, overfit: Any) -> None:
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    trainer, cache_dir = overfit
    model = trainer.model.eval()
    clips = _clips(cache_dir)
    assert len(clips) == 4 and len({len(c["codes"]) for c in clips}) >= 3, "clips must differ in length"
    with torch.no_grad():
        top1 = float(model(batch=collate(clips))["mel_top1"])
    assert top1 >= 0.99, f"teacher-forced top-1 {top1:.3f} after {STEPS} steps"
    assert trainer._meta().layout == LAYOUT
    published = _published_t3(model.state_dict(), model.text_emb.rows)
    defaults = []
    for clip in clips:
        codes = clip["codes"].tolist()
        t3_cond = T3Cond(speaker_emb=clip["speaker_emb"][None], cond_prompt_speech_tokens=clip["prompt"][None])
        cond = t3_cond_embeds(model, t3_cond)
        cached = decode_speech(model, cond, clip["text_ids"], len(codes) + 5, GREEDY, use_cache=True)
        uncached = decode_speech(model, cond, clip["text_ids"], len(codes) + 5, GREEDY, use_cache=False)
        assert cached == uncached, clip["id"]
        print(f"\n{clip['id']}: {len(clip['text_ids'])} text ids, {len(codes)} codes; reproduced "
              f"{_reproduced(cached.tokens, codes):.3f}, generated {len(cached.tokens)}, stopped {cached.stopped}")
        assert _reproduced(cached.tokens, codes) >= 0.95 and cached.stopped and abs(len(cached.tokens) - len(codes)) <= 1, \
            (clip["id"], _reproduced(cached.tokens, codes), len(cached.tokens), len(codes))
        # the documented published call (family PUBLISHED_INFERENCE): generate()'s inference_turbo, top_k=1
        argmax = published.inference_turbo(t3_cond, clip["text_ids"][None], temperature=1.0, top_k=1, top_p=1.0,
                                           repetition_penalty=1.0, max_gen_len=len(codes) + 5)[0].tolist()
        assert argmax == cached.tokens, clip["id"]
        torch.manual_seed(0)  # generate()'s defaults sample in the same layout
        sampled = published.inference_turbo(t3_cond, clip["text_ids"][None], max_gen_len=len(codes) + 5)[0].tolist()
        defaults.append(_reproduced(sampled, codes))
    print(f"\ngenerate()'s default sampling reproduced {sum(defaults) / len(defaults):.3f} of the tokens (mean of 4 clips)")
    assert sum(defaults) / len(defaults) >= 0.9  # the default call samples in the trained layout too (measured: 1.000)


def test_training_keeps_the_base_rows_bit_identical_and_records_the_layout(ws: Path, overfit: Any) -> None:
    trainer, _ = overfit
    status = json.loads((trainer.run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["base_rows_sha256"]["start"] == status["base_rows_sha256"]["now"] is not None
    base = load_checkpoint(ws / "checkpoints" / "t3_am.safetensors").state_dict
    final = load_checkpoint(step_checkpoints(trainer.run_dir)[-1])
    assert final.meta["family"] == "chatterbox-turbo" and final.meta["model_config"]["variant"] == "turbo"
    assert final.meta["layout"] == LAYOUT and final.meta["rows"] == load_tokenizer(ws / "tokenizers" / "am.json").size
    for key in ("text_emb.weight", "text_head.weight"):
        assert torch.equal(final.state_dict[key][:BASE_ROWS], base[key][:BASE_ROWS]), key
        assert not torch.equal(final.state_dict[key][BASE_ROWS:], base[key][BASE_ROWS:]), key
    assert torch.equal(final.state_dict["tfmr.wte.weight"], base["tfmr.wte.weight"])   # GPT-2's unread table: a buffer
    assert not torch.equal(final.state_dict["speech_head.bias"], base["speech_head.bias"])


def test_the_export_loads_strictly_into_the_published_t3_with_an_autotokenizer_folder(ws: Path, overfit: Any) -> None:
    from transformers import AutoTokenizer

    trainer, _ = overfit
    settings = load_settings()
    settings.data["families"] = {"chatterbox-turbo": {"model_dir": str(ws / "models" / "turbo")}}
    out = ws / "export"
    written = get_model_family("chatterbox-turbo").export(step_checkpoints(trainer.run_dir)[-1], out, None, settings)
    assert [p.name for p in written] == ["t3_turbo_v1.safetensors", "tokenizer.json", "tokenizer_config.json", "linguaforge.json",
                                         "ve.safetensors", "s3gen_meanflow.safetensors", "speak_chatterbox_turbo.py"]
    note = json.loads((out / "linguaforge.json").read_text())
    rows = note["text_tokens_dict_size"]
    assert rows > BASE_ROWS and note["variant"] == "turbo" and note["language_tags"] == ["am"] and note["layout"] == LAYOUT
    assert "top_k=1" in note["published_inference"] and note["missing_for_published_inference"] == []
    assert note["t3_backbone"]["llama_config"]["n_layer"] == REDUCED["n_layers"]
    _published_t3(load_file(str(out / "t3_turbo_v1.safetensors")), rows)      # strict, at the new size
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == rows and tokenizer("[am]ሰላም").input_ids == load_tokenizer(ws / "tokenizers" / "am.json").encode("[am]ሰላም")


def _doctor(config: dict[str, Any]) -> dict[str, Any]:
    ctx = doctor_context_from_run_config(run_config_from_dict(config, "doc.yaml"), None, load_settings())
    return {c.id: c for c in run_doctor(ctx).checks}


def test_doctor_passes_a_turbo_run_and_names_a_missing_file(ws: Path, overfit: Any) -> None:
    checks = _doctor(_config("doc"))
    assert all(c.status != "fail" for c in checks.values()), [c for c in checks.values() if c.status == "fail"]
    assert checks["chatterbox.files"].status == "pass" and "t3_turbo_v1.safetensors" in checks["chatterbox.files"].message
    broken = ws / "models" / "turbo-broken"
    shutil.copytree(ws / "models" / "turbo", broken)
    (broken / "s3gen_meanflow.safetensors").unlink()
    failed = _doctor(_config("doc", model_dir="models/turbo-broken"))["chatterbox.files"]
    assert failed.status == "fail" and "s3gen_meanflow.safetensors" in failed.message
    assert _doctor(_config("doc", base_checkpoint=None))["checkpoint.rows"].status == "fail"  # the published 50,276 rows


def test_lora_trains_gpt2s_conv1d_layers_and_keeps_the_base_rows(ws: Path, overfit: Any) -> None:
    result = train(run_config_from_dict(_config("lora", adapter=LORA, schedule={
        "max_steps": 2, "val_every": 2, "save_every": 2, "keep_last": 1, "log_every": 1}), "lora.yaml"), settings=load_settings())
    assert result.state == "finished" and result.base_rows_sha256["start"] == result.base_rows_sha256["now"] is not None
    record = assert_adapter_only(Path(result.last_checkpoint), {"text_emb.weight_new", "text_head.weight_new"})
    assert any(name.endswith("attn.c_attn") for name in record["modules"]) and set(record["modules"].values()) == {"conv1d"}
