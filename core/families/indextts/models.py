"""IndexTTS2's feature and speech models, loaded from the user's local folder (never downloaded).

IndexTTS2's own inference fetches these from the hub by name; LinguaForge reads local copies:

| model | where (under `model_dir`) | settings override |
|---|---|---|
| w2v-BERT 2.0 (`facebook/w2v-bert-2.0`) | `w2v-bert-2.0/` (config.json, model.safetensors, preprocessor_config.json) | `families.indextts.w2v_bert` |
| MaskGCT semantic codec (`amphion/MaskGCT`) | `semantic_codec/model.safetensors` | `families.indextts.semantic_codec` |
| CAMPPlus (`funasr/campplus`) | `campplus_cn_common.bin` | `families.indextts.campplus` |
| BigVGAN (`nvidia/bigvgan_v2_22khz_80band_256x`) | `bigvgan/` (config.json, bigvgan_generator.pt) | `families.indextts.bigvgan` |

A missing file is an InputError naming it, where IndexTTS2 expects it and the override to set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from core.data.manifest import ManifestRow
from core.errors import InputError
from core.families.indextts.gpt import SEMANTIC_LAYER, STATS_NAME

DEFAULT_LOCATIONS = {
    "w2v_bert": ("w2v-bert-2.0", "facebook/w2v-bert-2.0 (a folder with config.json, model.safetensors, preprocessor_config.json)"),
    "semantic_codec": ("semantic_codec/model.safetensors", "amphion/MaskGCT semantic_codec/model.safetensors"),
    "campplus": ("campplus_cn_common.bin", "funasr/campplus campplus_cn_common.bin"),
    "bigvgan": ("bigvgan", "nvidia/bigvgan_v2_22khz_80band_256x (a folder with config.json, bigvgan_generator.pt)"),
}


@dataclass(frozen=True)
class ModelPaths:
    """Where each IndexTTS2 file of one installation is: the folder plus resolved overrides."""

    model_dir: Path
    overrides: Mapping[str, str | None]
    w2v_layer: int = SEMANTIC_LAYER

    def path(self, name: str) -> Path:
        """Return the path of feature/speech model `name` (a DEFAULT_LOCATIONS key) or a file of `model_dir`.

        Raises InputError naming the file, where IndexTTS2 expects it and the override to set.
        """
        if name in DEFAULT_LOCATIONS:
            relative, what = DEFAULT_LOCATIONS[name]
            override = self.overrides.get(name)
            path = Path(os.path.expanduser(override)) if override else self.model_dir / relative
            if not path.exists():
                raise InputError(
                    f"{path}: missing {what}. IndexTTS2 would download it; LinguaForge never does. Put a local copy at "
                    f"{self.model_dir / relative} or set `families.indextts.{name}` in the settings."
                )
            return path
        path = self.model_dir / name
        if not path.is_file():
            raise InputError(f"{path}: missing; IndexTTS2 expects {name} in its model folder {self.model_dir}.")
        return path


def model_paths(model_dir: str | os.PathLike[str] | None, settings_section: Mapping[str, Any] | None = None) -> ModelPaths:
    """Return ModelPaths for `model_dir` (else `families.indextts.model_dir` of the settings section).

    Raises InputError when no folder is named or it does not exist.
    """
    section = dict(settings_section or {})
    folder = model_dir or section.get("model_dir")
    if not folder:
        raise InputError("no IndexTTS2 model folder: pass --model-dir, set `model_dir:` in the run config or `families.indextts.model_dir`.")
    path = Path(os.path.expanduser(str(folder))).resolve()
    if not path.is_dir():
        raise InputError(f"{path}: the IndexTTS2 model folder does not exist.")
    return ModelPaths(path, {k: section.get(k) for k in DEFAULT_LOCATIONS}, int(section.get("w2v_layer") or SEMANTIC_LAYER))


def _safe_torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (any unpickling failure is the file's fault)
        raise InputError(f"{path}: not a weights-only torch file ({str(exc).splitlines()[0]}).") from None


class SemanticFeatures:
    """w2v-BERT 2.0 layer-17 features normalised with `wav2vec2bert_stats.pt`, and MaskGCT semantic codes."""

    def __init__(
        self, paths: ModelPaths, semantic_codec_config: Mapping[str, Any], device: str = "cpu", layer: int = SEMANTIC_LAYER
    ) -> None:
        from omegaconf import OmegaConf
        from safetensors.torch import load_model
        from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertModel

        from indextts.utils.maskgct_utils import build_semantic_codec

        w2v = paths.path("w2v_bert")
        self.extractor = SeamlessM4TFeatureExtractor.from_pretrained(str(w2v), local_files_only=True)
        self.model = Wav2Vec2BertModel.from_pretrained(str(w2v), local_files_only=True).to(device).eval()
        if self.model.config.num_hidden_layers < layer:
            raise InputError(
                f"{w2v}: w2v-BERT has {self.model.config.num_hidden_layers} layers; IndexTTS2 reads layer {layer} "
                "(`families.indextts.w2v_layer`). Use the published facebook/w2v-bert-2.0 folder."
            )
        self.layer = layer
        stats = _safe_torch_load(paths.path(STATS_NAME))
        self.mean = stats["mean"].to(device)
        self.std = torch.sqrt(stats["var"]).to(device)
        self.codec = build_semantic_codec(OmegaConf.create(dict(semantic_codec_config)))
        load_model(self.codec, str(paths.path("semantic_codec")), device="cpu")
        self.codec = self.codec.to(device).eval()
        self.device = device

    @torch.no_grad()
    def features(self, wav_16k: torch.Tensor) -> torch.Tensor:
        """Return the normalised layer-`layer` (17) features [1, T, 1024] of a 16 kHz mono waveform (1-D)."""
        return self.features_batch([wav_16k])[0]

    @torch.no_grad()
    def features_batch(self, wavs_16k: list[torch.Tensor]) -> list[torch.Tensor]:
        """Return each waveform's normalised layer features [1, T_i, 1024], computed in one padded batch.

        Each clip is framed alone (the extractor normalises per clip and may add one masked frame,
        which IndexTTS2 keeps), then padded with the extractor's padding value and a zero attention
        mask; w2v-BERT masks padding in attention and zeroes it before its causal depthwise
        convolutions, so T_i and the values are those of the clip alone (up to float rounding).
        """
        from torch.nn.utils.rnn import pad_sequence

        inputs = [self.extractor(w.cpu().numpy(), sampling_rate=16000, return_tensors="pt") for w in wavs_16k]
        lengths = [int(i["input_features"].shape[1]) for i in inputs]
        features = pad_sequence([i["input_features"][0] for i in inputs], batch_first=True,
                                padding_value=float(self.extractor.padding_value))
        mask = pad_sequence([i["attention_mask"][0] for i in inputs], batch_first=True, padding_value=0)
        out = self.model(input_features=features.to(self.device), attention_mask=mask.to(self.device), output_hidden_states=True)
        hidden = (out.hidden_states[self.layer] - self.mean) / self.std
        return [hidden[i : i + 1, :length] for i, length in enumerate(lengths)]

    @torch.no_grad()
    def codes(self, features: torch.Tensor) -> torch.Tensor:
        """Return the MaskGCT semantic codes [1, T] of features [1, T, 1024]."""
        codes, _ = self.codec.quantize(features)
        return codes

    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Return the codec's embeddings [1, T, 1024] of codes [1, T] (s2mel's input, as in IndexTTS2's inference)."""
        return self.codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)


@torch.no_grad()
def speaker_latents(gpt: torch.nn.Module, features: torch.Tensor) -> torch.Tensor:
    """Return the speaker latents [B, 32, model_dim] of B prompts' features of EQUAL length [B, T, 1024].

    `get_conditioning` of the (frozen) GPT, as IndexTTS2's inference calls it. Equal length only:
    IndexTTS2's conformer zeroes padding before its biased pointwise convolution, so padding
    becomes non-zero and reaches the last real frames through the symmetric depthwise
    convolution; unpadded, a batch gives what each prompt gives alone.
    """
    lengths = torch.full((features.shape[0],), features.shape[1], device=features.device)
    return gpt.get_conditioning(features.transpose(1, 2), lengths)


@torch.no_grad()
def emotion_vectors(gpt: torch.nn.Module, features: torch.Tensor) -> torch.Tensor:
    """Return the emotion vectors [B, model_dim] (through `emovec_layer` and `emo_layer`: `get_emovec`) of B
    emotion prompts' features of EQUAL length [B, T, 1024] (equal length for the reason `speaker_latents` gives)."""
    lengths = torch.full((features.shape[0],), features.shape[1], device=features.device)
    return gpt.get_emovec(features, lengths)


def equal_length_groups(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Return the indices of `tensors` [1, T, …] grouped by equal T (groups in first-seen order)."""
    groups: dict[int, list[int]] = {}
    for i, tensor in enumerate(tensors):
        groups.setdefault(int(tensor.shape[1]), []).append(i)
    return list(groups.values())


def grouped(tensors: list[torch.Tensor], run: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    """Return `run` of each tensor [1, T, …], computed on groups of equal T (`equal_length_groups`)."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(tensors)
    for group in equal_length_groups(tensors):
        result = run(torch.cat([tensors[i] for i in group]))
        for row, i in enumerate(group):
            out[i] = result[row]
    return out


@dataclass
class VoiceConditioning:
    """What a prompt clip gives the GPT: its speaker front end's w2v-BERT features [1, T, 1024] (s2mel's prompt
    comes from them too), speaker latents [32, D] and emotion vector [D]."""

    features: torch.Tensor
    condition: torch.Tensor
    emo_vec: torch.Tensor


@torch.no_grad()
def voice_conditioning(semantic: Any, gpt: torch.nn.Module, paths: list[Any],
                       whole: list[torch.Tensor] | None = None) -> list[VoiceConditioning]:
    """Return the GPT's conditioning of each prompt clip at `paths`, as IndexTTS2's inference makes it: the speaker
    front end's clip cut at 15 s (`speaker_audio`) through w2v-BERT and the GPT's conditioning encoder, the emotion
    front end's clip (`emotion_audio`) through w2v-BERT and its emotion encoders. The ONE maker of the prompt for
    the feature cache (`BatchFeaturizer`) and the speaker (`IndexTTSSpeaker`). `whole`, the features of the uncut
    clips when the caller has them, stands for a clip's cut features when the cut left it whole.

    Raises InputError as `speaker_audio` does.
    """
    from core.families.indextts.audio import MAX_PROMPT_SECONDS, SPEAKER_RATE, emotion_audio, speaker_audio

    cut = [speaker_audio(path) for path in paths]
    features = list(whole) if whole is not None else [torch.empty(0)] * len(paths)
    again = [i for i, clip in enumerate(cut) if whole is None or clip.wav_22k.shape[1] >= MAX_PROMPT_SECONDS * SPEAKER_RATE]
    for i, feature in zip(again, semantic.features_batch([cut[i].wav_16k[0] for i in again]) if again else []):
        features[i] = feature
    emotion = semantic.features_batch([emotion_audio(path)[0] for path in paths])
    latents = grouped(features, lambda f: speaker_latents(gpt, f))
    vectors = grouped(emotion, lambda f: emotion_vectors(gpt, f))
    return [VoiceConditioning(features[i], latents[i], vectors[i]) for i in range(len(paths))]


class BatchFeaturizer:
    """Computes a cache item (`IndexTTSFeatures.dtypes`) for each of a batch of manifest rows with IndexTTS2's feature models and the frozen base GPT.

    Audio goes through IndexTTS2's front end (`core.families.indextts.audio`): the codes come from
    the whole clip read as the speaker front end reads it (22.05 kHz → 16 kHz); the speaker latents
    and the emotion vector are `voice_conditioning`'s, the speaker's own maker (the whole clip's features
    reused when the 15 s cut leaves it whole). w2v-BERT (the large model) runs on padded batches with its
    attention mask. The semantic codec and the conditioning encoders pad nothing: their convolutions would
    carry padding into the last real frames, so they run on groups of equal length (`equal_length_groups`).
    """

    def __init__(self, semantic: Any, gpt: torch.nn.Module, normalizer: Any, tokenizer: Any) -> None:
        self.semantic = semantic
        self.gpt = gpt.eval()
        self.normalizer = normalizer
        self.tokenizer = tokenizer

    @torch.no_grad()
    def __call__(self, rows: list[ManifestRow]) -> list[dict[str, np.ndarray]]:
        """Return, per row, text ids, semantic codes, speaker latents and emotion vector of its clip."""
        from core.families.indextts.audio import speaker_audio

        clips = [speaker_audio(row.path, max_seconds=None) for row in rows]
        features = self.semantic.features_batch([clip.wav_16k[0] for clip in clips])
        codes = grouped(features, self.semantic.codes)
        voices = voice_conditioning(self.semantic, self.gpt, [row.path for row in rows], features)
        return [
            {
                "text_ids": np.asarray(self.normalizer.text_ids(row.text, self.tokenizer), dtype=np.int32),
                "codes": codes[i].cpu().numpy().astype(np.int32),
                "condition": voices[i].condition.float().cpu().numpy(),
                "emo_vec": voices[i].emo_vec.float().cpu().numpy(),
            }
            for i, row in enumerate(rows)
        ]
