"""Speak with a LinguaForge Chatterbox export through the published `ChatterboxMultilingualTTS` (chatterbox).

    python speak_chatterbox.py --reference voice.wav --text "ሰላም ለዓለም" --language am --output out.wav

or from Python:

    from speak_chatterbox import load_published, speak
    tts = load_published(device="cpu")       # the published ChatterboxMultilingualTTS
    speak(tts, "ሰላም ለዓለም", "am", "out.wav", audio_prompt_path="voice.wav")

The published `ChatterboxMultilingualTTS.from_local` builds `T3(T3Config.multilingual())` (2,454 text
rows, so a grown T3 does not load) and `generate` refuses a language id outside `SUPPORTED_LANGUAGES`.
The few lines here (written by LinguaForge's `export`, standalone: they import only `chatterbox`
and its dependencies) build the grown T3 from `linguaforge.json` (`text_tokens_dict_size`; for a
backbone other than the published one, `t3_backbone`), load the export's tokenizer and the
folder's VoiceEncoder, S3Gen and `conds.pt` as `from_local` does, and add the export's language
tags to `SUPPORTED_LANGUAGES`. Everything that speaks is the published code. Importing this file
sets `HF_HUB_OFFLINE=1`: the published tokenizer would otherwise fetch `Cangjie5_TC.json` (used
for Chinese only) when the folder lacks it.

`generate` decodes with the published defaults (sampling, repetition penalty 1.2, up to 1,000
tokens) and starts the speech with two start tokens where training used one (linguaforge.json
`published_inference` gives the `T3.inference` call that decodes in the trained layout).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported: it reads this once

import torch  # noqa: E402 (after the hub setting)
from safetensors.torch import load_file  # noqa: E402

from chatterbox import mtl_tts  # noqa: E402
from chatterbox.models.t3 import T3  # noqa: E402
from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS  # noqa: E402
from chatterbox.models.t3.modules.t3_config import T3Config  # noqa: E402

FOLDER = Path(__file__).resolve().parent


def export_note(folder: Path = FOLDER) -> dict:
    """Return the export's linguaforge.json."""
    return json.loads((folder / "linguaforge.json").read_text(encoding="utf-8"))


def grown_t3(folder: Path = FOLDER) -> T3:
    """Return the published `T3` with the export's text rows (and backbone), its weights loaded strictly."""
    note = export_note(folder)
    hp = T3Config(text_tokens_dict_size=note["text_tokens_dict_size"])
    backbone = note.get("t3_backbone")  # absent for the published Llama_520M backbone
    if backbone:
        LLAMA_CONFIGS.setdefault(backbone["llama_config_name"], backbone["llama_config"])
        hp.llama_config_name = backbone["llama_config_name"]
        hp.max_text_tokens, hp.max_speech_tokens = backbone["max_text_tokens"], backbone["max_speech_tokens"]
    t3 = T3(hp)
    t3.load_state_dict(load_file(str(folder / note["t3_file"])))
    return t3.eval()


def accept_language_tags(folder: Path = FOLDER) -> list[str]:
    """Add the export's language tags to the published `SUPPORTED_LANGUAGES`; return the tags added."""
    added = [tag for tag in export_note(folder)["language_tags"] if tag not in mtl_tts.SUPPORTED_LANGUAGES]
    for tag in added:
        mtl_tts.SUPPORTED_LANGUAGES[tag] = tag
    return added


def load_published(folder: Path = FOLDER, device: str = "cpu") -> mtl_tts.ChatterboxMultilingualTTS:
    """Return the published `ChatterboxMultilingualTTS` with the grown T3 and the export's tokenizer, as
    `from_local` builds it otherwise (ve.pt, s3gen.pt and conds.pt from `folder`)."""
    map_location = torch.device("cpu") if device in ("cpu", "mps") else None
    ve = mtl_tts.VoiceEncoder()
    ve.load_state_dict(torch.load(folder / "ve.pt", map_location=map_location, weights_only=True))
    s3gen = mtl_tts.S3Gen()
    s3gen.load_state_dict(torch.load(folder / "s3gen.pt", map_location=map_location, weights_only=True))
    tokenizer = mtl_tts.MTLTokenizer(str(folder / export_note(folder)["tokenizer_file"]))
    conds = None
    if (folder / "conds.pt").exists():
        conds = mtl_tts.Conditionals.load(folder / "conds.pt", map_location=map_location).to(device)
    accept_language_tags(folder)
    return mtl_tts.ChatterboxMultilingualTTS(grown_t3(folder).to(device), s3gen.to(device).eval(), ve.to(device).eval(),
                                             tokenizer, device, conds=conds)


def speak(tts: mtl_tts.ChatterboxMultilingualTTS, text: str, language: str, output: str, **generate_kwargs) -> Path:  # noqa: ANN003
    """Write `tts.generate(text, language, **generate_kwargs)` to the wav `output` (24 kHz); return its path."""
    import soundfile

    wav = tts.generate(text, language, **generate_kwargs)
    soundfile.write(output, wav[0].numpy(), tts.sr, subtype="PCM_16")
    return Path(output)


def main() -> None:
    """Speak `--text` in `--language` (in `--reference`'s voice, else conds.pt's) into `--output`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", required=True)
    parser.add_argument("--language", required=True, help="language tag, e.g. am (see linguaforge.json language_tags)")
    parser.add_argument("--output", required=True, help="wav file to write")
    parser.add_argument("--reference", default=None, help="a few seconds of the speaker (wav); default conds.pt's voice")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps")
    args = parser.parse_args()
    speak(load_published(device=args.device), args.text, args.language, args.output, audio_prompt_path=args.reference)


if __name__ == "__main__":
    main()
