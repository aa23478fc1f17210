"""The workspace files the dashboard offers: one `FileKind` per kind of file, listed at any depth by
`find_files(settings, KIND)`.

Every dropdown of the dashboard takes its choices from here, and every dashboard loader accepts
only a value these functions list. A kind is a set of top folders of the workspace searched at any
depth (`tokenizers/quickstart-x/en.model` counts) and a rule on the file's name. Never listed:
hidden files and folders (a temporary file is hidden), folders reached through a symlink, and files
whose real location (symlinks followed) lies outside the workspace and the data roots. Paths are
workspace-relative with '/' separators, sorted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from core.config import Settings
from core.confine import is_inside, path_problem
from core.fsutil import scan_jsonl
from core.runs import RUNS_DIR

CHECKPOINTS_DIR = "checkpoints"
TOKENIZERS_DIR = "tokenizers"
DATASETS_DIR = "datasets"
CODECS_DIR = "codecs"
PRESETS_DIR = "presets"
QUICKSTART_DIR = "quickstart"
MANIFEST_NAME = "manifest.jsonl"
MANIFEST_SUFFIX = ".jsonl"
REJECTS_NAME = "rejects.jsonl"  # an import's rejected rows: never training data
TOKENIZER_REPORT_SUFFIX = ".report.json"  # `tokenizer extend`'s report beside the .model
CODEC_COPY_SUFFIX = ".codec.pt"  # the codec `prune` copies beside a checkpoint
EVAL_NAME = "eval.json"
RUN_CONFIG_NAME = "config.yaml"


@dataclass(frozen=True)
class FileKind:
    """Files of one kind: below `folders` (workspace top folders, any depth), named with one of
    `suffixes` or exactly one of `names` but not ending with one of `not_suffixes`, and — with
    `within` — inside a folder of that name."""

    folders: tuple[str, ...]
    suffixes: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    within: str | None = None
    not_suffixes: tuple[str, ...] = ()

    def matches(self, relative: PurePosixPath) -> bool:
        """Return True when the workspace-relative path `relative` is a file of this kind."""
        name = relative.name
        if not (name in self.names or (self.suffixes and name.endswith(self.suffixes))):
            return False
        if self.not_suffixes and name.endswith(self.not_suffixes):
            return False
        return self.within is None or self.within in relative.parts[:-1]


#: tokenizers: `.model` SentencePiece and `.json` Hugging Face files under `tokenizers/`
TOKENIZERS = FileKind((TOKENIZERS_DIR,), suffixes=(".model", ".json"), not_suffixes=(TOKENIZER_REPORT_SUFFIX,))
SENTENCEPIECE_TOKENIZERS = FileKind((TOKENIZERS_DIR,), suffixes=(".model",))
HF_TOKENIZERS = FileKind((TOKENIZERS_DIR,), suffixes=(".json",), not_suffixes=(TOKENIZER_REPORT_SUFFIX,))
#: checkpoints under `checkpoints/` and in runs' `checkpoints/` folders
CHECKPOINTS = FileKind((CHECKPOINTS_DIR, RUNS_DIR), suffixes=(".safetensors", ".pt", ".pth"), within=CHECKPOINTS_DIR,
                       not_suffixes=(CODEC_COPY_SUFFIX,))
CODECS = FileKind((CODECS_DIR,), suffixes=(".pt",))
MANIFESTS = FileKind((DATASETS_DIR,), names=(MANIFEST_NAME,))
#: every manifest a run can train on (an import's manifest.jsonl, a quickstart's am.jsonl), not rejects
TRAINING_MANIFESTS = FileKind((DATASETS_DIR,), suffixes=(MANIFEST_SUFFIX,), not_suffixes=(REJECTS_NAME,))
EVALUATIONS = FileKind((CHECKPOINTS_DIR, RUNS_DIR), names=(EVAL_NAME,))
#: loadable run configs: workspace presets and the runs' config.yaml
PRESETS = FileKind((PRESETS_DIR,), suffixes=(".yaml", ".yml"))
RUN_CONFIGS = FileKind((RUNS_DIR,), names=(RUN_CONFIG_NAME,))
QUICKSTART_PRESETS = FileKind((QUICKSTART_DIR,), suffixes=(".yaml", ".yml"))
#: text corpora: uploaded ones (corpora/), a dataset's or quickstart's text files, the user's own folders
CORPORA = FileKind(("corpora", "corpus", DATASETS_DIR, "uploads", "inputs"), suffixes=(".txt",))
#: reference voices: uploaded clips (voices/) and the clips of the datasets
VOICES = FileKind(("voices", "uploads"), suffixes=(".wav", ".flac", ".mp3", ".ogg"))


def find_files(settings: Settings, *kinds: FileKind) -> list[str]:
    """Return the workspace-relative paths of every file of any of `kinds`, sorted (see the module docstring)."""
    workspace = settings.workspace
    roots = settings.allowed_roots
    found: set[str] = set()
    for kind in kinds:
        for folder in kind.folders:
            for dirpath, dirnames, filenames in os.walk(workspace / folder):  # symlinked folders are not entered
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                for filename in filenames:
                    if filename.startswith("."):
                        continue
                    path = Path(dirpath) / filename
                    relative = PurePosixPath(path.relative_to(workspace).as_posix())
                    if kind.matches(relative) and path.is_file() and is_inside(path, roots):
                        found.add(str(relative))
    return sorted(found)


def newest_file(settings: Settings, *kinds: FileKind) -> str | None:
    """Return the most recently written file of any of `kinds` (as `find_files` lists it), or None."""
    return max(find_files(settings, *kinds), default=None, key=lambda path: (settings.workspace / path).stat().st_mtime)


def dataset_names(settings: Settings) -> list[str]:
    """Return the datasets: each folder below `datasets/` holding a manifest.jsonl, as its path under `datasets/`."""
    names = (str(PurePosixPath(path).parent.relative_to(DATASETS_DIR)) for path in find_files(settings, MANIFESTS))
    return sorted(name for name in names if name != ".")


def manifest_damage(manifest: Path) -> str | None:
    """Return what is damaged in a dataset's manifest.jsonl ("2 damaged lines in manifest.jsonl, first line 3: not UTF-8"), or
    None when every line is a JSON object whose audio can name a file. Readers skip such lines and rows; this
    names them."""
    rows, skipped = scan_jsonl(manifest)
    skipped += [f"row {row.get('id')!a}: audio {problem}" for row in rows
                if isinstance(row.get("audio"), str) and (problem := path_problem(row["audio"]))]
    if not skipped:
        return None
    return f"{len(skipped)} damaged line{'s' if len(skipped) > 1 else ''} in {MANIFEST_NAME}, first {skipped[0]}"


def damaged_datasets(settings: Settings) -> dict[str, str]:
    """Return {dataset name: what is damaged} for the workspace's datasets whose manifest has unreadable lines."""
    found = {name: manifest_damage(settings.workspace / DATASETS_DIR / name / MANIFEST_NAME)
             for name in dataset_names(settings)}
    return {name: damage for name, damage in found.items() if damage}


def quickstart_preset_files(settings: Settings) -> list[str]:
    """Return the workspace's quickstart presets (`quickstart/*.yaml`, copies of config/quickstart/quick.yaml)."""
    return find_files(settings, QUICKSTART_PRESETS)


#: top folders of the workspace that the app itself writes: never offered as an import's input
APP_FOLDERS = frozenset({CHECKPOINTS_DIR, TOKENIZERS_DIR, DATASETS_DIR, CODECS_DIR, PRESETS_DIR, QUICKSTART_DIR, RUNS_DIR,
                         "logs", "cache", "outputs", "exports", "models", "corpora", "voices"})
INPUT_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".csv", ".tsv", ".txt", ".json", ".jsonl", ".srt", ".parquet")
INPUT_DEPTH = 3


def input_folders(settings: Settings) -> list[str]:
    """Return the folders an import can read: those up to INPUT_DEPTH deep in the workspace (outside APP_FOLDERS:
    uploads/ and the user's own) and in the data roots that hold clips or tables themselves; workspace
    folders relative to it, data-root folders absolute, each list sorted."""
    found: list[str] = []
    workspace = settings.workspace
    roots = settings.allowed_roots
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            depth = len(Path(dirpath).relative_to(root).parts)
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and depth < INPUT_DEPTH
                           and not (root == workspace and depth == 0 and d in APP_FOLDERS)]
            if depth and any(f.endswith(INPUT_SUFFIXES) and not f.startswith(".") for f in filenames) \
                    and is_inside(dirpath, roots):
                path = Path(dirpath)
                found.append(path.relative_to(workspace).as_posix() if root == workspace else str(path))
    return sorted(found, key=lambda p: (p.startswith("/"), p))
