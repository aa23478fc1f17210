"""A real spoken sample dataset rendered with espeak-ng from the built-in sentences.

Each language is spoken by two espeak voice variants (two speakers), so prompt pairs always
find a same-speaker partner. The rendered clips go through the normal manifest import, so the
sample folder looks exactly like any imported dataset.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from core.data.importing import ImportSummary, import_dataset
from core.errors import InputError
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, MAX_RECOMBINED, SPANISH_SENTENCES

SENTENCES: dict[str, tuple[str, ...]] = {"en": ENGLISH_SENTENCES, "am": AMHARIC_SENTENCES, "es": SPANISH_SENTENCES}
VOICES: dict[str, tuple[str, ...]] = {"en": ("en-us+m3", "en-us+f3"), "am": ("am+m3", "am+f3"), "es": ("es+m3", "es+f3")}
INSTALL_HINT = "Install it with `sudo apt-get install espeak-ng` (Debian/Ubuntu) or `brew install espeak-ng`."


def espeak_binary() -> str:
    """Return the espeak-ng executable path.

    Raises InputError with the install command when espeak-ng is not on PATH.
    """
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise InputError(f"espeak-ng is not installed. {INSTALL_HINT}")
    return binary


def speaker_name(voice: str) -> str:
    """Return the speaker label of an espeak voice such as `am+f3` (`espeak-am-f3`)."""
    return "espeak-" + voice.replace("+", "-")


def render(binary: str, voice: str, text: str, dest: Path) -> None:
    """Speak `text` with espeak-ng `voice` into the wav file `dest`.

    Raises InputError when espeak-ng fails.
    """
    proc = subprocess.run(
        [binary, "-v", voice, "-w", str(dest), "--stdin"],
        input=text.encode("utf-8"),
        capture_output=True,
        timeout=60,
    )
    if proc.returncode != 0 or not dest.is_file():
        raise InputError(f"espeak-ng failed for voice {voice}: {proc.stderr.decode('utf-8', 'replace').strip()}")


def recombined_sentences(sentences: Sequence[str], count: int, seed: str) -> list[str]:
    """Return `count` new sentences made of the words of `sentences`, reshuffled: each as long (in words)
    as a sentence drawn from `sentences`, its words drawn from all of theirs (punctuation stays on its word).

    Deterministic for a `seed`; more text variety for a model to learn from than the sentences alone, with
    no word that `sentences` lack.
    """
    rng = random.Random(seed)
    words = [word for sentence in sentences for word in sentence.split()]
    lengths = [len(sentence.split()) for sentence in sentences]
    return [" ".join(rng.choice(words) for _ in range(rng.choice(lengths))) for _ in range(count)]


def plan_clips(languages: list[str], per_language: int, recombined: int = 0) -> list[dict[str, str]]:
    """Return the clips to render: id, text, voice, speaker and language for each.

    Clip i of a language speaks sentence i (cycling with the other voice after the last
    sentence). Then `recombined` clips per language (ids `<language>_r<n>`) speak
    `recombined_sentences` of the sentences spoken so far, the voices alternating. Raises InputError
    for an unknown or repeated language, more clips than sentences × voices, or more than
    MAX_RECOMBINED recombined clips.
    """
    repeated = sorted({language for language in languages if languages.count(language) > 1})
    if not languages or repeated:
        raise InputError(f"--languages {','.join(languages)}: name each language once ({', '.join(SENTENCES)}).")
    if not 0 <= recombined <= MAX_RECOMBINED:
        raise InputError(f"--recombined {recombined}: choose 0 to {MAX_RECOMBINED} clips per language.")
    clips = []
    for language in languages:
        if language not in SENTENCES:
            raise InputError(f"language {language!r}: no sample sentences. Choose from {', '.join(SENTENCES)}.")
        sentences, voices = SENTENCES[language], VOICES[language]
        limit = len(sentences) * len(voices)
        if not 1 <= per_language <= limit:
            raise InputError(f"--per-language {per_language}: choose 1 to {limit} for {language}.")
        planned = [(f"{language}_{i:04d}", sentences[i % len(sentences)], voices[(i + i // len(sentences)) % len(voices)])
                   for i in range(per_language)]
        spoken = sentences[:per_language]
        planned += [(f"{language}_r{i:05d}", text, voices[i % len(voices)])
                    for i, text in enumerate(recombined_sentences(spoken, recombined, f"{language}:{per_language}"))]
        clips += [{"id": clip_id, "text": text, "voice": voice, "speaker": speaker_name(voice), "language": language}
                  for clip_id, text, voice in planned]
    return clips


def sample_dataset(
    output: str | Path, sample_rate: int, languages: list[str], per_language: int, workers: int = 2,
    recombined: int = 0,
) -> ImportSummary:
    """Render the sample clips (`plan_clips`) with espeak-ng and import them into `output`; return the summary.

    Raises InputError when espeak-ng is missing or fails, or for bad languages or counts.
    """
    binary = espeak_binary()
    clips = plan_clips(languages, per_language, recombined)
    with tempfile.TemporaryDirectory(prefix="lf-espeak-") as tmp:
        raw = Path(tmp)
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            list(pool.map(lambda c: render(binary, c["voice"], c["text"], raw / f"{c['id']}.wav"), clips))
        rows = [
            {k: c[k] for k in ("id", "text", "speaker", "language")} | {"audio": f"{c['id']}.wav"} for c in clips
        ]
        (raw / "manifest.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
        return import_dataset("manifest", raw / "manifest.jsonl", output, sample_rate, workers=workers)
