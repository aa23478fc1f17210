"""`synthesize` (TTS checkpoint → wav) and `generate` (LM checkpoint → text), top-level commands."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from core.paths import CLI_PATH
from core.cli.common import LANGUAGE_ARG, SEED_ARG, Result, add_command, float_in, int_in
from core.numbers import MAX_NEW_TOKENS, MAX_TEMPERATURE, NumberRange
from core.config import load_settings
from core.tables import render_mapping

if TYPE_CHECKING:
    from core.checkpoint import LoadedCheckpoint
    from core.config import Settings


ANY_NUMBER = NumberRange(-1e9, 1e9, words="a finite number")  # what a KEY=NUMBER option may hold before its family's range is known


def add_family_options(parser: argparse.ArgumentParser) -> None:
    """Add --family (only for files without metadata naming it) and --model-dir (a family's published folder)."""
    from core.families.registry import model_family_names

    parser.add_argument("--family", default=None, choices=model_family_names(),
                        help="model family of a checkpoint whose metadata names none (a published file); "
                             "default: the family its metadata names. One that disagrees with it is refused")
    parser.add_argument("--model-dir", default=None, type=CLI_PATH,
                        help="the family's published model folder (chatterbox: s3gen.pt, ve.pt, conds.pt; chatterbox-turbo: "
                             "s3gen_meanflow.safetensors, ve.safetensors, conds.pt; "
                             "indextts: config.yaml, s2mel.pth, w2v-bert-2.0/, …; csm: config.json, model.safetensors with its "
                             "Mimi, the tokenizer); default: the run's model_dir:, "
                             "else settings families.<family>.model_dir")


def run_model_dir(checkpoint: Path, settings: Settings) -> str | None:
    """Return `model_dir:` of the run config beside a run's checkpoint (None outside a run folder, or
    when its config names none). Raises InputError when that run config does not load."""
    from core.runs import run_folder_of_checkpoint
    from core.training.run_config import load_run_config

    run = run_folder_of_checkpoint(checkpoint)
    if run is None or not run.config.is_file():
        return None
    return load_run_config(run.config, settings).model_dir


def speaker_option(text: str) -> tuple[str, float]:
    """Return (key, number) of a KEY=NUMBER --option with a finite number; raises argparse.ArgumentTypeError
    otherwise. Its range is the family's (`ModelFamily.check_speech_options`), checked once the family is known."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!a}: write KEY=NUMBER, e.g. cfg_weight=0.5")
    number, problem = ANY_NUMBER.problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{key.strip()}: {problem}")
    return key.strip(), float(number)  # type: ignore[arg-type]


def _sampling(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float_in(0.0, MAX_TEMPERATURE), default=0.8, help="sampling temperature; 0 = greedy (default 0.8)")
    parser.add_argument("--top-k", type=int_in(0, 1_000_000), default=50, help="keep the k most likely ids; 0 = off (default 50)")
    parser.add_argument("--top-p", type=float_in(0.0, 1.0, low_open=True), default=None, help="nucleus sampling threshold in (0, 1]")
    parser.add_argument("--seed", type=SEED_ARG, default=0, help="random seed (default 0)")
    parser.add_argument("--tokenizer", default=None, type=CLI_PATH, help="tokenizer file; must match the checkpoint's fingerprint")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where the model runs: auto = CUDA when present (default), cpu, or cuda")


def _check_sampling(args: argparse.Namespace) -> None:
    from core.errors import InputError

    if args.temperature < 0:
        raise InputError(f"--temperature {args.temperature}: must be ≥ 0.")
    if args.top_p is not None and not 0.0 < args.top_p <= 1.0:
        raise InputError(f"--top-p {args.top_p}: must be in (0, 1].")


def _check_wav_output(output: Path) -> None:
    from core.errors import InputError

    if output.suffix.lower() != ".wav":
        raise InputError(f"--output {output}: synthesize writes a WAV file, so its name must end .wav. "
                         f"Use --output {output.with_suffix('.wav')}.")


def _synthesize(args: argparse.Namespace) -> Result:
    """Speak text with a TTS checkpoint and write a wav.

    Tokenizer and codec come from the checkpoint's metadata (beside it, its recorded paths, or the
    workspace by fingerprint); a tokenizer with another fingerprint is refused. Long text is split at
    sentence ends; the sentences are generated together, 16 at a time, with progress; at most 5000
    characters per call. Text in which the tokenizer knows no letter or digit is refused. Reports the
    real-time factor, the time to the first audio and the device (--device auto uses CUDA when present).
    With --stream the wav grows in `<output>.part` chunk by chunk while the tokens are generated and
    becomes the output at the end. The model family comes from the checkpoint's metadata; --family is
    needed only for a file without it (a published one).
    """
    from core.audio import read_audio, write_wav
    from core.checkpoint import load_checkpoint
    from core.inference import check_text_length, checkpoint_family, load_for_inference, resolve_device, synthesize

    _check_sampling(args)
    check_text_length(args.text)
    _check_wav_output(args.output)
    resolve_device(args.device)
    if args.reference is not None:
        read_audio(args.reference)  # a missing, unreadable or NaN reference fails before the model loads
    settings = load_settings()
    loaded = load_checkpoint(settings.resolve(args.checkpoint))
    family = checkpoint_family(loaded, args.family)
    if family != "linguaforge":
        return _synthesize_family(args, settings, loaded, family)
    if args.option:
        from core.errors import InputError

        raise InputError(f"--option {args.option[0][0]}: speaker options are for Chatterbox and IndexTTS2 checkpoints; "
                         f"{args.checkpoint} is a LinguaForge model (use --temperature, --top-k, --top-p).")
    if args.max_new_tokens is not None:
        from core.errors import InputError

        raise InputError(f"--max-new-tokens {args.max_new_tokens}: applies to Chatterbox and IndexTTS2 checkpoints; "
                         f"{args.checkpoint} is a LinguaForge model, whose speech ends at its stop token.")
    inference = load_for_inference(loaded, settings, args.tokenizer, args.codec, task="tts", device=args.device)
    asked = (inference, args.text, args.reference, args.temperature, args.top_k or None, args.top_p, args.seed, args.language)
    if args.stream:
        from core.audio_formats import GrowingWav
        from core.speech.stream import ChunkPlan

        growing = GrowingWav(args.output, inference.codec.sample_rate)
        try:
            wav, report = synthesize(*asked, plan=ChunkPlan(), speed=args.speed, on_chunk=growing.write)
        except BaseException:
            growing.abort()
            raise
        output = growing.close()
    else:
        wav, report = synthesize(*asked, speed=args.speed)
        output = write_wav(args.output, wav, report["sample_rate"])
    report["output"] = str(output)
    report["family"] = family
    shown = {k: report[k] for k in ("output", "family", "audio_seconds", "wall_seconds", "first_audio_s", "rtf", "device")}
    shown["sentences"] = len(report["sentences"])
    return Result(report, render_mapping(shown))


def _synthesize_family(args: argparse.Namespace, settings: Settings, loaded: LoadedCheckpoint, name: str) -> Result:
    """Speak through the family's Speaker: `loaded` (already read once) with the model folder of
    --model-dir, else its run's `model_dir:`, else settings `families.<family>.model_dir`."""
    from core.eval.voices import family_model_dir
    from core.families.base import SynthesisRequest
    from core.families.registry import get_model_family

    family = get_model_family(name)
    options = family.check_speech_options(dict(args.option))
    request = SynthesisRequest(
        checkpoint=loaded, text=args.text, output=settings.resolve(args.output),
        tokenizer=settings.resolve(args.tokenizer) if args.tokenizer else None,
        reference=settings.resolve(args.reference) if args.reference else None, language=args.language,
        model_dir=family_model_dir(name, settings, args.model_dir or run_model_dir(loaded.path, settings)), seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        options={**options, "temperature": args.temperature}, device=args.device, stream=args.stream, speed=args.speed,
    )
    report = {**family.synthesize(request, settings), "family": name}
    shown = ("output", "family", "seconds", "sample_rate", "first_audio_s", "rtf")
    return Result(report, render_mapping({k: report.get(k) for k in shown}))


def _generate(args: argparse.Namespace) -> Result:
    """Continue a prompt with an LM checkpoint."""
    from core.errors import InputError
    from core.inference import generate_text, load_for_inference

    _check_sampling(args)
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1.")
    inference = load_for_inference(args.checkpoint, load_settings(), args.tokenizer, task="lm", device=args.device)
    report = generate_text(inference, args.prompt, args.max_new_tokens, args.temperature, args.top_k or None, args.top_p, args.seed)
    return Result(report, f"{args.prompt}{report['text']}" if report["text"] else args.prompt)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `synthesize` and `generate` commands."""
    parser = add_command(subparsers, "synthesize", _synthesize)
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH,
                        help="TTS checkpoint: LinguaForge's own (.pt from train, .safetensors from prune) or a "
                             "chatterbox/indextts run's, export's or published file")
    parser.add_argument("--text", required=True, help="text to speak")
    parser.add_argument("--output", required=True, type=CLI_PATH, help="output .wav")
    parser.add_argument("--reference", default=None, type=CLI_PATH, help="reference clip (wav) for the voice")
    parser.add_argument("--language", default=None, type=LANGUAGE_ARG, help="language code for text normalisation (e.g. am)")
    parser.add_argument("--codec", default=None, type=CLI_PATH, help="codec file; must match the checkpoint's fingerprint")
    add_family_options(parser)
    parser.add_argument("--max-new-tokens", type=int_in(1, MAX_NEW_TOKENS), default=None, metavar="N",
                        help="most speech tokens of a Chatterbox or IndexTTS2 checkpoint (Chatterbox makes 25 a second); "
                             "default: the family's own cap")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=NUMBER", type=speaker_option,
                        help="a speaker option of a Chatterbox or IndexTTS2 checkpoint, repeatable (chatterbox: cfg_weight, "
                             "exaggeration, cfm_steps, repetition_penalty, min_p, top_p; indextts: max_mel_tokens, "
                             "diffusion_steps); --temperature sets the temperature")
    parser.add_argument("--stream", action="store_true",
                        help="vocode the speech in chunks while it is generated, the wav growing in <output>.part "
                             "(playable as it grows) until it becomes the output; reports the time to the first audio")
    parser.add_argument("--speed", type=float_in(0.25, 4.0), default=1.0,
                        help="speaking rate, 0.25 to 4 (1 = as generated; the pitch stays)")
    _sampling(parser)
    parser = add_command(subparsers, "generate", _generate)
    parser.add_argument("--checkpoint", required=True, type=CLI_PATH, help="LM checkpoint (.pt from train or .safetensors from prune)")
    parser.add_argument("--prompt", required=True, help="text to continue")
    parser.add_argument("--max-new-tokens", type=int_in(1, MAX_NEW_TOKENS), default=64, help="most tokens to generate (default 64)")
    _sampling(parser)
