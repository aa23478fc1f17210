"""The published files an IndexTTS2 export carries, so the published `IndexTTS2` class speaks from it.

`indextts.infer_v2.IndexTTS2(model_dir=EXPORT)` reads, besides the GPT, tokenizer and config.yaml
the export writes:

- files of its model folder named by config.yaml: `s2mel_checkpoint`, `w2v_stat`, `emo_matrix`,
  `spk_matrix`, the Qwen emotion model folder `qwen_emo_path`, and `glossary.yaml` when present;
  the export hard-links them (a copy where the file system cannot link);
- four models it fetches from the Hugging Face hub by name: `facebook/w2v-bert-2.0`, the MaskGCT
  semantic codec (`amphion/MaskGCT`), CAMPPlus (`funasr/campplus`) and the BigVGAN vocoder
  (`vocoder.name`). The export lays the model folder's local copies (`indextts.models`) out as a
  hub cache in `hf_hub/`, so with `HF_HUB_CACHE=EXPORT/hf_hub HF_HUB_OFFLINE=1` the published code
  finds them there and downloads nothing.

Its text front end (`TextNormalizer`) sends text without Latin letters through NeMo's Chinese
normaliser unless a NeMo language is passed; the training's normalisation is written to
config.yaml as `linguaforge.text_normalizer` and applied by the shim `speak_indextts2.py` the
export carries (`speak_indextts2.py`).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any, Mapping

from core.families.indextts.models import ModelPaths
from core.fsutil import link_or_copy

HUB_FOLDER = "hf_hub"
HUB_REVISION = hashlib.sha1(b"linguaforge-export").hexdigest()
SHIM_NAME = "speak_indextts2.py"
SHIM_SOURCE = Path(__file__).resolve().parent / SHIM_NAME
FOLDER_FILES = ("s2mel_checkpoint", "w2v_stat", "emo_matrix", "spk_matrix", "qwen_emo_path")
GLOSSARY = "glossary.yaml"


def hub_files(paths: ModelPaths, config: Mapping[str, Any]) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """Return ({hub repo: {file name in the repo: local source}} of the models IndexTTS2 fetches by name,
    the lines naming each local copy that is missing)."""
    from core.errors import InputError

    vocoder = str((config.get("vocoder") or {}).get("name") or "nvidia/bigvgan_v2_22khz_80band_256x")
    layout = {
        "facebook/w2v-bert-2.0": ("w2v_bert", lambda w2v: {p.name: p for p in sorted(w2v.iterdir()) if p.is_file()}),
        "amphion/MaskGCT": ("semantic_codec", lambda path: {"semantic_codec/model.safetensors": path}),
        "funasr/campplus": ("campplus", lambda path: {"campplus_cn_common.bin": path}),
        vocoder: ("bigvgan", lambda folder: {name: folder / name for name in ("config.json", "bigvgan_generator.pt")}),
    }
    repos: dict[str, dict[str, Path]] = {}
    missing: list[str] = []
    for repo, (key, files_of) in layout.items():
        try:
            files = files_of(paths.path(key))
        except InputError as exc:
            missing.append(f"{repo}: {exc}")
            continue
        absent = [str(p) for p in files.values() if not p.is_file()]
        if absent:
            missing.append(f"{repo}: {absent[0]} is missing (local copy of the hub model)")
            continue
        repos[repo] = files
    return repos, missing


def write_hub_cache(cache: Path, repos: Mapping[str, Mapping[str, Path]]) -> list[Path]:
    """Lay `repos` ({repo id: {file: source}}) out as a Hugging Face hub cache under `cache`; return the repo folders.

    Each repo gets `refs/main` naming HUB_REVISION and `snapshots/HUB_REVISION/<file>` linked to its source.
    """
    written = []
    for repo, files in repos.items():
        folder = cache / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(HUB_REVISION, encoding="utf-8")
        for name, source in files.items():
            link_or_copy(source, folder / "snapshots" / HUB_REVISION / name)
        written.append(folder)
    return written


def carry_published_files(paths: ModelPaths, config: Mapping[str, Any], output_dir: Path) -> tuple[list[Path], list[str]]:
    """Link the model folder's published files and the hub cache into `output_dir`.

    Returns (paths written, what the published class would still miss: each a line naming the file).
    A folder prepared for training only (no s2mel, vocoder, emotion files) still exports; what is
    missing is listed instead of refused.
    """
    written: list[Path] = []
    missing: list[str] = []
    for key in FOLDER_FILES:
        name = str(config.get(key) or "").rstrip("/")
        source = paths.model_dir / name
        if not name or not source.exists():
            missing.append(f"{key}: {source} (from the published IndexTTS-2 folder)")
            continue
        written.append(link_or_copy(source, output_dir / name))
    if (paths.model_dir / GLOSSARY).is_file():
        written.append(link_or_copy(paths.model_dir / GLOSSARY, output_dir / GLOSSARY))
    repos, absent = hub_files(paths, config)
    missing += absent
    written += write_hub_cache(output_dir / HUB_FOLDER, repos)
    shutil.copyfile(SHIM_SOURCE, output_dir / SHIM_NAME)  # a copy: editing the export's shim leaves LinguaForge's alone
    written.append(output_dir / SHIM_NAME)
    return written, missing
