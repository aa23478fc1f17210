"""The published releases a model folder holds, per family: whose release it is, where it is published, the
files the family loads from it, and how to get them.

Downloading is the Hub work's (`python -m core models pull NAME`, issue 47): nothing here fetches anything.
The file names come from the family classes (`published_names` of an empty folder), never from a list here.
`release_text` is the plain sentence every reader shows (the folder check, the Fine-tune tab's guide).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.families.registry import get_model_family

PULL_COMMAND = "python -m core models pull"
FAMILY_WORDS = {"linguaforge": "LinguaForge's own model", "chatterbox": "Chatterbox",
                "chatterbox-turbo": "Chatterbox-Turbo", "indextts": "IndexTTS2"}  # a family's name → its name in words
MODEL_FOLDERS = "models"  # the workspace folder uploads and pulls put model folders in (core.uploads.MODEL)


@dataclass(frozen=True)
class Release:
    """One family's published release: its `title` in words, its Hugging Face Hub `repo`, the `pull_name` the
    pull command takes, files the folder may hold besides the loaded ones (`optional`) and the models the family
    reads from sub-folders of it (`helpers`, in words; "" for none)."""

    family: str
    title: str
    repo: str
    pull_name: str
    optional: tuple[str, ...] = ()
    helpers: str = ""

    def files(self) -> list[str]:
        """Return the names of the files the family loads from a folder of this release, in role order."""
        nothing = Path("/nonexistent")  # a folder holding none of them: the release's own names, not a variant's
        return list(get_model_family(self.family).published_names(nothing).values())

    def folder(self) -> str:
        """Return the workspace folder this release's files go in by default: `models/<pull name>`."""
        return f"{MODEL_FOLDERS}/{self.pull_name}"

    def command(self) -> str:
        """Return the command that fetches this release (the Hub work's)."""
        return f"{PULL_COMMAND} {self.pull_name}"


RELEASES = {
    "chatterbox": Release("chatterbox", "Resemble AI's Chatterbox (multilingual)", "ResembleAI/chatterbox", "chatterbox",
                          ("conds.pt",)),
    "chatterbox-turbo": Release("chatterbox-turbo", "Resemble AI's Chatterbox-Turbo", "ResembleAI/chatterbox-turbo",
                                "chatterbox-turbo", ("conds.pt",)),
    "indextts": Release("indextts", "IndexTeam's IndexTTS2", "IndexTeam/IndexTTS-2", "indextts2", (),
                        "s2mel.pth beside them to speak, with w2v-BERT 2.0, the MaskGCT semantic codec, CAMPPlus and "
                        "BigVGAN in sub-folders of it"),
}


def family_words(family_name: str) -> str:
    """Return what people call the model family `family_name` ("IndexTTS2" for `indextts`)."""
    return FAMILY_WORDS.get(family_name, family_name)


def release_of(family_name: str) -> Release:
    """Return the published release of `family_name`. Raises InputError for a family with none (our own GPT)."""
    if family_name not in RELEASES:
        raise InputError(f"model family {family_name!r} has no published release; "
                         f"families with one: {', '.join(RELEASES)}.")
    return RELEASES[family_name]


def release_text(family_name: str) -> str:
    """Return the sentence naming the family's release, where it is published and the files its folder needs:
    "Resemble AI's Chatterbox (multilingual) is published as ResembleAI/chatterbox on the Hugging Face Hub; its
    model folder needs ve.pt, … (conds.pt too when there)"."""
    release = release_of(family_name)
    optional = f" ({', '.join(release.optional)} too when there)" if release.optional else ""
    helpers = f", and {release.helpers}" if release.helpers else ""
    return (f"{release.title} is published as {release.repo} on the Hugging Face Hub; its model folder needs "
            f"{', '.join(release.files())}{optional}{helpers}.")
