"""The `eval.asr` hook: a user's speech recognizer for the new language, scored by character error rate.

`eval.asr` (run config) or `eval tts --asr` names the recognizer: `pocketsphinx` (PocketSphinx's
US-English free decoding, shipped in its wheel — the built-in hook, and the one the tests run the
interface with) or the name of a hook the settings file declares under `eval.asr_hooks`, each one
- `python:<module>:<function>`: a callable `function(wav_path: str, language: str) -> str`, or
- `command:<command line>`: a program run once per clip with `{wav}` and `{language}` replaced by the
  clip's path and the language code; its standard output is the transcript.
Code and programs run only from the settings file (the operator's): a run config, preset or job —
which can come from the dashboard — only names them. Clips are the evaluation's own files
(eval_audio/…); nothing else is written.
"""

from __future__ import annotations

import importlib
import shlex
import subprocess
import unicodedata
from typing import Any, Callable, Mapping, Sequence

import jiwer

from core.errors import InputError

Transcriber = Callable[[str, str], str]
COMMAND_TIMEOUT_S = 300


def normalize_characters(text: str) -> str:
    """Return `text` lower-cased, punctuation and symbols removed, whitespace collapsed (any script)."""
    kept = "".join(" " if unicodedata.category(c)[0] in "PSZ" else c for c in text.lower())
    return " ".join(kept.split())


def character_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Return the corpus character error rate of `hypotheses` against `references` (normalised).

    Raises ValueError when the lists differ in length or every reference is empty."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    pairs = [(normalize_characters(r), normalize_characters(h)) for r, h in zip(references, hypotheses)]
    pairs = [(r, h) for r, h in pairs if r]
    if not pairs:
        raise ValueError("every reference sentence is empty")
    return float(jiwer.cer([r for r, _ in pairs], [h for _, h in pairs]))


def pocketsphinx_transcribe(wav_path: str, language: str) -> str:
    """Return PocketSphinx's US-English free transcription of the clip at `wav_path` (`language` unused)."""
    from core.audio import read_audio
    from core.eval.asr import SAMPLE_RATE, free_transcription

    return free_transcription(read_audio(wav_path, SAMPLE_RATE)[0])


def _command(template: str) -> Transcriber:
    def transcribe(wav_path: str, language: str) -> str:
        argv = [part.replace("{wav}", wav_path).replace("{language}", language) for part in shlex.split(template)]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"eval.asr command {argv[0]!r} failed: {exc}. Check the command.") from exc
        if proc.returncode != 0:
            raise InputError(f"eval.asr command {argv[0]!r} exited {proc.returncode}: "
                             f"{proc.stderr.decode('utf-8', 'replace').strip()[:200]}")
        return proc.stdout.decode("utf-8", "replace").strip()

    return transcribe


def hook_spec(name: str, hooks: Mapping[str, Any] | None) -> str:
    """Return the spec `name` stands for: `pocketsphinx`, or the settings' `eval.asr_hooks[name]`.

    Raises InputError for a name the settings do not declare (a `python:` or `command:` spec given
    directly included), naming the settings key to add."""
    if name == "pocketsphinx":
        return name
    declared = dict(hooks or {})
    if name not in declared:
        known = ", ".join(["pocketsphinx", *sorted(declared)])
        raise InputError(f"eval.asr {name!r}: not a declared hook; use one of {known}, or declare it in the "
                         "settings file as eval: {asr_hooks: {NAME: 'python:<module>:<function>' or "
                         "'command:<line with {wav}>'}} and name NAME.")
    return str(declared[name])


def load_transcriber(name: str, hooks: Mapping[str, Any] | None = None) -> Transcriber:
    """Return the transcriber `name` names: `pocketsphinx` or a hook of `hooks` (the settings'
    `eval.asr_hooks`; see the module docstring).

    Raises InputError for an undeclared name, a hook of unknown form, a module or function that
    cannot be imported, or a command without `{wav}`."""
    spec = hook_spec(name, hooks)
    if spec == "pocketsphinx":
        return pocketsphinx_transcribe
    kind, _, rest = spec.partition(":")
    if kind == "python":
        module_name, _, function = rest.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), function)
        except (ImportError, AttributeError, ValueError) as exc:
            raise InputError(f"eval.asr {name!r} ({spec}): cannot import {function!r} from {module_name!r} ({exc}). "
                             "Use python:<module>:<function> with the module on the Python path.") from exc
        if not callable(target):
            raise InputError(f"eval.asr {name!r} ({spec}): {function!r} is not callable.")
        return target
    if kind == "command":
        if "{wav}" not in rest:
            raise InputError(f"eval.asr {name!r} ({spec}): the command must contain {{wav}} where the clip's path goes.")
        return _command(rest)
    raise InputError(f"eval.asr {name!r} ({spec}): a hook is python:<module>:<function> or command:<line with {{wav}}>.")


def transcribe_all(transcriber: Transcriber, wav_paths: Sequence[str], language: str) -> list[str]:
    """Return the transcript of each clip. Raises InputError when the transcriber returns no string."""
    transcripts = []
    for path in wav_paths:
        text = transcriber(str(path), language)
        if not isinstance(text, str):
            raise InputError(f"eval.asr returned {type(text).__name__} for {path}; it must return the transcript text.")
        transcripts.append(text)
    return transcripts
