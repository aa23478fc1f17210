"""The dashboard's file browser, held to the workspace's file rules (`core.workspace_files`).

Gradio's `FileExplorer` lists whatever `os.listdir` finds below its root, following symlinked folders: a
link in the workspace to a folder elsewhere listed that folder's names (the files themselves were refused).
`workspace_explorer` returns a FileExplorer whose listing (`ls`, the server function the page calls) keeps
an entry only when its real location (symlinks followed) lies inside the roots — the workspace and the data
roots — and lists nothing inside a folder whose real location leaves them. (A FileExplorer *subclass* would
make Gradio write a `.pyi` stub beside this file on every import: the listing is replaced on the instance.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import gradio as gr
from gradio.components.base import server

from core.confine import is_inside


def workspace_explorer(roots: Sequence[Path], **kwargs: Any) -> gr.FileExplorer:
    """Return a `gr.FileExplorer` (built with `kwargs`) that never lists a name whose real location lies
    outside `roots`."""
    explorer = gr.FileExplorer(**kwargs)
    listing = explorer.ls
    allowed = [Path(root) for root in roots]

    @server
    def ls(subdirectory: list[str] | None = None) -> list[dict[str, str]] | None:
        """Return the entries of `subdirectory` (as FileExplorer does) whose real location lies inside the roots;
        none when the folder itself leads out of them."""
        folder = explorer._safe_join(subdirectory or [])
        if not is_inside(folder, allowed):
            return []
        return [entry for entry in listing(subdirectory) or [] if is_inside(os.path.join(folder, entry["name"]), allowed)]

    explorer.ls = ls  # type: ignore[method-assign]  # the page calls it by name (Gradio's /component_server)
    explorer.server_fns = [ls if fn.__name__ == "ls" else fn for fn in explorer.server_fns]
    return explorer
