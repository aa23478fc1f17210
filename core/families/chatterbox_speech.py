"""Chatterbox speech: T3 speech tokens for a text, then S3Gen to a 24 kHz waveform.

The published `ChatterboxMultilingualTTS.generate` refuses language ids outside
`SUPPORTED_LANGUAGES` and `from_local` hard-codes `T3Config.multilingual()`; here T3 is built at
the checkpoint's size, the language tag is checked against the tokenizer, the text goes through
`chatterbox_text.text_ids` (the same function the features used), and the published
`prepare_conditionals` (voice encoder, S3 prompt tokens, S3Gen reference) and `T3.inference`
do the rest. `greedy_speech_tokens` is the deterministic path (temperature 0).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from core.errors import InputError
from core.families.base import SynthesisRequest
from core.families.chatterbox_text import language_tags, text_ids

S3GEN_SR = 24_000
MAX_NEW_TOKENS = 1000


def wrap_text(ids: list[int], start: int, stop: int) -> torch.Tensor:
    """Return [1, n+2] ids wrapped in the start/stop text tokens."""
    return torch.tensor([[start, *ids, stop]], dtype=torch.long)


@torch.inference_mode()
def greedy_speech_tokens(t3: Any, cond: Any, text: torch.Tensor, max_new_tokens: int) -> list[int]:
    """Return the argmax speech tokens T3 emits after the start-of-speech token (stop excluded), no CFG."""
    hp = t3.hp
    speech = torch.tensor([[hp.start_speech_token]], device=text.device)
    out: list[int] = []
    for _ in range(max_new_tokens):
        embeds, _ = t3.prepare_input_embeds(t3_cond=cond, text_tokens=text, speech_tokens=speech)
        hidden = t3.tfmr(inputs_embeds=embeds, use_cache=False, return_dict=True).last_hidden_state
        token = int(t3.speech_head(hidden[:, -1]).argmax(-1))
        if token == hp.stop_speech_token:
            break
        out.append(token)
        speech = torch.cat([speech, torch.tensor([[token]], device=text.device)], dim=1)
    return out


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_t3_for_inference(family: Any, checkpoint: Path, tokenizer_path: Path | None, settings: Any) -> tuple[Any, Any]:
    """Return (T3 loaded strictly at the checkpoint's size, its tokenizer).

    Raises InputError when the tokenizer's size differs from the checkpoint's rows.
    """
    from core.checkpoint import load_checkpoint
    from core.families.chatterbox import ChatterboxConfig, backbone_shape
    from core.inference import resolve_tokenizer
    from core.tokenizers.tokenizer import load_tokenizer

    loaded = load_checkpoint(checkpoint)
    if loaded.meta and loaded.meta.get("tokenizer_fingerprint"):
        tokenizer = resolve_tokenizer(loaded, settings, str(tokenizer_path) if tokenizer_path else None)
    elif tokenizer_path is not None:
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        raise InputError(f"{checkpoint}: no LinguaForge metadata names its tokenizer; pass --tokenizer.")
    config = ChatterboxConfig(text_tokens_dict_size=tokenizer.size, **backbone_shape(loaded.state_dict, str(checkpoint)))
    model = family.build_model(config, 0)
    family.load_weights(model, loaded.state_dict, str(checkpoint), tokenizer)
    return model.eval(), tokenizer


def synthesize_chatterbox(family: Any, request: SynthesisRequest, settings: Any) -> dict[str, Any]:
    """Speak `request.text` with T3 + S3Gen from the model folder into `request.output` (24 kHz wav).

    Returns {output, seconds, sample_rate, speech_tokens, language, upstream_supported}.
    Raises InputError for a missing model folder or file, a language the tokenizer has no tag
    for, or no voice (no --reference and no conds.pt).
    """
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.s3tokenizer import drop_invalid_tokens
    from chatterbox.mtl_tts import SUPPORTED_LANGUAGES, ChatterboxMultilingualTTS, Conditionals

    from core.audio import write_wav
    from core.families.chatterbox_features import _load_tensors, load_voice_encoder

    if request.model_dir is None:
        raise InputError("synthesize --family chatterbox needs --model-dir (or settings families.chatterbox.model_dir): "
                         "the folder with s3gen.pt, ve.pt and conds.pt.")
    files = family.published_files(request.model_dir)
    torch.manual_seed(request.seed)
    device = _device()
    t3, tokenizer = load_t3_for_inference(family, request.checkpoint, request.tokenizer, settings)
    tags = language_tags(tokenizer)
    if tags and request.language and request.language.lower() not in tags:
        raise InputError(f"--language {request.language}: the tokenizer {tokenizer.path} has no [{request.language.lower()}] tag; "
                         f"it has {', '.join(sorted(tags))}.")
    s3gen = S3Gen()
    try:
        missing, unexpected = s3gen.load_state_dict(_load_tensors(files["s3gen"]), strict=False)
    except RuntimeError as exc:
        raise InputError(f"{files['s3gen']}: not Chatterbox's S3Gen ({str(exc).splitlines()[0]}).") from exc
    missing = [k for k in missing if k not in S3Gen.ignore_state_dict_missing]
    if missing or unexpected:
        raise InputError(f"{files['s3gen']}: not Chatterbox's S3Gen (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    voice_encoder = load_voice_encoder(files["voice_encoder"])
    conds = Conditionals.load(files["conds"]) if "conds" in files else None
    tts = ChatterboxMultilingualTTS(t3.to(device), s3gen.to(device).eval(), voice_encoder.to(device), None, device,
                                    conds.to(device) if conds else None)
    if request.reference is not None:
        tts.prepare_conditionals(str(request.reference), exaggeration=float(request.options.get("exaggeration", 0.5)))
    elif tts.conds is None:
        raise InputError(f"no voice: pass --reference WAV or put conds.pt into {request.model_dir}.")
    start = time.monotonic()
    ids = text_ids(tokenizer, request.text, request.language)
    text = wrap_text(ids, t3.hp.start_text_token, t3.hp.stop_text_token).to(device)
    temperature = float(request.options.get("temperature", 0.8))
    max_new = request.max_new_tokens or MAX_NEW_TOKENS
    with torch.inference_mode():
        if temperature <= 0:
            speech = torch.tensor(greedy_speech_tokens(t3, tts.conds.t3, text, max_new), dtype=torch.long, device=device)
        else:
            speech = t3.inference(t3_cond=tts.conds.t3, text_tokens=torch.cat([text, text]), max_new_tokens=max_new,
                                  temperature=temperature, cfg_weight=float(request.options.get("cfg_weight", 0.5)))[0]
        speech = drop_invalid_tokens(speech).to(device)
        if speech.numel() == 0:
            raise InputError(f"{request.checkpoint}: T3 produced no speech tokens for {request.text!r}; train longer or check the language tag.")
        wav, _ = s3gen.inference(speech_tokens=speech, ref_dict=tts.conds.gen)
    keep = max(1, int(speech.shape[-1]) - 1) * (S3GEN_SR // 25)
    wav = wav.squeeze(0).detach().cpu()[:keep]
    output = write_wav(request.output, wav.float(), S3GEN_SR)
    language = (request.language or "").lower() or None
    return {"output": str(output), "seconds": round(wav.shape[-1] / S3GEN_SR, 3), "sample_rate": S3GEN_SR,
            "speech_tokens": int(speech.numel()), "language": language,
            "upstream_supported": language in SUPPORTED_LANGUAGES if language else True,
            "synthesis_s": round(time.monotonic() - start, 3)}
