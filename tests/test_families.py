"""Model families: detection from keys and metadata, row counts per family."""

from __future__ import annotations

import pytest
import torch

from core.errors import InputError
from core.families import FAMILIES, detect_family, families_with_rows, get_family, rows_for


def _text(keys: dict[str, int], dim: int = 4) -> dict[str, torch.Tensor]:
    return {k: torch.zeros(rows, dim) if not k.endswith("bias") else torch.zeros(rows) for k, rows in keys.items()}


def test_chatterbox_detected_from_its_keys() -> None:
    sd = _text({"text_emb.weight": 10, "text_head.weight": 10, "speech_emb.weight": 6})
    family = detect_family(sd)
    assert family.name == "chatterbox"
    assert family.head_bias_key is None
    assert rows_for(family, 2454) == 2454


def test_indextts_markers_distinguish_it_from_our_layout() -> None:
    text = {"text_embedding.weight": 11, "text_head.weight": 11, "text_head.bias": 11}
    ours = _text({**text, "mel_embedding.weight": 6, "gpt.h.0.attn.weight": 4})
    foreign = _text({**text, "mel_embedding.weight": 6, "mel_pos_embedding.emb.weight": 5})
    assert detect_family(ours).name == "linguaforge"
    family = detect_family(foreign)
    assert family.name == "indextts"
    assert rows_for(family, 12000) == 12001


def test_recorded_family_wins_over_keys() -> None:
    sd = _text({"text_embedding.weight": 11, "text_head.weight": 11, "text_head.bias": 11})
    assert detect_family(sd, {"family": "indextts"}).name == "indextts"
    with pytest.raises(InputError, match="unknown model family 'nope'.*linguaforge, indextts, chatterbox"):
        detect_family(sd, {"family": "nope"})


def test_unknown_layout_lists_embedding_like_keys() -> None:
    sd = _text({"transformer.wte.weight": 8, "lm_head.weight": 8, "ln_f.weight": 8})
    with pytest.raises(InputError) as info:
        detect_family(sd)
    message = str(info.value)
    assert "lm_head.weight, transformer.wte.weight" in message
    assert "ln_f.weight" not in message
    assert "--family" in message


def test_row_lookalikes_and_registry() -> None:
    assert [f.name for f in families_with_rows(24001, 24000)] == ["indextts"]
    assert {f.name for f in families_with_rows(2454, 2454)} == {"linguaforge", "chatterbox"}
    assert families_with_rows(24002, 24000) == []
    assert get_family("chatterbox") is FAMILIES["chatterbox"]
    assert FAMILIES["indextts"].text_keys == ("text_embedding.weight", "text_head.weight", "text_head.bias")


def test_model_family_registry_detects_by_keys_rows_and_metadata(chatterbox_tokenizer) -> None:
    from core.families.registry import detect_model_family, get_model_family, model_family_names
    from core.tokenizers.tokenizer import load_tokenizer

    assert model_family_names()[0] == "linguaforge"
    tok = load_tokenizer(chatterbox_tokenizer)
    t3 = {"text_emb.weight": torch.zeros(tok.size, 4), "text_head.weight": torch.zeros(tok.size, 4)}
    assert detect_model_family(t3, None, tok).name == "chatterbox"
    assert get_model_family("chatterbox").matches(t3, tok)
    assert not get_model_family("chatterbox").matches({k: v[:-1] for k, v in t3.items()}, tok)
    own = {"text_embedding.weight": torch.zeros(5, 4), "text_head.weight": torch.zeros(5, 4), "text_head.bias": torch.zeros(5)}
    assert detect_model_family(own).name == "linguaforge"
    assert detect_model_family(own, {"family": "chatterbox"}).name == "chatterbox"
    with pytest.raises(InputError, match="unknown model family 'bark'"):
        get_model_family("bark")
    with pytest.raises(InputError, match="no model family fits"):
        detect_model_family({"weird.weight": torch.zeros(2, 2)})
