"""The dashboard's file browser, held to the workspace's file rules (`core.workspace_files`).

Gradio's `FileExplorer` lists whatever `os.listdir` finds below its root, following symlinked folders: a
link in the workspace to a folder elsewhere listed that folder's names (the files themselves were refused).
`WorkspaceExplorer` lists an entry only when its real location (symlinks followed) lies inside the roots
(the workspace and the data roots), and lists nothing inside a folder whose real location leaves them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import gradio as gr
from gradio.components.base import server

from core.confine import is_inside

from gradio.events import Dependency

class WorkspaceExplorer(gr.FileExplorer):
    """A `gr.FileExplorer` that never lists a name whose real location lies outside `roots`."""

    def __init__(self, *args: Any, roots: Sequence[Path], **kwargs: Any) -> None:
        self.roots = [Path(root) for root in roots]
        super().__init__(*args, **kwargs)

    @server
    def ls(self, subdirectory: list[str] | None = None) -> list[dict[str, str]] | None:
        """Return the entries of `subdirectory` (as FileExplorer does) whose real location lies inside the roots;
        none when the folder itself leads out of them."""
        folder = self._safe_join(subdirectory or [])
        if not is_inside(folder, self.roots):
            return []
        return [entry for entry in super().ls(subdirectory) or []
                if is_inside(os.path.join(folder, entry["name"]), self.roots)]
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component