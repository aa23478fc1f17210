"""IndexTTS2 speech from a LinguaForge (or exported) GPT: GPT → s2mel → BigVGAN at 22.05 kHz.

The stages follow `indextts.infer_v2.IndexTTS2.infer_generator` with the models loaded from the
local folder (`indextts_models`), greedy or sampled GPT decoding, and each stage's output shape
checked: codes [1, N] < 8192, GPT latents [1, N, model_dim], s2mel mel [1, 80, frames], wav
[1, samples]. s2mel's `gpt_layer` takes 1280-wide latents (the published GPT's width): a GPT of
another width is refused at that stage with the reason.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from core.audio import read_audio, resample, write_wav
from core.checkpoint import load_checkpoint
from core.errors import InputError, InternalError
from core.families.indextts import (
    CONFIG_NAME,
    SEMANTIC_CODES,
    IndexTextNormalizer,
    load_unified_voice,
    read_indextts_config,
    text_rows,
)
from core.families.indextts_models import SemanticFeatures, model_paths

SAMPLE_RATE = 22050
MAX_PROMPT_SECONDS = 15
DIFFUSION_STEPS = 25
CFG_RATE = 0.7


def _expect(stage: str, tensor: torch.Tensor, shape: tuple) -> None:
    if tensor.ndim != len(shape) or any(want is not None and got != want for got, want in zip(tensor.shape, shape)):
        raise InternalError(f"IndexTTS2 stage {stage}: output shape {tuple(tensor.shape)}, expected {shape}.")


class SpeechModels:
    """s2mel (MyModel with gpt_layer), CAMPPlus, BigVGAN and the mel front end of one IndexTTS2 folder."""

    def __init__(self, paths: Any, config: dict[str, Any], device: str) -> None:
        from munch import DefaultMunch

        from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN, load_hparams_from_json
        from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
        from indextts.s2mel.modules.commons import MyModel

        from core.families.indextts_models import _safe_torch_load

        self.s2mel = MyModel(DefaultMunch.fromDict(config["s2mel"]), use_gpt_latent=True)
        net = _safe_torch_load(paths.path(config.get("s2mel_checkpoint", "s2mel.pth")))["net"]
        for key, module in self.s2mel.models.items():
            if key not in net:
                raise InputError(f"{paths.model_dir}: s2mel checkpoint has no `{key}` weights.")
            module.load_state_dict({k.removeprefix("module."): v for k, v in net[key].items()}, strict=False)
        self.s2mel = self.s2mel.to(device).eval()
        self.s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
        self.campplus = CAMPPlus(feat_dim=80, embedding_size=192)
        self.campplus.load_state_dict(_safe_torch_load(paths.path("campplus")))
        self.campplus = self.campplus.to(device).eval()
        folder = paths.path("bigvgan")
        self.bigvgan = BigVGAN(load_hparams_from_json(folder / "config.json"))
        self.bigvgan.load_state_dict(_safe_torch_load(folder / "bigvgan_generator.pt")["generator"])
        self.bigvgan.remove_weight_norm()
        self.bigvgan = self.bigvgan.to(device).eval()
        spect = config["s2mel"]["preprocess_params"]["spect_params"]
        self.mel_args = {
            "n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
            "num_mels": spect["n_mels"], "sampling_rate": config["s2mel"]["preprocess_params"]["sr"],
            "fmin": spect.get("fmin", 0), "fmax": None if spect.get("fmax", "None") == "None" else 8000, "center": False,
        }
        self.latent_width = self.s2mel.models["gpt_layer"][0].in_features

    def mel(self, wav_22k: torch.Tensor) -> torch.Tensor:
        """Return the s2mel mel spectrogram [1, n_mels, frames] of a 22.05 kHz waveform [1, samples]."""
        from indextts.s2mel.modules.audio import mel_spectrogram

        return mel_spectrogram(wav_22k, **self.mel_args)

    def style(self, wav_16k: torch.Tensor) -> torch.Tensor:
        """Return the CAMPPlus speaker style [1, 192] of a 16 kHz waveform [1, samples]."""
        import torchaudio

        feat = torchaudio.compliance.kaldi.fbank(wav_16k, num_mel_bins=80, dither=0, sample_frequency=16000)
        return self.campplus((feat - feat.mean(dim=0, keepdim=True)).unsqueeze(0))


def _load_gpt(request: Any, settings: Any, config: dict[str, Any], device: str) -> tuple[torch.nn.Module, Any]:
    from core.inference import resolve_tokenizer
    from core.tokenizers.tokenizer import load_tokenizer

    loaded = load_checkpoint(request.checkpoint)
    if loaded.meta:
        tokenizer = resolve_tokenizer(loaded, settings, str(request.tokenizer) if request.tokenizer else None)
    elif request.tokenizer:
        tokenizer = load_tokenizer(request.tokenizer)
    else:
        raise InputError(f"{request.checkpoint}: a plain IndexTTS2 checkpoint records no tokenizer; pass --tokenizer.")
    if text_rows(loaded.state_dict) != tokenizer.size + 1:
        raise InputError(f"{request.checkpoint}: {text_rows(loaded.state_dict)} text rows do not fit {tokenizer.path} ({tokenizer.size} ids + 1).")
    gpt, _ = load_unified_voice(loaded.state_dict, config, tokenizer.size)
    gpt = gpt.to(device).eval()
    gpt.post_init_gpt2_config(kv_cache=True)
    return gpt, tokenizer


@torch.no_grad()
def synthesize_indextts(request: Any, settings: Any) -> dict[str, Any]:
    """Write `request.text` spoken in `request.reference`'s voice to `request.output`; return the report.

    Raises InputError when the model folder, a model file, the reference or the tokenizer is missing
    or does not fit; InternalError when a stage's output has the wrong shape.
    """
    start = time.monotonic()
    if request.reference is None:
        raise InputError("IndexTTS2 speaks in a reference voice: pass --reference WAV (a few seconds of the speaker).")
    section = dict(settings.get("families.indextts") or {})
    paths = model_paths(request.model_dir, section)
    config = read_indextts_config(paths.model_dir / CONFIG_NAME)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(request.seed)
    gpt, tokenizer = _load_gpt(request, settings, config, device)
    semantic = SemanticFeatures(paths, config["semantic_codec"], device, paths.w2v_layer)
    speech = SpeechModels(paths, config, device)
    if speech.latent_width != gpt.model_dim:
        raise InputError(
            f"{paths.model_dir}: s2mel's gpt_layer takes {speech.latent_width}-wide GPT latents, the GPT is {gpt.model_dim} wide; "
            "use the s2mel.pth published with this GPT."
        )
    wav, rate = read_audio(request.reference)
    wav = wav[: int(MAX_PROMPT_SECONDS * rate)]
    wav_16k, wav_22k = resample(wav, rate, 16000).unsqueeze(0), resample(wav, rate, SAMPLE_RATE).unsqueeze(0)
    spk = semantic.features(wav_16k[0])
    _, quantized = semantic.codec.quantize(spk)
    ref_mel = speech.mel(wav_22k.to(device))
    style = speech.style(wav_16k.to(device))
    prompt = speech.s2mel.models["length_regulator"](quantized, ylens=torch.tensor([ref_mel.shape[2]], device=device), n_quantizers=3, f0=None)[0]
    ids = IndexTextNormalizer(section.get("normalizer_language")).text_ids(request.text, tokenizer)
    if not ids:
        raise InputError("--text is empty after IndexTTS2's normalisation.")
    text = torch.tensor([ids], dtype=torch.int32, device=device)
    lengths = torch.tensor([spk.shape[1]], device=device)
    emovec = gpt.merge_emovec(spk, spk, lengths, lengths, alpha=1.0)
    max_codes = int(request.max_new_tokens or request.options.get("max_mel_tokens") or 1500)
    temperature = float(request.options.get("temperature") or 0.8)
    codes, latents = gpt.inference_speech(
        spk, text, spk, cond_lengths=lengths, emo_cond_lengths=lengths, emo_vec=emovec,
        do_sample=temperature > 0, top_p=0.8, top_k=30, temperature=max(temperature, 1e-5), num_beams=1,
        repetition_penalty=10.0, max_generate_length=max_codes,
    )
    stops = (codes[0] == gpt.stop_mel_token).nonzero()
    n = int(stops[0, 0]) if stops.numel() else codes.shape[1]
    codes = codes[:, :n]
    _expect("gpt codes", codes, (1, None))
    if n == 0 or int(codes.max()) >= SEMANTIC_CODES:
        raise InternalError(f"IndexTTS2 stage gpt codes: {n} codes, largest {int(codes.max()) if n else None}.")
    latent = gpt(latents, text, torch.tensor([text.shape[1]], device=device), codes, torch.tensor([n], device=device), spk,
                 cond_mel_lengths=lengths, emo_cond_mel_lengths=lengths, emo_vec=emovec,
                 use_speed=torch.zeros(1, dtype=torch.long, device=device))
    _expect("gpt latents", latent, (1, n, gpt.model_dim))
    content = semantic.embed_codes(codes) + speech.s2mel.models["gpt_layer"](latent)
    cond = speech.s2mel.models["length_regulator"](content, ylens=(torch.tensor([n], device=device) * 1.72).long(), n_quantizers=3, f0=None)[0]
    both = torch.cat([prompt, cond], dim=1)
    mel = speech.s2mel.models["cfm"].inference(both, torch.tensor([both.shape[1]], device=device), ref_mel, style, None,
                                               int(request.options.get("diffusion_steps") or DIFFUSION_STEPS),
                                               inference_cfg_rate=CFG_RATE)[:, :, ref_mel.shape[-1]:]
    _expect("s2mel mel", mel, (1, speech.mel_args["num_mels"], None))
    audio = torch.clamp(speech.bigvgan(mel.float()).squeeze(1), -1.0, 1.0)
    _expect("bigvgan wav", audio, (1, mel.shape[2] * speech.mel_args["hop_size"]))
    output = write_wav(request.output, audio[0].cpu(), SAMPLE_RATE)
    return {"output": str(output), "seconds": round(audio.shape[1] / SAMPLE_RATE, 3), "sample_rate": SAMPLE_RATE,
            "codes": n, "mel_frames": int(mel.shape[2]), "wall_seconds": round(time.monotonic() - start, 2)}
