"""Feature extraction of the model families: clip by clip (batch 1) beside batched passes.

Chatterbox: `batch_features` (S3 tokenizer: speech + prompt tokens, VoiceEncoder embedding; the prompt audio
prepared once beforehand by `reference_audio`, outside the timed passes).
IndexTTS2: `BatchFeaturizer` (w2v-BERT layer features in one padded batch, semantic codes and
conditioning latents per equal-length group). Both over the espeak sample (en + am, `--per-language`
clips each) or, with `--source commonvoice`, over a Common Voice-shaped release of as many 3-second
32 kHz mp3 clips (bench/import_path.py) imported with the filters on; the models loaded once, a
warm-up pass first; the time is the whole pass over all clips.

No published weights exist on the CI machines: without `--chatterbox-dir` / `--indextts-dir` the
reduced test folders are built (tests/chatterbox_helpers.py, tests/indextts_helpers.py: the S3
tokenizer at width 128 × 1 block, the full-size VoiceEncoder, w2v-BERT 1024 wide × 2 layers),
so CPU figures show the batching overhead or gain of those shapes, not of the published models.

    .venv/bin/python bench/family_features.py --json
    .venv/bin/python bench/family_features.py --source commonvoice --json  # mp3 release → import with filters
    .venv/bin/python bench/family_features.py --batch 1 16 32 --json      # a GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from core.audio import read_audio, resample  # noqa: E402
from core.data.manifest import load_manifest_rows  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.data.feature_cache import batches  # noqa: E402


def timed(passes: Callable[[int], None], sizes: list[int]) -> dict[int, float]:
    """Return {batch size: seconds of one pass} after one warm-up pass at each size."""
    seconds = {}
    for size in sizes:
        passes(size)
        start = time.perf_counter()
        passes(size)
        seconds[size] = time.perf_counter() - start
    return seconds


def chatterbox_passes(folder: Path | None, work: Path, rows: list[Any], device: torch.device) -> Callable[[int], None]:
    """Return a function running Chatterbox's feature models over every clip in batches of its argument."""
    from core.families.chatterbox.feature_models import MULTILINGUAL_PROMPT, batch_features, load_feature_models, reference_audio
    from core.families.registry import get_model_family

    if folder is None:
        from tests.chatterbox_helpers import make_chatterbox_folder

        folder = make_chatterbox_folder(work / "chatterbox")
    models = load_feature_models(get_model_family("chatterbox").published_files(folder)).to(device)
    clips = [read_audio(row.path) for row in rows]
    wavs = [(resample(wav, rate, 16000), reference_audio(wav, rate, MULTILINGUAL_PROMPT)[1]) for wav, rate in clips]
    return lambda size: [batch_features(models, [w for w, _ in chunk], [r for _, r in chunk])
                         for chunk in batches(wavs, size)] and None


def indextts_passes(folder: Path | None, work: Path, rows: list[Any], device: torch.device) -> Callable[[int], None]:
    """Return a function running IndexTTS2's feature models (audio read included) over every clip in batches."""
    from core.families.indextts.gpt import ROWS, IndexTextNormalizer, load_gpt_state_dict, load_unified_voice, read_indextts_config, text_rows
    from core.families.indextts.models import BatchFeaturizer
    from core.families.indextts.models import SemanticFeatures, model_paths
    from core.tokenizers.tokenizer import load_tokenizer

    layer = 17
    if folder is None:
        from tests.indextts_helpers import W2V_LAYERS, build_model_folder

        folder, layer = build_model_folder(work / "IndexTTS-2"), W2V_LAYERS
    config = read_indextts_config(folder / "config.yaml")
    state = load_gpt_state_dict(folder / "gpt.pth")
    gpt, _ = load_unified_voice(state, config, text_rows(ROWS, state) - 1)
    semantic = SemanticFeatures(model_paths(folder, {"w2v_layer": layer}), config["semantic_codec"], device.type, layer)
    featurize = BatchFeaturizer(semantic, gpt.to(device), IndexTextNormalizer(), load_tokenizer(folder / "bpe.model"))
    return lambda size: [featurize(chunk) for chunk in batches(rows, size)] and None


def source_rows(source: str, work: Path, per_language: int) -> list[Any]:
    """Return the manifest rows to featurise: the espeak sample, or a filtered Common Voice-shaped import."""
    if source == "espeak":
        sample_dataset(work / "espeak", 16000, ["en", "am"], per_language)
        return load_manifest_rows(work / "espeak" / "manifest.jsonl")
    from bench.import_path import make_release
    from core.data.filter_config import FilterConfig
    from core.data.importing import import_dataset

    release, _ = make_release(work / "cv", 2 * per_language, sources_per_language=per_language)
    return load_manifest_rows(import_dataset("commonvoice", release, work / "cv-import", 16000, filters=FilterConfig()).manifest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-language", type=int, default=12, help="espeak clips per language (en, am)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4, 8], help="batch sizes to time")
    parser.add_argument("--chatterbox-dir", type=Path, help="a published Chatterbox folder (default: the reduced test folder)")
    parser.add_argument("--indextts-dir", type=Path, help="a published IndexTTS2 folder (default: the reduced test folder)")
    parser.add_argument("--source", choices=["espeak", "commonvoice"], default="espeak",
                        help="espeak sample clips, or a Common Voice-shaped mp3 release imported with the filters")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory(prefix="lf-bench-features-") as tmp:
        work = Path(tmp)
        rows = source_rows(args.source, work, args.per_language)
        audio_s = sum(row.duration for row in rows)
        result: dict[str, Any] = {"device": str(device), "source": args.source, "clips": len(rows), "audio_seconds": round(audio_s, 1),
                                  "machine": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads()}
        for name, make in (("chatterbox", chatterbox_passes), ("indextts", indextts_passes)):
            folder = args.chatterbox_dir if name == "chatterbox" else args.indextts_dir
            seconds = timed(make(folder, work, rows, device), args.batch)
            result[name] = {str(size): {"seconds": round(s, 2), "clips_per_s": round(len(rows) / s, 2)} for size, s in seconds.items()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name in ("chatterbox", "indextts"):
            for size, figures in result[name].items():
                print(f"{name} batch {size}: {figures['seconds']} s ({figures['clips_per_s']} clips/s)")


if __name__ == "__main__":
    main()
