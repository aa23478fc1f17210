"""The published releases a family reads, by their `models pull` name: which Hugging Face repositories hold
them and which of their files a family needs (the file names come from the families' own modules).

| name | family | repositories |
|---|---|---|
| `chatterbox:v3` | chatterbox | ResembleAI/chatterbox: the multilingual T3 v3 (`t3_mtl23ls_v3.safetensors`, same tokenizer); also `hf:ResembleAI/chatterbox` |
| `chatterbox` | chatterbox | ResembleAI/chatterbox: the multilingual T3 v2 (`t3_mtl23ls_v2.safetensors`, the published class's default) |
| `chatterbox:english` | chatterbox | ResembleAI/chatterbox: the English release (`t3_cfg.safetensors`) |
| `chatterbox-turbo` | chatterbox-turbo | ResembleAI/chatterbox-turbo |
| `chatterbox-nano` | chatterbox-turbo | ResembleAI/chatterbox-nano |
| `csm` | csm | sesame/csm-1b in the transformers layout (config.json, model.safetensors with Mimi inside, the Llama-3 tokenizer and the processor's files; not the original `ckpt.pt`) |
| `indextts2` | indextts | IndexTeam/IndexTTS-2 plus w2v-BERT 2.0, the MaskGCT semantic codec, CAMPPlus and BigVGAN, each in the sub-folder IndexTTS2's loader reads |

A folder holding a release is recognised by its files' content (`ModelFamily.check_release`), the release's
name by its checkpoint (`ModelFamily.release_of`, from the family's `marker_releases`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.families.chatterbox.t3 import ENGLISH_FILES, MULTILINGUAL_FILES, MULTILINGUAL_T3, OPTIONAL_FILES
from core.families.indextts.gpt import PUBLISHED_FILES as INDEXTTS_FILES
from core.families.indextts.models import DEFAULT_LOCATIONS

#: the prefix of a Hub repository id where a release name or a model folder is expected: `hf:owner/name[@revision]`
HF_PREFIX = "hf:"
_TURBO_PATTERNS = ("*.safetensors", "*.json", "*.txt", "*.pt", "*.model")  # what `ChatterboxTurboTTS.from_pretrained` fetches
_CSM_PATTERNS = ("model.safetensors", "*.json", "*.jinja")  # what `CsmForConditionalGeneration` and `AutoProcessor` read


@dataclass(frozen=True)
class HubPart:
    """One repository of a release: the files to fetch (`allow_patterns`) and the sub-folder of the model
    folder they go to ("" for the folder itself), keeping their paths inside the repository."""

    repo: str
    patterns: tuple[str, ...]
    folder: str = ""


@dataclass(frozen=True)
class Release:
    """A published release: its pull name, family, label and repositories (the first is the release's own)."""

    name: str
    family: str
    label: str
    parts: tuple[HubPart, ...]

    @property
    def repo(self) -> str:
        """Return the release's own repository id."""
        return self.parts[0].repo


def _chatterbox(t3: str, files: dict[str, str]) -> tuple[HubPart, ...]:
    names = {**files, "t3": t3}
    return (HubPart("ResembleAI/chatterbox", (*names.values(), *OPTIONAL_FILES.values(), "Cangjie5_TC.json")),)


def _indextts_companion(role: str, repo: str, files: tuple[str, ...]) -> HubPart:
    where = DEFAULT_LOCATIONS[role][0]
    return HubPart(repo, files, "" if where.endswith((".bin", ".safetensors")) else where)


RELEASES: dict[str, Release] = {release.name: release for release in (
    # v3 first: Resemble's recommended T3 is what `hf:ResembleAI/chatterbox` and a family's pull hint name
    Release("chatterbox:v3", "chatterbox", "Chatterbox multilingual v3", _chatterbox(MULTILINGUAL_T3["v3"], MULTILINGUAL_FILES)),
    Release("chatterbox", "chatterbox", "Chatterbox multilingual v2", _chatterbox(MULTILINGUAL_T3["v2"], MULTILINGUAL_FILES)),
    Release("chatterbox:english", "chatterbox", "Chatterbox (English)", _chatterbox(ENGLISH_FILES["t3"], ENGLISH_FILES)),
    Release("chatterbox-turbo", "chatterbox-turbo", "Chatterbox-Turbo", (HubPart("ResembleAI/chatterbox-turbo", _TURBO_PATTERNS),)),
    Release("chatterbox-nano", "chatterbox-turbo", "Chatterbox-Nano", (HubPart("ResembleAI/chatterbox-nano", _TURBO_PATTERNS),)),
    Release("csm", "csm", "Sesame CSM-1B", (HubPart("sesame/csm-1b", _CSM_PATTERNS),)),
    Release("indextts2", "indextts", "IndexTTS2", (
        HubPart("IndexTeam/IndexTTS-2", INDEXTTS_FILES),
        _indextts_companion("w2v_bert", "facebook/w2v-bert-2.0", ("config.json", "model.safetensors", "preprocessor_config.json")),
        _indextts_companion("semantic_codec", "amphion/MaskGCT", ("semantic_codec/model.safetensors",)),
        _indextts_companion("campplus", "funasr/campplus", ("campplus_cn_common.bin",)),
        _indextts_companion("bigvgan", "nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt")),
    )),
)}


def pull_command(name: str) -> str:
    """Return the command that pulls release `name` into the workspace."""
    return f"python -m core models pull {name}"


def family_release(family: str) -> str:
    """Return the name of the release a pull hint names for `family`: its first (the recommended) release."""
    return next(name for name, release in RELEASES.items() if release.family == family)


def get_release(name: str) -> Release:
    """Return the release called `name`. Raises InputError listing the names (and `hf:owner/name`) otherwise."""
    if name not in RELEASES:
        raise InputError(f"{name!r}: not a published release; pull one of {', '.join(RELEASES)} "
                         f"or a Hub repository as {HF_PREFIX}owner/name[@revision].")
    return RELEASES[name]


def release_for_repo(repo: str) -> Release | None:
    """Return the first release whose own repository is `repo` (case as on the Hub), None for another repository."""
    return next((release for release in RELEASES.values() if release.repo.lower() == repo.lower()), None)


def parse_hf_id(text: str) -> tuple[str, str | None]:
    """Return (owner/name, revision or None) of `hf:owner/name[@revision]`.

    Raises InputError naming the text and the form when it is not one.
    """
    body = text[len(HF_PREFIX):] if text.startswith(HF_PREFIX) else text
    repo, _, revision = body.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") or not p.replace("-", "").replace("_", "").replace(".", "").isalnum()
                                                for p in parts) or (revision == "" and "@" in body):
        raise InputError(f"{text!r}: not a Hub repository id; write {HF_PREFIX}owner/name or {HF_PREFIX}owner/name@revision.")
    return repo, revision or None


# -- words for the pages (the folder check, the Fine-tune tab's guide) ---------------------------------------------
FAMILY_WORDS = {"linguaforge": "LinguaForge's own model", "chatterbox": "Chatterbox",
                "chatterbox-turbo": "Chatterbox-Turbo", "indextts": "IndexTTS2", "csm": "Sesame CSM"}  # a family's name → its name in words
MODELS_DIR = "models"  # the workspace folder pulls and uploads put model folders in (core.uploads.MODEL)
_OPTIONAL = {"chatterbox": ("conds.pt",), "chatterbox-turbo": ("conds.pt",)}  # loaded when present
_COMPANIONS = {"indextts": "s2mel.pth beside them to speak, with w2v-BERT 2.0, the MaskGCT semantic codec, CAMPPlus "
                           "and BigVGAN in sub-folders of it"}


def family_words(family_name: str) -> str:
    """Return what people call the model family `family_name` ("IndexTTS2" for `indextts`)."""
    return FAMILY_WORDS.get(family_name, family_name)


def folder_of(name: str) -> str:
    """Return the workspace-relative folder release `name` (or `hf:owner/name[@rev]`) is pulled into:
    `models/<name>` with `:`, `/` and `@` as `-`."""
    return f"{MODELS_DIR}/" + name.removeprefix(HF_PREFIX).replace(":", "-").replace("/", "-").replace("@", "-")


def release_text(family_name: str, release_name: str | None = None, folder: Path | None = None) -> str:
    """Return the sentence naming a release of `family_name` (`release_name`, default the family's recommended one),
    where it is published and the files a folder of it needs — those of `folder`'s variant when given ("Chatterbox
    multilingual v3 is published as ResembleAI/chatterbox on the Hugging Face Hub; its model folder needs ve.pt, …").
    Raises InputError for a family with no published release (our own GPT)."""
    from core.families.registry import get_model_family

    if not any(release.family == family_name for release in RELEASES.values()):
        raise InputError(f"model family {family_name!r} has no published release; families with one: "
                         f"{', '.join(sorted({r.family for r in RELEASES.values()}))}.")
    release = RELEASES[release_name or family_release(family_name)]
    # an empty folder gives the release's own names; a folder its variant's (v2 or v3, English or multilingual)
    names = dict(get_model_family(family_name).published_names(folder or Path("/nonexistent")))
    t3 = [pattern for pattern in release.parts[0].patterns if pattern.startswith("t3_")]
    if folder is None and "t3" in names and t3:  # an empty folder: the named release's own T3 (v3, v2, English)
        names["t3"] = t3[0]
    files = list(names.values())
    optional = f" ({', '.join(_OPTIONAL[family_name])} too when there)" if family_name in _OPTIONAL else ""
    companions = f", and {_COMPANIONS[family_name]}" if family_name in _COMPANIONS else ""
    return (f"{release.label} is published as {release.repo} on the Hugging Face Hub; its model folder needs "
            f"{', '.join(files)}{optional}{companions}.")
