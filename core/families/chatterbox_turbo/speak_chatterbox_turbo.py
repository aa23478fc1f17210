"""Speak with a LinguaForge Chatterbox-Turbo/Nano export through the published `ChatterboxTurboTTS` (chatterbox).

    python speak_chatterbox_turbo.py --reference voice.wav --text "ሰላም ለዓለም" --language am --output out.wav

or from Python:

    from speak_chatterbox_turbo import load_published, speak
    tts = load_published(device="cpu")        # the published ChatterboxTurboTTS
    speak(tts, "[am]ሰላም ለዓለም", "out.wav", audio_prompt_path="voice.wav")

The published `ChatterboxTurboTTS.from_local` builds `T3(T3Config(text_tokens_dict_size=50276))`, so a
T3 grown for a new language does not load. The few lines here (written by LinguaForge's `export`,
standalone: they import only `chatterbox` and its dependencies) build T3 the way `from_local` does at
the export's size (`linguaforge.json`: `text_tokens_dict_size`; for a backbone other than the
published GPT-2 medium/small, `t3_backbone`), load it strictly, and load the rest as `from_local`
does: `ve.safetensors`, `s3gen_meanflow.safetensors` (`S3Gen(meanflow=True)`), `conds.pt`, and the
tokenizer with `AutoTokenizer.from_pretrained` from this folder (its `tokenizer.json`). Everything
that speaks is the published code.

`generate` decodes in the layout LinguaForge trained (one start-of-speech token after the text,
GPT-2's positions). `--greedy` passes the settings that pick the most likely token at every step
(`top_k=1, top_p=1.0, repetition_penalty=1.0`; linguaforge.json `published_inference`); without it
`generate` samples with its defaults (temperature 0.8, top-k 1000, top-p 0.95, repetition penalty 1.2).
A language tag goes in front of the text (`--language am` puts `[am]` there), as in training.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported: nothing is fetched

import torch  # noqa: E402 (after the hub setting)
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from chatterbox import tts_turbo  # noqa: E402
from chatterbox.models.t3 import T3  # noqa: E402
from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS  # noqa: E402
from chatterbox.models.t3.modules.t3_config import T3Config  # noqa: E402

FOLDER = Path(__file__).resolve().parent
GREEDY = {"top_k": 1, "top_p": 1.0, "repetition_penalty": 1.0, "temperature": 1.0}


def export_note(folder: Path = FOLDER) -> dict:
    """Return the export's linguaforge.json."""
    return json.loads((folder / "linguaforge.json").read_text(encoding="utf-8"))


def grown_t3(folder: Path = FOLDER) -> T3:
    """Return the published `T3` built as `from_local` builds it, with the export's text rows (and backbone),
    its weights loaded strictly (GPT-2's unused token table then deleted, as `from_local` does)."""
    note = export_note(folder)
    hp = T3Config(text_tokens_dict_size=note["text_tokens_dict_size"])
    hp.llama_config_name = "GPT2_small" if note["variant"] == "nano" else "GPT2_medium"
    backbone = note.get("t3_backbone")  # absent for the published GPT-2 medium / small
    if backbone:
        LLAMA_CONFIGS.setdefault(backbone["llama_config_name"], backbone["llama_config"])
        hp.llama_config_name = backbone["llama_config_name"]
    hp.speech_tokens_dict_size = 6563
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = 375
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    t3 = T3(hp)
    t3.load_state_dict(load_file(str(folder / note["t3_file"])), strict=True)
    del t3.tfmr.wte
    return t3.eval()


def load_published(folder: Path = FOLDER, device: str = "cpu") -> tts_turbo.ChatterboxTurboTTS:
    """Return the published `ChatterboxTurboTTS` with the grown T3 and the export's tokenizer, everything else
    loaded from `folder` as `from_local` loads it."""
    map_location = torch.device("cpu") if device in ("cpu", "mps") else None
    ve = tts_turbo.VoiceEncoder()
    ve.load_state_dict(load_file(folder / "ve.safetensors"))
    s3gen = tts_turbo.S3Gen(meanflow=True)
    s3gen.load_state_dict(load_file(folder / "s3gen_meanflow.safetensors"), strict=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    conds = None
    if (folder / "conds.pt").exists():
        conds = tts_turbo.Conditionals.load(folder / "conds.pt", map_location=map_location).to(device)
    label = "Nano" if export_note(folder)["variant"] == "nano" else "Turbo"
    return tts_turbo.ChatterboxTurboTTS(grown_t3(folder).to(device), s3gen.to(device).eval(), ve.to(device).eval(),
                                        tokenizer, device, conds=conds, model_label=label)


def speak(tts: tts_turbo.ChatterboxTurboTTS, text: str, output: str, **generate_kwargs) -> Path:  # noqa: ANN003
    """Write `tts.generate(text, **generate_kwargs)` to the wav `output` (24 kHz); return its path."""
    import soundfile

    wav = tts.generate(text, **generate_kwargs)
    soundfile.write(output, wav[0].numpy(), tts.sr, subtype="PCM_16")
    return Path(output)


def main() -> None:
    """Speak `--text` (with `[--language]`'s tag in front) in `--reference`'s voice, else conds.pt's, into `--output`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", required=True)
    parser.add_argument("--language", default=None, help="language tag put in front of the text, e.g. am "
                                                          "(see linguaforge.json language_tags); none for English")
    parser.add_argument("--output", required=True, help="wav file to write")
    parser.add_argument("--reference", default=None, help="over 5 s of the speaker (wav); default conds.pt's voice")
    parser.add_argument("--greedy", action="store_true", help="the most likely token at every step (the trained layout's argmax)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps")
    args = parser.parse_args()
    text = f"[{args.language}]{args.text}" if args.language else args.text
    speak(load_published(device=args.device), text, args.output, audio_prompt_path=args.reference,
          **(GREEDY if args.greedy else {}))


if __name__ == "__main__":
    main()
