"""Chatterbox speech: T3 speech tokens for a text, then S3Gen to a 24 kHz waveform.

The published `ChatterboxMultilingualTTS.generate` refuses language ids outside
`SUPPORTED_LANGUAGES` and `from_local` hard-codes `T3Config.multilingual()`; here T3 is built at
the checkpoint's size, the language tag is checked against the tokenizer, the text goes through
`chatterbox_text.text_ids` (the same function the features used), and the published
`prepare_conditionals` (voice encoder, S3 prompt tokens, S3Gen reference) and `T3.inference`
do the rest. `greedy_speech_tokens` is the deterministic path (temperature 0).

`ChatterboxSpeaker` loads T3 and its tokenizer at once and the voice models (S3Gen, 264M
parameters; the VoiceEncoder; `conds.pt`) on the first `speak`, after the text and language
are checked, then keeps them for every later call.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker
from core.families.chatterbox_text import language_tags, text_ids

S3GEN_SR = 24_000
SPEECH_CODES = 6561
SPEECH_TOKENS_PER_SECOND = 25
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


def load_t3_for_inference(family: Any, checkpoint: Any, tokenizer_path: Path | None, settings: Any) -> tuple[Any, Any]:
    """Return (T3 loaded strictly at the checkpoint's size in eval mode, its tokenizer); `checkpoint` is a
    path or a LoadedCheckpoint.

    Raises InputError when no tokenizer is known or its size differs from the checkpoint's rows.
    """
    from core.checkpoint import LoadedCheckpoint, load_checkpoint
    from core.families.chatterbox import ChatterboxConfig, backbone_shape
    from core.inference import resolve_tokenizer
    from core.tokenizers.tokenizer import load_tokenizer

    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
    if loaded.meta and loaded.meta.get("tokenizer_fingerprint"):
        tokenizer = resolve_tokenizer(loaded, settings, str(tokenizer_path) if tokenizer_path else None)
    elif tokenizer_path is not None:
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        raise InputError(f"{loaded.path}: no LinguaForge metadata names its tokenizer; pass --tokenizer.")
    config = ChatterboxConfig(text_tokens_dict_size=tokenizer.size, **backbone_shape(loaded.state_dict, str(loaded.path)))
    model = family.build_model(config, 0)
    family.load_weights(model, loaded.state_dict, str(loaded.path), tokenizer)
    return model.eval(), tokenizer


def load_s3gen(path: Path) -> Any:
    """Return the published `S3Gen` (eval mode) loaded from `path`; tensors saved in bf16/fp16 load into its fp32 weights.

    The class is built without its random initialisation (every weight is overwritten by the load;
    a missing one is refused). Raises InputError when the file is not Chatterbox's S3Gen.
    """
    from chatterbox.models.s3gen import S3Gen
    from transformers.initialization import no_init_weights

    from core.families.chatterbox_features import _load_tensors

    with no_init_weights():
        s3gen = S3Gen()
    try:
        missing, unexpected = s3gen.load_state_dict(_load_tensors(path), strict=False)
    except RuntimeError as exc:
        raise InputError(f"{path}: not Chatterbox's S3Gen ({str(exc).splitlines()[0]}).") from exc
    missing = [k for k in missing if k not in S3Gen.ignore_state_dict_missing]
    if missing or unexpected:
        raise InputError(f"{path}: not Chatterbox's S3Gen (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    return s3gen.eval()


class ChatterboxSpeaker(Speaker):
    """A Chatterbox T3 checkpoint with the model folder's S3Gen, VoiceEncoder and `conds.pt`."""

    sample_rate = S3GEN_SR
    tokens_per_second = SPEECH_TOKENS_PER_SECOND

    def __init__(self, family: Any, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                 device: str = "auto") -> None:
        from core.inference import resolve_device

        if model_dir is None:
            raise InputError("synthesize --family chatterbox needs --model-dir (or settings families.chatterbox.model_dir): "
                             "the folder with s3gen.pt, ve.pt and conds.pt.")
        self.model_dir = Path(model_dir)
        self.files = family.published_files(self.model_dir)
        self.device = str(resolve_device(device))
        t3, self.tokenizer = load_t3_for_inference(family, checkpoint, tokenizer, settings)
        self.t3 = t3.to(self.device)
        self.tags = language_tags(self.tokenizer)
        self._tts: Any = None
        self._default_conds: Any = None

    def _voice_models(self) -> Any:
        """Return the published `ChatterboxMultilingualTTS` holding T3, S3Gen and the VoiceEncoder (loaded once)."""
        if self._tts is None:
            from chatterbox.mtl_tts import ChatterboxMultilingualTTS, Conditionals

            from core.families.chatterbox_features import load_voice_encoder

            s3gen = load_s3gen(self.files["s3gen"]).to(self.device)
            voice_encoder = load_voice_encoder(self.files["voice_encoder"]).to(self.device)
            conds = Conditionals.load(self.files["conds"]).to(self.device) if "conds" in self.files else None
            self._default_conds = conds
            self._tts = ChatterboxMultilingualTTS(self.t3, s3gen, voice_encoder, None, self.device, conds)
        return self._tts

    def _conditionals(self, reference: Path | None, exaggeration: float) -> Any:
        tts = self._voice_models()
        if reference is None:
            if self._default_conds is None:
                raise InputError(f"no voice: pass --reference WAV or put conds.pt into {self.model_dir}.")
            return self._default_conds
        tts.prepare_conditionals(str(reference), exaggeration=exaggeration)
        return tts.conds

    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (24 kHz waveform, report with seconds, sample_rate, speech_tokens, dropped_tokens, language,
        upstream_supported, synthesis_s); the waveform keeps (speech tokens − 1) × 960 samples, as the
        published `generate` trims it. Generated ids that are no S3 code (≥ 6561: start/stop and the
        head's unused rows, which an undertrained T3 can emit) are dropped and counted.

        Options: temperature (0.8; 0 = greedy, no CFG), cfg_weight (0.5), exaggeration (0.5), cfm_steps
        (S3Gen's flow-matching steps, default 10 as published).
        Raises InputError for a language the tokenizer has no tag for, no voice (no reference and
        no conds.pt), or no speech tokens produced.
        """
        from chatterbox.models.s3tokenizer import drop_invalid_tokens
        from chatterbox.mtl_tts import SUPPORTED_LANGUAGES

        options = dict(options or {})
        if self.tags and language and language.lower() not in self.tags:
            raise InputError(f"--language {language}: the tokenizer {self.tokenizer.path} has no [{language.lower()}] tag; "
                             f"it has {', '.join(sorted(self.tags))}.")
        ids = text_ids(self.tokenizer, text, language)
        torch.manual_seed(seed)
        conds = self._conditionals(reference, float(options.get("exaggeration", 0.5)))
        start = time.monotonic()
        t3 = self.t3
        wrapped = wrap_text(ids, t3.hp.start_text_token, t3.hp.stop_text_token).to(self.device)
        temperature = float(options.get("temperature", 0.8))
        max_new = max_new_tokens or MAX_NEW_TOKENS
        with torch.inference_mode():
            if temperature <= 0:
                speech = torch.tensor(greedy_speech_tokens(t3, conds.t3, wrapped, max_new), dtype=torch.long, device=self.device)
            else:
                speech = t3.inference(t3_cond=conds.t3, text_tokens=torch.cat([wrapped, wrapped]), max_new_tokens=max_new,
                                      temperature=temperature, cfg_weight=float(options.get("cfg_weight", 0.5)))[0]
            generated = drop_invalid_tokens(speech)
            speech = generated[generated < SPEECH_CODES].to(self.device)  # ids ≥ 6561 are no S3 codes; S3Gen cannot embed them
            if speech.numel() == 0:
                raise InputError(f"T3 produced no speech tokens for {text!r}; train longer or check the language tag.")
            steps = int(options["cfm_steps"]) if options.get("cfm_steps") else None  # None: S3Gen's own 10
            wav, _ = self._tts.s3gen.inference(speech_tokens=speech, ref_dict=conds.gen, n_cfm_timesteps=steps)
        keep = max(1, int(speech.shape[-1]) - 1) * (S3GEN_SR // SPEECH_TOKENS_PER_SECOND)
        wav = wav.squeeze(0).detach().float().cpu()[:keep]
        language = (language or "").lower() or None
        return wav, {"seconds": round(wav.shape[-1] / S3GEN_SR, 3), "sample_rate": S3GEN_SR,
                     "speech_tokens": int(speech.numel()), "dropped_tokens": int(generated.numel() - speech.numel()),
                     "language": language,
                     "upstream_supported": language in SUPPORTED_LANGUAGES if language else True,
                     "synthesis_s": round(time.monotonic() - start, 3)}
