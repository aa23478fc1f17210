"""CSM speech: frames for a text after the voice's context segment, then the folder's Mimi to 24 kHz.

The model is built at the checkpoint's size from the model folder's config.json (`csm.model`), the voice is
the reference clip as the context segment — its Mimi codes made by the function that makes the feature
cache's (`csm.features.encode_clip`) and its transcript's ids by the one the cache uses (`segment_text_ids`) —
and `csm.decode.frame_steps` generates the frames in the training layout with a KV cache, each code greedy
(temperature 0) or sampled among Mimi's codes (the vocabulary's ids past Mimi's codebook size, which Mimi cannot
decode, are never picked). `MimiVocoder` decodes windows of frames with the folder's Mimi (1,920 samples a
frame), in chunks while they are generated when the speaker streams, else all at once, as the published
`generate(output_audio=True)` decodes its frames.

The reference's transcript is the clip's same-stem `.txt` / `.lab` (the folder importer's convention), else its
row's text in the `manifest.jsonl` of the clip's folder or the folder above (a dataset import's layout), read
only inside the configured roots; without one the context segment holds the clip with an empty text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from core.errors import InputError
from core.families.base import Speaker, Utterance, VoiceCache
from core.families.csm.decode import frame_steps, greedy
from core.families.csm.features import MIMI_RATE, encode_clip, load_mimi
from core.families.csm.layout import layout_ids, segment_text_ids
from core.families.csm.model import SEGMENT_EXTRA, CsmModelConfig, read_folder_config
from core.speech.stream import TokenWindow, WindowAudio

FRAME_SAMPLES = 1920        # Mimi: 24 kHz at 12.5 frames a second
DEFAULT_TEMPERATURE = 0.9   # LinguaForge's CSM sampling when none is asked: temperature 0.9 over the 50 likeliest codes
DEFAULT_TOP_K = 50


def reference_text(clip: Path, roots: list[str]) -> str | None:
    """Return the transcript of the reference `clip`: its same-stem .txt / .lab, else its row's text in the
    manifest.jsonl of its folder or the folder above; None when neither (files outside `roots` are not read)."""
    from core.confine import is_inside
    from core.data.importers import find_sibling
    from core.data.importers.folder import TRANSCRIPT_EXTENSIONS
    from core.data.manifest import read_manifest

    sibling = find_sibling(clip, TRANSCRIPT_EXTENSIONS)
    if sibling is not None and is_inside(sibling, roots):
        return sibling.read_text(encoding="utf-8-sig").strip()
    target = clip.resolve()
    for manifest in (clip.parent / "manifest.jsonl", clip.parent.parent / "manifest.jsonl"):
        if manifest.is_file() and is_inside(manifest, roots):
            rows, _ = read_manifest(manifest, check_audio=False)
            found = next((row.text for row in rows if row.path.resolve() == target), None)
            if found is not None:
                return found
    return None


class CsmSpeaker(Speaker):
    """A CSM checkpoint (LinguaForge's or the folder's published model.safetensors) with the folder's Mimi."""

    sample_rate = MIMI_RATE
    tokens_per_second = MIMI_RATE / FRAME_SAMPLES

    def __init__(self, family: Any, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                 device: str = "auto") -> None:
        from core.checkpoint import LoadedCheckpoint, load_checkpoint
        from core.inference import resolve_device, resolve_tokenizer
        from core.tokenizers.tokenizer import load_tokenizer

        if model_dir is None:
            raise InputError("synthesize --family csm needs --model-dir (or settings families.csm.model_dir): the CSM "
                             "folder whose config.json sizes the model and whose Mimi makes the audio.")
        self.model_dir, self.settings = Path(model_dir), settings
        files = family.published_files(self.model_dir)
        self.device = resolve_device(device)
        loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(checkpoint)
        if loaded.meta and loaded.meta.get("tokenizer_fingerprint"):
            self.tokenizer = resolve_tokenizer(loaded, settings, str(tokenizer) if tokenizer else None)
        else:  # the published model.safetensors: the folder's own tokenizer unless one is named
            self.tokenizer = load_tokenizer(tokenizer or files["tokenizer"])
        folder_config = read_folder_config(self.model_dir)
        self.config = CsmModelConfig(self.tokenizer.size, folder_config)
        self.ids = layout_ids(self.tokenizer, folder_config)
        model = family.build_model(self.config, 0)
        family.load_weights(model, loaded.state_dict, str(loaded.path), self.tokenizer)
        self.model = model.eval().to(self.device)
        self.mimi = load_mimi(folder_config, files["model"]).to(self.device)
        self.codebook_size = int(folder_config["codec_config"].get("codebook_size", 2048))
        self._voices = VoiceCache()

    def voice(self, reference: Path) -> tuple[torch.Tensor, torch.Tensor, str | None]:
        """Return the context segment of `reference` (its transcript's ids, its Mimi frames [n, codebooks]) and the
        transcript. Raises InputError for unreadable audio or a clip longer than a segment's frames."""
        from core.audio import read_audio

        wav = read_audio(reference, MIMI_RATE)[0]
        frames = torch.from_numpy(encode_clip(self.mimi, wav, self.ids.codebooks)).long()
        if len(frames) > self.config.max_speech_tokens:
            raise InputError(f"{reference}: {len(frames) / self.tokens_per_second:.1f} s; CSM takes a voice clip of at "
                             f"most {self.config.max_speech_tokens / self.tokens_per_second:.1f} s. Choose a shorter clip.")
        text = reference_text(Path(reference), list(self.settings.allowed_roots))
        return torch.tensor(segment_text_ids(self.tokenizer, text or ""), dtype=torch.long), frames, text

    def utterance(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
    ) -> Utterance:
        """Return `text` set up to be said after the reference clip's context segment (none without a reference),
        at most `max_new_tokens` frames and what the backbone's positions leave; its report holds text_tokens,
        speech_tokens, stopped, reference_text and the frames' first codes as tokens.

        Options: temperature (0.9; 0 = greedy, as `generate(do_sample=False)`) and top_k (50), for the backbone
        and the depth decoder alike. `language` is not used (CSM's text carries no language tag).
        Raises InputError for a text with no ids, a text over a segment's ids, an unreadable or too long
        reference, or a speed other than 1 (Mimi speaks its frames as generated).
        """
        from models.gpt import sample_next

        if speed != 1.0:
            raise InputError(f"--speed {speed}: CSM speaks its frames as generated; leave the speed at 1.")
        if not text.strip():
            raise InputError("the text is empty; enter the text to speak.")
        ids = segment_text_ids(self.tokenizer, text)
        if len(ids) > self.config.max_text_tokens:
            raise InputError(f"the text is {len(ids)} tokens; CSM takes at most {self.config.max_text_tokens} per "
                             "utterance. Split it into shorter sentences.")
        context, said = None, None
        if reference is not None:
            *segment, said = self._voices.get(reference, lambda: self.voice(reference))
            context = tuple(segment)
        options = dict(options or {})
        temperature = float(options["temperature"]) if options.get("temperature") is not None else DEFAULT_TEMPERATURE
        top_k = int(options["top_k"]) if options.get("top_k") is not None else DEFAULT_TOP_K
        size = self.codebook_size
        pick = ((lambda logits: greedy(logits[..., :size])) if temperature == 0
                else (lambda logits: sample_next(logits[..., :size], temperature, top_k)))
        used = (len(context[0]) + len(context[1]) + SEGMENT_EXTRA if context else 0) + len(ids) + 2
        room = max(0, self.config.positions - used)
        torch.manual_seed(seed)
        return CsmUtterance(self, torch.tensor(ids, dtype=torch.long), context, said,
                            min(room, max_new_tokens or room), pick)


class CsmUtterance(Utterance):
    """One text for CSM: its frames generated one by one after the context segment, each yielded as its first code
    with the whole frame as the extra the Mimi vocoder decodes."""

    def __init__(self, speaker: CsmSpeaker, ids: torch.Tensor, context: Any, said: str | None, max_frames: int,
                 pick: Any) -> None:
        self.speaker, self.ids, self.context, self.said, self.max_frames, self.pick = speaker, ids, context, said, max_frames, pick
        self.vocoder = MimiVocoder(speaker.mimi)
        self.frames = 0
        self.stopped = False

    def tokens(self) -> Iterator[tuple[int, Any]]:
        """Yield (first code, frame [codebooks]) for each frame until the eos frame or the frame limit."""
        speaker = self.speaker
        for frame in frame_steps(speaker.model, speaker.ids, self.context, self.ids, self.max_frames, pick=self.pick):
            self.frames += 1
            yield int(frame[0]), frame
        self.stopped = self.frames < self.max_frames
        if not self.frames:
            raise InputError("CSM ended the utterance before its first frame; try another voice clip, seed or text.")

    def report(self, samples: int) -> dict[str, Any]:
        """Return text_tokens, speech_tokens (frames), stopped (the eos frame came before the frame limit) and reference_text."""
        return {"text_tokens": int(self.ids.numel()), "speech_tokens": self.frames, "stopped": self.stopped,
                "reference_text": self.said}


class MimiVocoder:
    """The folder's Mimi as a window vocoder: a window's frames decoded alone, 1,920 samples a frame."""

    samples_per_token = float(FRAME_SAMPLES)

    def __init__(self, mimi: Any) -> None:
        self.mimi = mimi

    def total_samples(self, tokens: int) -> int:
        """Return the length of the whole utterance of `tokens` frames."""
        return tokens * FRAME_SAMPLES

    @torch.inference_mode()
    def __call__(self, window: TokenWindow) -> WindowAudio:
        """Return the audio of the window's frames (its extras), placed at its first frame's sample."""
        codes = torch.stack(window.extras).T[None].to(next(self.mimi.parameters()).device)
        audio = self.mimi.decode(codes).audio_values[0, 0].float().cpu()
        return WindowAudio(audio, window.start * FRAME_SAMPLES)
