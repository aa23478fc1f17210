"""The voices a speech server offers: reference clips in one folder, each named by its file stem.

A request's `voice` is a clip's stem (`anna` for `voices/anna.wav`). The folder is read on each
lookup, so clips added while the server runs are offered at once. A clip whose real location
(symlinks followed) leaves the folder is never offered.
"""

from __future__ import annotations

from pathlib import Path

from core.audio import AUDIO_EXTENSIONS
from core.confine import is_inside, is_name
from core.errors import InputError


class VoiceFolder:
    """The reference clips (`AUDIO_EXTENSIONS`) directly inside `folder`, by name."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def clips(self) -> dict[str, Path]:
        """Return {name: clip path} of the clips in the folder, sorted by name (first extension wins)."""
        found: dict[str, Path] = {}
        for path in sorted(self.folder.iterdir()):
            if (path.suffix.lower() in AUDIO_EXTENSIONS and is_name(path.stem) and path.stem not in found
                    and path.is_file() and is_inside(path, [self.folder])):
                found[path.stem] = path
        return found

    def clip(self, name: str) -> Path:
        """Return the clip of voice `name`.

        Raises InputError naming the voice and the voices offered when there is no such clip.
        """
        clips = self.clips()
        if name not in clips:
            offered = ", ".join(list(clips)[:20]) or "none"
            raise InputError(f"voice {name!r}: no such reference clip in the voices folder; voices: {offered}.")
        return clips[name]


def check_voice_folder(folder: Path) -> VoiceFolder:
    """Return the VoiceFolder of `folder` when it is a folder holding at least one clip.

    Raises InputError naming the folder and the fix otherwise.
    """
    if not folder.is_dir():
        raise InputError(f"--voices {folder}: not a folder. Give the folder of reference clips (name.wav, …).")
    voices = VoiceFolder(folder)
    if not voices.clips():
        raise InputError(f"--voices {folder}: no reference clip ({', '.join(AUDIO_EXTENSIONS)}) in it. "
                         "Put at least one clip there; its file name (without extension) is the voice name.")
    return voices
