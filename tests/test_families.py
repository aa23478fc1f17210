"""Model families: detection from keys and metadata, row counts per family."""

from __future__ import annotations

import pytest
import torch

from core.errors import InputError
from core.families import FAMILIES, detect_family, explain_family, families_with_rows, get_family, rows_for


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
    assert detect_family(ours, {"step": 3}, 11).name == "linguaforge"  # a record without `family`: rows decide
    family = detect_family(foreign, {"step": 3})
    assert family.name == "indextts"
    assert "mel_pos_embedding.*" in explain_family(foreign, {"step": 3}).reason
    assert rows_for(family, 12000) == 12001


def test_a_markerless_checkpoint_without_metadata_is_never_linguaforge() -> None:
    # Finding 1 of issue 16: a pruned IndexTTS gpt.pth (text keys only, no markers, no record).
    sd = _text({"text_embedding.weight": 12001, "text_head.weight": 12001, "text_head.bias": 12001})
    decision = explain_family(sd, None)
    assert decision.family.name == "indextts"
    assert "no LinguaForge metadata" in decision.reason
    assert explain_family(sd, None, 12000).family.name == "indextts"


def test_rows_against_the_tokenizer_decide_and_ambiguity_is_refused() -> None:
    sd = _text({"text_embedding.weight": 12001, "text_head.weight": 12001, "text_head.bias": 12001})
    meta = {"step": 1}  # LinguaForge-written but without a family: linguaforge and indextts both fit the keys
    decision = explain_family(sd, meta, 12000)
    assert decision.family.name == "indextts" and decision.reason == "12001 text rows = 12000-id tokenizer +1"
    assert explain_family(sd, meta, 12001).family.name == "linguaforge"
    with pytest.raises(InputError, match=r"keys fit linguaforge, indextts.*12001 text rows decide nothing.*--family"):
        explain_family(sd, meta)
    with pytest.raises(InputError, match=r"linguaforge needs 500; indextts needs 501\)\. Pass --family"):
        explain_family(sd, meta, 500)


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
    assert {f.name for f in families_with_rows(2454, 2454)} == {"linguaforge", "chatterbox", "chatterbox-turbo", "csm"}
    assert families_with_rows(24002, 24000) == []
    assert get_family("chatterbox") is FAMILIES["chatterbox"]
    assert FAMILIES["indextts"].text_keys == ("text_embedding.weight", "text_head.weight", "text_head.bias")


def test_model_family_registry_and_detection_by_keys_rows_and_metadata(chatterbox_tokenizer) -> None:
    from core.families.registry import get_model_family, model_family_names
    from core.tokenizers.tokenizer import load_tokenizer

    assert model_family_names()[0] == "linguaforge"
    assert get_model_family("chatterbox").layout is FAMILIES["chatterbox"]
    assert get_model_family("chatterbox") is get_model_family("chatterbox")  # one instance per process
    tok = load_tokenizer(chatterbox_tokenizer)
    t3 = {"text_emb.weight": torch.zeros(tok.size, 4), "text_head.weight": torch.zeros(tok.size, 4)}
    assert detect_family(t3, None, tok.size).name == "chatterbox"
    own = {"text_embedding.weight": torch.zeros(5, 4), "text_head.weight": torch.zeros(5, 4), "text_head.bias": torch.zeros(5)}
    assert detect_family(own, {"step": 1}, 5).name == "linguaforge"
    assert detect_family(own, {"family": "chatterbox"}).name == "chatterbox"
    with pytest.raises(InputError, match="unknown model family 'bark'"):
        get_model_family("bark")
    with pytest.raises(InputError, match="no family's text keys are present"):
        detect_family({"weird.weight": torch.zeros(2, 2)})
