"""Export a LinguaForge IndexTTS2 checkpoint as files IndexTTS2's own loader accepts.

Writes `gpt_<name>.pth` (a plain state dict: IndexTTS2's `load_checkpoint` loads it strictly into
`UnifiedVoice(**cfg.gpt)`), `config.yaml` (the run's IndexTTS2 config with
`gpt.number_text_tokens`, `dataset.bpe_model` and `gpt_checkpoint` corrected, and passed through
the foreign-config gate the doctor uses; `linguaforge.text_normalizer` added: the training's text
normalisation, `families.indextts.normalizer_language` or `none`), `<name>.model`
(the tokenizer) and `linguaforge.json`: the metadata record with the checkpoint's sequence `layout`
and `published_inference`, the published call that decodes on that layout (docs/guides/indextts2.md). With `families.indextts.model_dir` set, the folder also carries
what the published `IndexTTS2` class reads (`indextts.published`: the model folder's files, a hub
cache of the models it would download, and `speak_indextts2.py`; docs/guides/published-export.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.families.indextts.published import HUB_FOLDER, SHIM_NAME, carry_published_files
from core.families.indextts.gpt import SEQUENCE_LAYOUT, IndexTTSModelConfig, build_unified_voice, require_rows_for
from core.families.target_config import write_indextts_config
from core.fsutil import atomic_write, atomic_write_text


PUBLISHED_INFERENCE = {
    "layout": SEQUENCE_LAYOUT,
    "versions": {"indextts2-inference": "2.1.1", "transformers": "5.24.0"},
    "gpt_call": (
        "gpt.post_init_gpt2_config(kv_cache=True); codes, _ = gpt.inference_speech(spk_cond_emb, text_tokens, emo_cond_emb, "
        "cond_lengths=…, emo_cond_lengths=…, emo_vec=emovec, do_sample=False, num_beams=1, repetition_penalty=1.0, "
        "max_generate_length=1500)  # greedy; codes end at the first 8193"
    ),
    "infer_call": (
        "IndexTTS2(cfg_path='config.yaml', model_dir=…).infer(spk_audio_prompt, text, output_path, top_k=1, num_beams=1, "
        "repetition_penalty=1.0)  # infer always samples: top_k=1 makes it greedy"
    ),
    "why_it_matches": (
        "under transformers 5.24 generate() never hands GPT2InferenceModel its KV cache, so every step runs the whole "
        "[conditioning | start, text, stop | start, codes] sequence with code k at mel position k + 1, as in training"
    ),
    "does_not_match": [
        "the cached path (transformers 4.x, or any cache reaching GPT2InferenceModel) embeds code k at mel position k + 2",
        "IndexTTS2.infer's defaults (repetition_penalty 10, num_beams 3) change the codes of a greedy decode",
        "IndexTTS2.infer's text front end (NeMo; Chinese for text without Latin letters) may give other ids than "
        "LinguaForge's IndexTextNormalizer: compare the ids before trusting it",
    ],
}


def export_indextts(checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
    """Return the paths written for `checkpoint` into `output_dir` (see the module docstring).

    Raises InputError when the checkpoint is not an IndexTTS2 checkpoint of LinguaForge, its
    tokenizer cannot be found, or its tensors do not load strictly into UnifiedVoice.
    """
    from core.inference import resolve_tokenizer

    loaded = load_checkpoint(checkpoint)
    meta = loaded.meta or {}
    if meta.get("family") != "indextts":
        raise InputError(f"{checkpoint}: family {meta.get('family')!r}, not indextts; export it with its own family.")
    model_config = IndexTTSModelConfig.from_dict(meta.get("model_config") or {})
    tokenizer = resolve_tokenizer(loaded, settings)
    require_rows_for(loaded.state_dict, tokenizer.size, f"{checkpoint} (tokenizer {tokenizer.path})")
    kwargs = dict(model_config.kwargs, number_text_tokens=tokenizer.size)
    model = build_unified_voice(kwargs)
    try:
        model.load_state_dict(loaded.state_dict, strict=True)
    except RuntimeError as exc:
        raise InputError(f"{checkpoint}: does not load strictly into UnifiedVoice ({str(exc).splitlines()[0]}).") from None
    name = name or Path(checkpoint).stem
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    gpt_path = output_dir / f"gpt_{name}.pth"
    with atomic_write(gpt_path) as tmp:
        torch.save({k: v.detach().cpu().contiguous() for k, v in loaded.state_dict.items()}, tmp)
    bpe_path = output_dir / f"{name}{tokenizer.path.suffix}"
    with atomic_write(bpe_path) as tmp:
        shutil.copyfile(tokenizer.path, tmp)
    section = dict(settings.get("families.indextts") or {})
    normalizer = section.get("normalizer_language") or "none"
    config = {**model_config.indextts_config, "linguaforge": {"text_normalizer": normalizer}}
    config_path = write_indextts_config(output_dir / "config.yaml", config, tokenizer.size, bpe_path.name, gpt_path.name).path
    carried, missing = carry_from_settings(section, config, output_dir)
    notes = {**PUBLISHED_INFERENCE, **published_speech_notes(normalizer, missing)}
    if meta.get("layout") != SEQUENCE_LAYOUT:
        notes["warning"] = (
            f"this checkpoint records layout {meta.get('layout')!r}, not {SEQUENCE_LAYOUT}: it was trained with each text padded "
            "to its batch's longest before the speech, a layout no decoder uses; train it again to decode what it learned."
        )
    record = {**meta, "layout": meta.get("layout"), "published_inference": notes}
    record_path = atomic_write_text(output_dir / "linguaforge.json", json.dumps(record, indent=2, ensure_ascii=False))
    return [gpt_path, config_path, bpe_path, record_path, *carried]


def carry_from_settings(section: dict[str, Any], config: dict[str, Any], output_dir: Path) -> tuple[list[Path], list[str]]:
    """Link the published files of `families.indextts.model_dir` into the export (`indextts.published`);
    return (paths written, what the published class would miss)."""
    from core.families.indextts.models import model_paths

    if not section.get("model_dir"):
        return [], ["families.indextts.model_dir is not set: the export carries none of the published IndexTTS-2 "
                    "folder's files (s2mel, CAMPPlus, BigVGAN, w2v-BERT, semantic codec, emotion files)"]
    return carry_published_files(model_paths(None, section), config, output_dir)


def published_speech_notes(normalizer: str, missing: list[str]) -> dict[str, Any]:
    """Return the linguaforge.json notes on speaking the export with the published `IndexTTS2` class."""
    return {
        "speak_with": f"python {SHIM_NAME} --reference voice.wav --text … --output out.wav --greedy  (in this folder)",
        "speak_with_python": (f"from {Path(SHIM_NAME).stem} import GREEDY, load_published, speak; "
                              "speak(load_published(), 'voice.wav', text, 'out.wav', **GREEDY)"),
        "text_normalizer": normalizer,
        "text_normalizer_note": (
            "config.yaml linguaforge.text_normalizer: `none` = IndexTTS2's punctuation table only (as training); "
            f"the published class has no switch for it, so {SHIM_NAME} gives its tokenizer that normaliser; "
            "a NeMo language (en, zh, es) is passed as IndexTTS2(language=…)"),
        "hub_cache": (f"{HUB_FOLDER}/: w2v-BERT 2.0, the MaskGCT semantic codec, CAMPPlus and BigVGAN as a Hugging Face hub "
                      f"cache; {SHIM_NAME} sets HF_HUB_CACHE to it and HF_HUB_OFFLINE=1, so nothing is downloaded"),
        "missing_for_published_inference": missing,
    }
