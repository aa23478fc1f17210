"""One row arithmetic (core.families.rows) behind `embeddings extend`, the doctor and the Embeddings tab:
the tab shows exactly what Extend will do, or the message it will refuse with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from core.checkpoint import save_checkpoint
from core.config import load_settings
from core.errors import InputError
from core.families import get_family
from core.families.rows import plan_checkpoint_rows, plan_row_change, text_rows
from core.tokenizers.tokenizer import load_tokenizer
from core.training.embeddings import extend_checkpoint

BASE_SIZE = 2454


def _tokenizer(base: Path, dest: Path, added: list[str] = (), swap: tuple[int, int] | None = None) -> Path:
    """Write a copy of the Chatterbox tokenizer with `added` characters appended (and two ids swapped)."""
    data = json.loads(base.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    for i, char in enumerate(added):
        vocab[char] = BASE_SIZE + i
    if swap is not None:
        by_id = {v: k for k, v in vocab.items()}
        vocab[by_id[swap[0]]], vocab[by_id[swap[1]]] = swap[1], swap[0]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return dest


@pytest.fixture
def setup(workspace: Path, chatterbox_tokenizer: Path) -> dict[str, Path]:
    """A Chatterbox-shaped checkpoint for the 2,454-id tokenizer and three tokenizers in the workspace."""
    tokenizers = workspace / "tokenizers"
    tokenizers.mkdir()
    gen = torch.Generator().manual_seed(0)
    checkpoint = workspace / "checkpoints" / "t3.safetensors"
    checkpoint.parent.mkdir()
    save_checkpoint(checkpoint, {"text_emb.weight": torch.randn(BASE_SIZE, 8, generator=gen),
                                 "text_head.weight": torch.randn(BASE_SIZE, 8, generator=gen)}, None)
    return {
        "checkpoint": checkpoint,
        "base": Path(shutil.copyfile(chatterbox_tokenizer, tokenizers / "base.json")),
        "extended": _tokenizer(chatterbox_tokenizer, tokenizers / "extended.json", ["ሀ", "ለ"]),
        "reordered": _tokenizer(chatterbox_tokenizer, tokenizers / "reordered.json", ["ሀ"], swap=(10, 11)),
    }


def test_row_change_counts_the_family_offset_and_refuses_what_extend_refuses(setup: dict[str, Path]) -> None:
    base, extended = load_tokenizer(setup["base"]), load_tokenizer(setup["extended"])
    indextts = get_family("indextts")
    change = plan_row_change(indextts, base, extended, BASE_SIZE + 1)
    assert (change.rows_before, change.rows_after, change.added, change.kept) == (2455, 2457, 2, 2454)
    assert change.extra_rows_moved == {"from": 2454, "to": 2456}
    assert plan_row_change(get_family("chatterbox"), base, extended, BASE_SIZE).extra_rows_moved is None
    with pytest.raises(InputError, match="id 10 is"):
        plan_row_change(indextts, base, load_tokenizer(setup["reordered"]), BASE_SIZE + 1)
    with pytest.raises(InputError, match="needs 2455 for the 2454-id base"):
        plan_row_change(indextts, base, extended, BASE_SIZE)
    with pytest.raises(InputError, match="--allow-truncate"):
        plan_row_change(indextts, extended, extended, BASE_SIZE + 10)
    with pytest.raises(InputError, match="lacks the chatterbox key"):
        text_rows(get_family("chatterbox"), {"text_emb.weight": torch.zeros(3, 2)})


def test_embeddings_tab_shows_what_extend_does(setup: dict[str, Path], workspace: Path) -> None:
    from gradio_app.common import UIContext
    from gradio_app.tabs.embeddings import WILL, plan_rows

    ctx = UIContext(load_settings(), runner=None)
    table = dict(plan_rows(ctx, "checkpoints/t3.safetensors", "tokenizers/base.json", "tokenizers/extended.json"))
    report = extend_checkpoint(setup["checkpoint"], setup["base"], setup["extended"], workspace / "out.safetensors")
    assert table["family"] == report["family"] == "chatterbox"
    assert (table["rows now"], table["rows after"], table["rows added"], table["base rows copied"]) == \
        (report["rows_before"], report["rows_after"], 2, report["base_rows_copied"]) == (2454, 2456, 2, 2454)
    assert table[WILL] == "resize 2454 → 2456 rows"


def test_embeddings_tab_refuses_what_extend_refuses(setup: dict[str, Path], workspace: Path) -> None:
    """The reordered tokenizer has the base's size + 1 (rows would fit) but moves two base pieces:
    Check rows used to approve it; now it shows Extend's own refusal."""
    from gradio_app.common import UIContext
    from gradio_app.tabs.embeddings import REFUSED, WILL, plan_rows

    ctx = UIContext(load_settings(), runner=None)
    table = dict(plan_rows(ctx, "checkpoints/t3.safetensors", "tokenizers/base.json", "tokenizers/reordered.json"))
    with pytest.raises(InputError) as refused:
        extend_checkpoint(setup["checkpoint"], setup["base"], setup["reordered"], workspace / "out.safetensors")
    assert table[REFUSED] == str(refused.value)
    assert "keep every base piece at its id" in table[REFUSED]
    assert WILL not in table and "rows after" not in table
    assert not (workspace / "out.safetensors").exists()
    loaded_change = plan_checkpoint_rows(
        {"text_emb.weight": torch.zeros(BASE_SIZE, 2), "text_head.weight": torch.zeros(BASE_SIZE, 2)}, None,
        load_tokenizer(setup["base"]), load_tokenizer(setup["extended"]))
    assert loaded_change.family.name == "chatterbox" and loaded_change.rows_after == 2456
