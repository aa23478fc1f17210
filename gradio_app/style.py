"""The dashboard's own static files (the vendored Ethiopic webfont) and the CSS that uses them."""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_ROUTE = "/lf-static"
ETHIOPIC_FAMILY = "LinguaForge Noto Sans Ethiopic"
ETHIOPIC_RANGE = "U+1200-139F, U+2D80-2DDF, U+AB00-AB2F, U+1E7E0-1E7FF"
PATH_FIELD = "lf-path"  # the class of a dropdown whose values are workspace paths (tokenizers, checkpoints)


def _font_face(weight: int) -> str:
    url = f"{STATIC_ROUTE}/fonts/noto-sans-ethiopic-ethiopic-{weight}-normal.woff2"
    return (f'@font-face {{ font-family: "{ETHIOPIC_FAMILY}"; font-style: normal; font-weight: {weight}; '
            f'font-display: swap; src: url("{url}") format("woff2"); unicode-range: {ETHIOPIC_RANGE}; }}')


CSS = "\n".join([
    _font_face(400),
    _font_face(700),
    # Ethiopic characters take the webfont; every other character falls through to Gradio's own fonts.
    f'.gradio-container, .gradio-container * {{ font-family: "{ETHIOPIC_FAMILY}", var(--font) !important; }}',
    f'.gradio-container code, .gradio-container pre {{ font-family: "{ETHIOPIC_FAMILY}", var(--font-mono) !important; }}',
    # A chosen path longer than its field shows its end, where the file name is (tokenizers/…/en.model and
    # tokenizers/…/en_am.model read apart), and all of it again while the field is edited. Paths only: a value
    # ending in punctuation ("… (recommended)") would have it moved to the front by the right-to-left direction.
    f".gradio-container .{PATH_FIELD} input:not(:focus) {{ direction: rtl; text-align: left; text-overflow: ellipsis; }}",
])
