"""The `eval tts` procedure: how intelligible a TTS checkpoint is and how far from its references.

For each held-out sentence the checkpoint synthesizes speech (prompted with the reference clip
of the *next* sentence, so the speaker is known but the words are not given away), and three
rows of numbers are computed against the references:

- `model`: the synthesized clips;
- `codec`: the references passed through the checkpoint's codec alone (encode → decode), the
  ceiling any model trained on these codes can reach — LinguaForge's own models only: a model
  family (Chatterbox, IndexTTS2) speaks through its own vocoder and the entry's `absent_rows`
  says so;
- `references`: the references themselves, the judges' own accuracy (distances are 0 there).

Each row holds MCD-DTW (dB), log-F0 and duration ratios, DTW nearest-neighbour sentence
identification (any language) and, for English, PocketSphinx grammar identification and free
decoding word error rate. Chance for identification is 1/N.

Results go to `eval.json` beside the checkpoint (one entry per checkpoint file, so a folder of
checkpoints can be compared), the synthesized clips to `eval_audio/<checkpoint stem>/`, and
TensorBoard scalars `eval/…` at the checkpoint's step to the run's `tb/` folder. With held-out sentences
of the base language too (`evaluate_with_base_language`), the same measures are taken on them and the
entry gets a `sections` record per language, as periodic evaluation writes it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from core.audio import AUDIO_EXTENSIONS, read_audio, resample, write_wav
from core.config import Settings, load_settings
from core.errors import InputError
from core.eval.metrics import (
    SAMPLE_RATE,
    duration_ratio,
    identification_accuracy,
    identify_by_dtw,
    log_f0_ratio,
    mcd_dtw,
)
from core.eval.sections import BASE_LANGUAGE, NEW_LANGUAGE, entry_with_sections
from core.fsutil import atomic_write_json
from core.runs import EVAL_FILE, RunFolder, eval_audio_beside, eval_file_beside, read_evaluations
from core.progress import Progress, detached_progress_file

ESPEAK = "espeak"
SCORING_STEPS = 2  # the progress steps after synthesis: the rows' numbers, then the quality report


def eval_steps(sentences: Sequence[str]) -> int:
    """Return the progress steps an evaluation of `sentences` reports: one per sentence, then the scoring."""
    return len(sentences) + SCORING_STEPS


def read_sentences(path: str | os.PathLike[str]) -> tuple[list[str], list[Path] | None]:
    """Return (sentences, reference clips or None) from a sentences file.

    A `.jsonl` file is read as a LinguaForge manifest: its texts, and its clips as references.
    Any other file holds one sentence per line; blank lines and lines starting with `#` are skipped.
    Raises InputError when the file is missing, unreadable or holds fewer than 2 sentences.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: sentences file not found. Pass a text file with one sentence per line.")
    if path.suffix == ".jsonl":
        from core.data.manifest import load_manifest_rows

        rows = load_manifest_rows(path)
        sentences, clips = [r.text for r in rows], [r.path for r in rows]
    else:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text ({exc}). Save it as UTF-8.") from exc
        sentences = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        clips = None
    if len(sentences) < 2:
        raise InputError(f"{path}: {len(sentences)} sentence(s); evaluation needs at least 2 to identify among.")
    return sentences, clips


def espeak_voice(language: str) -> str:
    """Return the espeak-ng voice used for references in `language` (the sample data set's first voice)."""
    from core.data.sample import VOICES

    return VOICES.get(language, (language,))[0]


def render_espeak_references(sentences: Sequence[str], language: str, folder: Path) -> list[Path]:
    """Render each sentence with espeak-ng into `folder/NNN.wav` and return the paths.

    Raises InputError when espeak-ng is missing or fails for the language.
    """
    from core.data.sample import espeak_binary

    binary, voice = espeak_binary(), espeak_voice(language)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(sentences):
        dest = folder / f"{i + 1:03d}.wav"
        proc = subprocess.run([binary, "-v", voice, "-w", str(dest), "--stdin"], input=text.encode("utf-8"),
                              capture_output=True, timeout=60)
        if proc.returncode != 0 or not dest.is_file():
            raise InputError(f"espeak-ng voice {voice!r} failed for {text!r}: "
                             f"{proc.stderr.decode('utf-8', 'replace').strip()}. Check --language.")
        paths.append(dest)
    return paths


def folder_references(folder: Path, count: int) -> list[Path]:
    """Return the reference clips of a folder: file `<n>.<ext>` speaks line n (1-based) of the sentences.

    Raises InputError naming the folder and the first sentence number without a clip.
    """
    if not folder.is_dir():
        raise InputError(f"{folder}: references folder not found. Pass a folder of clips or `espeak`.")
    by_number: dict[int, Path] = {}
    for path in folder.iterdir():
        if path.suffix.lower() in AUDIO_EXTENSIONS and path.stem.isdigit():
            by_number[int(path.stem)] = path
    missing = [n for n in range(1, count + 1) if n not in by_number]
    if missing:
        raise InputError(f"{folder}: no clip for sentence {missing[0]} (expected {missing[0]}.wav, counting the "
                         f"sentences file's lines from 1); {len(missing)} of {count} missing.")
    return [by_number[n] for n in range(1, count + 1)]


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 4) if kept else None


def score_row(
    clips: Sequence[torch.Tensor], references: Sequence[torch.Tensor], sentences: Sequence[str],
    sphinx: Any | None, wer: bool, distances: bool = True, dtw_judge: bool = True,
) -> dict[str, Any]:
    """Return one row of numbers for 16 kHz `clips` against 16 kHz `references` of the same sentences.

    The row has `mcd_db`, `log_f0_ratio`, `duration_ratio` (means), `dtw_identification`,
    `sphinx_identification`, `wer` (None when not computed) and `per_sentence` details.
    """
    from core.eval.asr import word_error_rate

    per_sentence: list[dict[str, Any]] = [{"sentence": s} for s in sentences]
    usable = [i for i, clip in enumerate(clips) if clip.numel() >= SAMPLE_RATE // 20]
    if distances:
        for i in usable:
            per_sentence[i]["mcd_db"] = round(mcd_dtw(clips[i], references[i]), 3)
            ratio = log_f0_ratio(clips[i], references[i])
            per_sentence[i]["log_f0_ratio"] = None if ratio is None else round(ratio, 4)
            per_sentence[i]["duration_ratio"] = round(duration_ratio(clips[i], references[i]), 4)
    row: dict[str, Any] = {
        "mcd_db": _mean([p.get("mcd_db") for p in per_sentence]) if distances else None,
        "log_f0_ratio": _mean([p.get("log_f0_ratio") for p in per_sentence]) if distances else None,
        "duration_ratio": _mean([p.get("duration_ratio") for p in per_sentence]) if distances else None,
        "dtw_identification": None,
        "sphinx_identification": None,
        "wer": None,
        "silent_clips": len(clips) - len(usable),
    }
    if dtw_judge:
        nearest = identify_by_dtw([clips[i] for i in usable], references)
        predicted: list[int | None] = [None] * len(clips)
        for i, guess in zip(usable, nearest):
            predicted[i] = guess
            per_sentence[i]["dtw_nearest"] = guess
        row["dtw_identification"] = round(identification_accuracy(predicted), 4)
    if sphinx is not None:
        guesses = [sphinx.identify(clip) if i in usable else None for i, clip in enumerate(clips)]
        for entry, guess in zip(per_sentence, guesses):
            entry["sphinx_identified"] = guess
        row["sphinx_identification"] = round(identification_accuracy(guesses), 4)
        if wer:
            hypotheses = [sphinx.transcribe(clip) if i in usable else "" for i, clip in enumerate(clips)]
            for entry, hypothesis in zip(per_sentence, hypotheses):
                entry["transcript"] = hypothesis
            row["wer"] = round(word_error_rate(sentences, hypotheses), 4)
    row["per_sentence"] = per_sentence
    return row


def tensorboard_dir(checkpoint: Path) -> Path:
    """Return where eval scalars go: the run's `tb/` for `runs/<run>/checkpoints/*`, else `tb/` beside it."""
    if checkpoint.parent.name == "checkpoints":
        return RunFolder(checkpoint.parent.parent).tensorboard
    return RunFolder(checkpoint.parent).tensorboard


def write_tensorboard(folder: Path, step: int, rows: dict[str, dict[str, Any]]) -> None:
    """Write each row's numbers as TensorBoard scalars `eval/<metric>` (model) and `eval/<row>_<metric>`."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    try:
        for row_name, row in rows.items():
            prefix = "eval/" if row_name == "model" else f"eval/{row_name}_"
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    writer.add_scalar(prefix + key, float(value), step)
    finally:
        writer.close()


def update_eval_json(path: Path, checkpoint_name: str, result: dict[str, Any]) -> Path:
    """Merge `result` into `path` under `checkpoints[checkpoint_name]` and return the path written."""
    entries = read_evaluations(path)
    entries[checkpoint_name] = result
    return atomic_write_json(path, {"checkpoints": entries})


def _quality(voice: Any, sentences: Sequence[str], synthesized: Sequence[torch.Tensor], reference_wavs: Sequence[torch.Tensor],
             reference_paths: Sequence[Path], spoken: Sequence[dict[str, Any]], audio: Sequence[str], language: str,
             length_bounds: tuple[float, float] | None, mos: bool, transcriber: Any) -> dict[str, Any]:
    """Return the quality report; each sentence's prompt is the next sentence's reference clip."""
    from core.eval.quality.report import SpokenSample, quality_report

    targets = [voice.speech_tokens(path) for path in reference_paths]
    samples = [SpokenSample(text, synthesized[i], reference_wavs[i], list(spoken[i]["tokens"]), bool(spoken[i]["stopped"]),
                            targets[(i + 1) % len(targets)], targets[i], audio[i]) for i, text in enumerate(sentences)]
    report = quality_report(samples, language, length_bounds, embed=voice.embed, mos=mos, transcriber=transcriber)
    report["speaker_encoder"] = f"{voice.family} (its own)" if voice.embed is not None else "resemblyzer"
    return report


def evaluate_checkpoint(
    checkpoint_path: str | os.PathLike[str],
    sentences: Sequence[str],
    references: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = ESPEAK,
    language: str = "en",
    settings: Settings | None = None,
    wer: bool = True,
    seed: int = 0,
    device: str = "auto",
    model_dir: str | os.PathLike[str] | None = None,
    options: dict[str, Any] | None = None,
    family: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    asr: str | None = None,
    mos: bool = True,
    length_bounds: tuple[float, float] | None = None,
    audio_dir: str | os.PathLike[str] | None = None,
    record: bool = True,
    recorded_bounds: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate a TTS checkpoint on held-out `sentences` and return the eval.json entry.

    Synthesis runs on `device` (`auto` = CUDA when present). A checkpoint of another model family
    (chatterbox, indextts: its metadata says which; `family` and `tokenizer` name them for a file
    without metadata) speaks through the family's Speaker with the speech models of `model_dir`
    (else settings `families.<family>.model_dir`; `eval tts` and the trainer pass the run's `model_dir:`)
    and the speaker `options` (`max_seconds` caps each sentence; see `core.eval.voices`).

    `references` is `espeak` (render them), a folder of `<n>.wav` clips, or one clip path per
    sentence. The entry holds `checkpoint`, `family`, `step`, `language`, `sentences`, `chance`,
    the rows `model`, `codec` (own models only) and `references`, `absent_rows` ({row: why} for
    rows not computed), `audio` (synthesized clip paths), `quality` (the quality report of
    `core.eval.quality.report`: failure flags, speaker similarity, MOS estimate (`mos`), CER from the
    `asr` hook; `length_bounds` is the training data's tokens-per-character range, default the one the
    checkpoint records — unless `recorded_bounds` is False: the sentences are in another language than the
    checkpoint's last training data, the base language after a fine-tune, and the evaluation references'
    own range judges them) and `seconds`. `progress` is a caller's line of progress over more than one set (its
    total counts `eval_steps` of each); by default the evaluation reports on its own line. The clips go
    to `audio_dir` (default `eval_audio/<checkpoint stem>/` beside it); with `record` the entry is also
    written to `eval.json` beside the checkpoint and to TensorBoard (periodic evaluation records its
    base-language set inside the new language's entry instead).
    Raises InputError for a checkpoint that is neither a LinguaForge TTS checkpoint nor a family
    checkpoint with its model folder, a `family` that disagrees with the metadata or is missing for
    a file without metadata, fewer than 2 sentences, or references that are missing,
    unreadable or not one per sentence.
    """
    from core.eval.asr import SphinxJudge
    from core.eval.quality.asr_hook import load_transcriber
    from core.eval.voices import load_eval_voice

    settings = settings or load_settings()
    start = time.perf_counter()
    sentences = list(sentences)
    if len(sentences) < 2:
        raise InputError(f"{len(sentences)} sentence(s); evaluation needs at least 2 to identify among.")
    checkpoint = settings.resolve(checkpoint_path)
    if not checkpoint.is_file():
        raise InputError(f"{checkpoint}: checkpoint not found. Pass a TTS checkpoint written by `train` or `prune`.")
    # a bad checkpoint (or a --family that disagrees with it) fails before any rendering
    transcriber = load_transcriber(asr, settings.get("eval.asr_hooks")) if asr else None
    voice = load_eval_voice(checkpoint, settings, device, model_dir, options, family, tokenizer)
    out_dir = Path(audio_dir) if audio_dir is not None else eval_audio_beside(checkpoint)
    if isinstance(references, (str, os.PathLike)) and str(references) == ESPEAK:
        source = ESPEAK
        reference_paths = render_espeak_references(sentences, language, out_dir / "references")
    elif isinstance(references, (str, os.PathLike)):
        source = str(settings.resolve(references))
        reference_paths = folder_references(settings.resolve(references), len(sentences))
    else:
        source = "clips"
        reference_paths = [settings.resolve(p) for p in references]
        if len(reference_paths) != len(sentences):
            raise InputError(f"{len(reference_paths)} reference clips for {len(sentences)} sentences; pass one per sentence.")
    reference_wavs = [read_audio(p, SAMPLE_RATE)[0] for p in reference_paths]
    codec, rate = voice.codec, voice.sample_rate
    # one line of progress over the whole evaluation: a sentence each, then the scoring (SCORING_STEPS); the
    # synthesis inside reports to stderr only, never into this command's progress file
    progress = progress or Progress("eval tts", total=eval_steps(sentences))
    synthesized, codec_wavs, audio, spoken = [], [], [], []
    for i, sentence in enumerate(sentences):
        prompt = reference_paths[(i + 1) % len(sentences)]
        with detached_progress_file():
            wav, spoken_info = voice.speak(sentence, prompt, reference_wavs[i].numel() / SAMPLE_RATE, seed, language)
        spoken.append(spoken_info)
        audio.append(str(write_wav(out_dir / f"{i + 1:03d}.wav", wav, rate)))
        synthesized.append(resample(wav, rate, SAMPLE_RATE) if wav.numel() else wav)
        if codec is not None:
            at_codec_rate = read_audio(reference_paths[i], codec.sample_rate)[0]
            codec_wavs.append(resample(codec.decode(codec.encode(at_codec_rate)), codec.sample_rate, SAMPLE_RATE))
        progress.update()
    sphinx = SphinxJudge(sentences) if language.split("-")[0] == "en" else None
    rows = {"model": score_row(synthesized, reference_wavs, sentences, sphinx, wer)}
    if codec is not None:
        rows["codec"] = score_row(codec_wavs, reference_wavs, sentences, sphinx, wer)
    rows["references"] = score_row(reference_wavs, reference_wavs, sentences, sphinx, wer, distances=False, dtw_judge=False)
    progress.update()
    quality = _quality(voice, sentences, synthesized, reference_wavs, reference_paths, spoken, audio, language,
                       length_bounds or (voice.length_bounds if recorded_bounds else None), mos, transcriber)
    progress.update()
    progress.finish()
    step = voice.step
    result = {
        "checkpoint": str(checkpoint),
        "family": voice.family,
        "step": step,
        "language": language,
        "sentences": len(sentences),
        "chance": round(1 / len(sentences), 4),
        "references_source": source,
        "sphinx_out_of_vocabulary": sphinx.out_of_vocabulary if sphinx is not None else None,
        "rows": rows,
        "absent_rows": voice.absent_rows,
        "audio": audio,
        "quality": quality,
        "seconds": round(time.perf_counter() - start, 2),
    }
    if record:
        record_evaluation(checkpoint, result)
    return result


def record_evaluation(checkpoint: Path, entry: dict[str, Any]) -> None:
    """Write `entry` (an `eval tts` result) to the eval.json beside `checkpoint`, under its file name, and its
    rows' numbers as TensorBoard scalars at its step."""
    update_eval_json(eval_file_beside(checkpoint), checkpoint.name, entry)
    write_entry_scalars(tensorboard_dir(checkpoint), entry)


def write_entry_scalars(folder: Path, entry: dict[str, Any]) -> None:
    """Write an `eval tts` result's rows (their numbers, per-sentence rows left out) as TensorBoard scalars in
    `folder` at the result's step (`write_tensorboard`): where `record_evaluation` puts them beside the checkpoint,
    and where a journey puts a final evaluation in the run that trained it."""
    write_tensorboard(folder, int(entry.get("step") or 0),
                      {name: {k: v for k, v in row.items() if k != "per_sentence"} for name, row in entry["rows"].items()})


def _section(role: str, language: str, sentences: Sequence[str]) -> dict[str, Any]:
    return {"role": role, "language": language, "asked": len(sentences), "used": len(sentences), "speakers": [],
            "note": None}


def evaluate_with_base_language(
    checkpoint_path: str | os.PathLike[str],
    sentences: Sequence[str],
    references: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    language: str,
    base_sentences: Sequence[str],
    base_references: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = ESPEAK,
    base_language: str = "en",
    settings: Settings | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Evaluate a checkpoint on the new language's held-out `sentences` and on held-out `base_sentences` of
    the base language (the one it spoke before the fine-tune), with the same measures; return the one
    eval.json entry recorded for it: the new language's result at the top and `sections` per language, as
    periodic evaluation records them (`core.eval.sections`). The base language's clips go to
    `eval_audio/<checkpoint stem>/<base_language>/`, and their length detector judges by the base references'
    own range (the checkpoint records the new language's). `options` are `evaluate_checkpoint`'s.
    Raises InputError as `evaluate_checkpoint` does, for either set, before any synthesis where it can
    (fewer than 2 base sentences, a base references folder without a clip per sentence).
    """
    settings = settings or load_settings()
    checkpoint = settings.resolve(checkpoint_path)
    base_sentences = list(base_sentences)
    if len(base_sentences) < 2:
        raise InputError(f"{len(base_sentences)} base-language sentence(s); evaluation needs at least 2 to identify among.")
    if isinstance(base_references, (str, os.PathLike)) and str(base_references) != ESPEAK:
        folder_references(settings.resolve(base_references), len(base_sentences))
    progress = Progress("eval tts", total=eval_steps(sentences) + eval_steps(base_sentences))  # one line for both sets
    new = evaluate_checkpoint(checkpoint, sentences, references, language, settings, record=False, progress=progress,
                              **options)
    base = evaluate_checkpoint(checkpoint, base_sentences, base_references, base_language, settings, record=False,
                               audio_dir=eval_audio_beside(checkpoint) / base_language, recorded_bounds=False,
                               progress=progress, **options)
    eval_set = {"source": "eval tts", "sections": [_section(NEW_LANGUAGE, language, sentences),
                                                   _section(BASE_LANGUAGE, base_language, base_sentences)]}
    entry = entry_with_sections(new, base, eval_set)
    entry["seconds"] = round(new["seconds"] + base["seconds"], 2)
    record_evaluation(checkpoint, entry)
    return entry


def _eval_files(folder: Path) -> list[Path]:
    if folder.is_file():
        folder = folder.parent
    candidates = [folder / EVAL_FILE, RunFolder(folder).eval_file]
    return [path for path in candidates if path.is_file()]


def collect_evaluations(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return one flat summary per checkpoint evaluated in `folder`, by step then name.

    `folder` is a run folder (its `checkpoints/eval.json` is read), a folder holding `eval.json`,
    or a file inside one. Each summary has `checkpoint` (file name), `path`, `exists`, `step`,
    `language`, `chance`, the model row's `mcd_db`, `dtw_identification`, `sphinx_identification`,
    `wer`, the codec ceiling as `codec_mcd_db`, `codec_dtw_identification`,
    `codec_sphinx_identification`, `sentences` (their texts), `audio` (one synthesized clip
    path per sentence, None where the file is gone), `quality` (the entry's quality report without its
    per-sentence rows; {} for entries written before it), `sections` (periodic evaluation: per language
    section its summary — language, asked, used, note, numbers, flags raised; {} otherwise) and
    `val_loss` and `retention` (recorded by periodic evaluation: the base language's loss change and its verdict,
    core.training.retention). Unreadable eval.json files are skipped.
    """
    found: list[dict[str, Any]] = []
    for eval_json in _eval_files(Path(folder)):
        for name, entry in read_evaluations(eval_json).items():
            rows = entry.get("rows") or {}
            model, codec = rows.get("model") or {}, rows.get("codec") or {}
            path = eval_json.parent / name
            texts = [p.get("sentence", "") for p in model.get("per_sentence", [])]
            clips = eval_audio_beside(path)
            audio = [str(clips / Path(a).name) for a in entry.get("audio", [])]
            found.append({
                "checkpoint": name,
                "path": str(path),
                "exists": path.is_file(),
                "step": int(entry.get("step") or 0),
                "language": entry.get("language"),
                "chance": entry.get("chance"),
                **{key: model.get(key) for key in ("mcd_db", "dtw_identification", "sphinx_identification", "wer")},
                **{f"codec_{key}": codec.get(key) for key in ("mcd_db", "dtw_identification", "sphinx_identification")},
                "sentences": texts,
                "audio": [a if Path(a).is_file() else None for a in audio],
                "quality": {k: v for k, v in (entry.get("quality") or {}).items() if k != "per_sentence"},
                "sections": {role: {k: v for k, v in section.items() if k not in ("rows", "quality", "audio")}
                             for role, section in (entry.get("sections") or {}).items()},
                "val_loss": entry.get("val_loss"),
                "retention": entry.get("retention"),
            })
    return sorted(found, key=lambda e: (e["step"], e["checkpoint"]))
