"""Speak with a LinguaForge IndexTTS2 export through the published `IndexTTS2` class (indextts2-inference).

    python speak_indextts2.py --reference voice.wav --text "ሰላም ለዓለም" --output out.wav [--greedy]

or from Python, importing this file before anything imports huggingface_hub (importing it points
the hub at this folder's `hf_hub/` and sets it offline for the process):

    from speak_indextts2 import load_published, speak
    tts = load_published()            # the published IndexTTS2 on this folder
    speak(tts, "voice.wav", "ሰላም ለዓለም", "out.wav")

Everything that speaks is the published code, unedited. This file (written by LinguaForge's
`export`, standalone: it imports only `indextts` and its dependencies) does what the published
class has no switch for:

1. The published class fetches w2v-BERT 2.0, the MaskGCT semantic codec, CAMPPlus and BigVGAN
   from the Hugging Face hub by name. The export holds them as a hub cache in `hf_hub/`; this file
   points `HF_HUB_CACHE` there and sets `HF_HUB_OFFLINE=1`, so nothing is downloaded.
2. The published text front end sends any text without a Latin letter (Amharic included) through
   NeMo's Chinese normaliser unless `language=` names a NeMo language. config.yaml's
   `linguaforge.text_normalizer` records what training applied: a NeMo language (`en`, `zh`,
   `es`) is passed as `language=`; `none` (LinguaForge's default) gives the published
   `TextTokenizer` the `TrainingNormalizer` below: IndexTTS2's punctuation table only, never NeMo.
3. `speak` writes the wav with soundfile: the published `infer` saves through `torchaudio.save`,
   which needs the torchcodec package from torchaudio 2.9 on.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
os.environ["HF_HUB_CACHE"] = str(FOLDER / "hf_hub")  # before huggingface_hub is imported: it reads these once
os.environ["HF_HUB_OFFLINE"] = "1"

from indextts.utils.front import TextNormalizer, TextTokenizer  # noqa: E402 (after the hub settings)
GREEDY = {"top_k": 1, "num_beams": 1, "repetition_penalty": 1.0}  # LinguaForge's decode: see linguaforge.json


class TrainingNormalizer(TextNormalizer):
    """IndexTTS2's punctuation table without NeMo: LinguaForge's training normalisation `none`."""

    def load(self) -> None:
        """Load nothing: no NeMo grammar is used."""

    def normalize(self, text: str) -> str:
        """Return `text` with IndexTTS2's punctuation table applied (the tokenizer then spaces CJK characters)."""
        pattern = re.compile("|".join(re.escape(p) for p in self.char_rep_map))
        return pattern.sub(lambda m: self.char_rep_map[m.group()], text)


def training_normalizer_language(folder: Path = FOLDER) -> str | None:
    """Return the NeMo language training normalised with (`en`, `zh`, `es`), or None for the punctuation table only."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(folder / "config.yaml")
    language = str((cfg.get("linguaforge") or {}).get("text_normalizer") or "none")
    return None if language == "none" else language


def training_tokenizer(folder: Path = FOLDER) -> TextTokenizer:
    """Return the published `TextTokenizer` on this folder's bpe model with the training's normalisation `none`."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(folder / "config.yaml")
    return TextTokenizer(str(folder / cfg.dataset["bpe_model"]), TrainingNormalizer())


def load_published(folder: Path = FOLDER, **kwargs):  # noqa: ANN003, ANN201 (IndexTTS2's own keyword arguments)
    """Return the published `IndexTTS2` on `folder` with the hub offline and the training's text normalisation."""
    from indextts.infer_v2 import IndexTTS2

    class TrainingIndexTTS2(IndexTTS2):
        """The published class; without a NeMo language its tokenizer normalises as training did."""

        def _load_text(self, language):  # noqa: ANN001, ANN202 (the published method's signature)
            if language:
                return super()._load_text(language)
            self.bpe_path = os.path.join(self.model_dir, self.cfg.dataset["bpe_model"])
            self.tokenizer = training_tokenizer(Path(self.model_dir))
            self.normalizer = self.tokenizer.normalizer
            return None

    return TrainingIndexTTS2(model_dir=str(folder), language=training_normalizer_language(folder), **kwargs)


def speak(tts, reference: str, text: str, output: str, **generation_kwargs) -> Path:  # noqa: ANN001, ANN003
    """Write `text` spoken in `reference`'s voice by `tts` (from `load_published`) to the wav `output`; return its path."""
    import soundfile

    rate, samples = tts.infer(reference, text, None, **generation_kwargs)
    soundfile.write(output, samples, rate, subtype="PCM_16")
    return Path(output)


def main() -> None:
    """Speak `--text` in `--reference`'s voice into `--output` (a 22.05 kHz wav)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="a few seconds of the speaker (wav)")
    parser.add_argument("--text", required=True)
    parser.add_argument("--output", required=True, help="wav file to write")
    parser.add_argument("--device", default=None, help="cpu, cuda:0, … (default: IndexTTS2's choice)")
    parser.add_argument("--greedy", action="store_true", help="decode as LinguaForge does (top_k 1, one beam, no repetition penalty)")
    parser.add_argument("--max-mel-tokens", type=int, default=1500, help="most semantic codes per segment")
    args = parser.parse_args()
    options = {**(GREEDY if args.greedy else {}), "max_mel_tokens": args.max_mel_tokens}
    speak(load_published(device=args.device), args.reference, args.text, args.output, **options)


if __name__ == "__main__":
    main()
