"""Embedding extension on IndexTTS- and Chatterbox-shaped checkpoints with the real fixture tokenizers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint, save_checkpoint
from core.training.embeddings import extend_checkpoint, extend_state_dict
from core.errors import InputError
from core.families import get_family
from core.fsutil import sha256_file
from core.tokenizers.sp_proto import parse_model_proto
from core.tokenizers.tokenizer import load_tokenizer
from tests.sp_helpers import append_pieces
from core.tokenizers.vocab import first_difference, require_prefix_extension

DIM = 8


def _indextts_state(rows: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {
        "text_embedding.weight": torch.randn(rows, DIM, generator=gen),
        "text_head.weight": torch.randn(rows, DIM, generator=gen),
        "text_head.bias": torch.randn(rows, generator=gen),
        "mel_embedding.weight": torch.randn(8194, DIM, generator=gen),
        "mel_pos_embedding.emb.weight": torch.randn(16, DIM, generator=gen),
    }


def _chatterbox_state(rows: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(4)
    return {
        "text_emb.weight": torch.randn(rows, DIM, generator=gen),
        "text_head.weight": torch.randn(rows, DIM, generator=gen),
        "speech_emb.weight": torch.randn(10, DIM, generator=gen),
    }


def _chatterbox_with(base: Path, chars: list[str], name: str) -> Path:
    """A copy of the Chatterbox tokenizer with `chars` appended to the BPE vocab after id 2453."""
    data = json.loads(base.read_text(encoding="utf-8"))
    for i, char in enumerate(chars):
        data["model"]["vocab"][char] = 2454 + i
    path = base.with_name(name)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_indextts_12k_to_24k_copies_base_moves_extra_row_and_uses_fvt(
    tmp_path: Path, indextts_bpe: Path, grow_sentencepiece
) -> None:
    grown = grow_sentencepiece(indextts_bpe, 24000)
    sd = _indextts_state(12001)
    src = save_checkpoint(tmp_path / "gpt.pt", sd, None)
    report = extend_checkpoint(src, indextts_bpe, grown, tmp_path / "ext.safetensors")
    assert (report["rows_before"], report["rows_after"], report["base_rows_copied"]) == (12001, 24001, 12000)
    assert report["init"] == {"fvt": 12000, "translit": 0, "mean": 0, "normal": 0}
    assert report["extra_rows_moved"] == {"from": 12000, "to": 24000}
    out = load_checkpoint(tmp_path / "ext.safetensors")
    emb, old = out.state_dict["text_embedding.weight"], sd["text_embedding.weight"]
    assert torch.equal(emb[:12000], old[:12000])
    assert torch.equal(emb[24000], old[12000]), "the never-indexed extra row moves to the new end"
    assert not torch.equal(emb[12000], old[12000]), "new token 12000 must not inherit the extra row"
    base = load_tokenizer(indextts_bpe)
    first_new = load_tokenizer(grown).piece(12000)
    sub = [i for i in base.encode(first_new.replace("▁", " ")) if base.piece(i) != "▁"]
    assert [base.piece(i) for i in sub] == ["Q", "X", "A"]
    assert torch.allclose(emb[12000], old[sub].double().mean(0).float())
    assert torch.allclose(out.state_dict["text_head.weight"][12000], sd["text_head.weight"][sub].double().mean(0).float())
    bias = out.state_dict["text_head.bias"]
    assert torch.equal(bias[:12000], sd["text_head.bias"][:12000]) and bias[24000] == sd["text_head.bias"][12000]
    assert torch.allclose(bias[12000:24000], sd["text_head.bias"][:12000].double().mean().float().expand(12000))
    assert torch.equal(out.state_dict["mel_embedding.weight"], sd["mel_embedding.weight"])
    assert out.meta["family"] == "indextts" and out.meta["task"] == "tts"
    assert (out.meta["base_size"], out.meta["tokenizer_size"], out.meta["rows"], out.meta["init"]) == (12000, 24000, 24001, "fvt")
    assert out.meta["parent"] == sha256_file(src)
    assert out.meta["tokenizer_fingerprint"] == sha256_file(grown)


def test_ethiopic_falls_back_to_mean_on_both_fixtures(indextts_bpe: Path, chatterbox_tokenizer: Path) -> None:
    sp_new = append_pieces(indextts_bpe, ["▁ሰላም", "ም"], indextts_bpe.with_name("am.model"))
    sd = _indextts_state(12001)
    out, report = extend_state_dict(sd, get_family("indextts"), load_tokenizer(indextts_bpe), load_tokenizer(sp_new))
    assert report["init"] == {"fvt": 0, "translit": 0, "mean": 2, "normal": 0}
    mean = sd["text_embedding.weight"][:12000].double().mean(0).float()
    assert torch.allclose(out["text_embedding.weight"][12000], mean)
    assert torch.allclose(out["text_embedding.weight"][12001], mean)
    hf_new = _chatterbox_with(chatterbox_tokenizer, ["ሰ", "qz"], "am.json")
    sd = _chatterbox_state(2454)
    out, report = extend_state_dict(sd, get_family("chatterbox"), load_tokenizer(chatterbox_tokenizer), load_tokenizer(hf_new))
    assert report["init"] == {"fvt": 1, "translit": 0, "mean": 1, "normal": 0}
    assert report["extra_rows_moved"] is None and out["text_emb.weight"].shape == (2456, DIM)
    assert torch.allclose(out["text_emb.weight"][2454], sd["text_emb.weight"][:2454].double().mean(0).float())
    qz = sd["text_emb.weight"][[30, 39]].double().mean(0).float()
    assert torch.allclose(out["text_emb.weight"][2455], qz), "'qz' is base 'q' (30) + 'z' (39)"


def test_normal_init_matches_base_statistics(chatterbox_tokenizer: Path) -> None:
    chars = [chr(0x1200 + i) for i in range(2000)]
    new = load_tokenizer(_chatterbox_with(chatterbox_tokenizer, chars, "big.json"))
    sd = _chatterbox_state(2454)
    sd["text_emb.weight"] = sd["text_emb.weight"] * torch.linspace(0.5, 3.0, DIM) + torch.arange(DIM)
    base = load_tokenizer(chatterbox_tokenizer)
    out, report = extend_state_dict(sd, get_family("chatterbox"), base, new, init="normal", seed=5)
    assert report["init"] == {"fvt": 0, "translit": 0, "mean": 0, "normal": 2000}
    rows, ref = out["text_emb.weight"][2454:], sd["text_emb.weight"]
    assert torch.allclose(rows.mean(0), ref.mean(0), atol=0.2)
    assert torch.allclose(rows.std(0) / ref.std(0), torch.ones(DIM), atol=0.08)
    again, _ = extend_state_dict(sd, get_family("chatterbox"), base, new, init="normal", seed=5)
    assert torch.equal(again["text_emb.weight"], out["text_emb.weight"])
    out, report = extend_state_dict(sd, get_family("chatterbox"), base, new, init="mean")
    assert report["init"]["mean"] == 2000 and torch.allclose(out["text_emb.weight"][-1], ref.mean(0), atol=1e-5)


def test_refuses_a_tokenizer_that_is_not_a_prefix_extension(indextts_bpe: Path) -> None:
    proto = parse_model_proto(indextts_bpe.read_bytes())
    proto.pieces[500].piece = "▁SWAPPED"
    changed = indextts_bpe.with_name("changed.model")
    changed.write_bytes(proto.SerializeToString())
    base, new = load_tokenizer(indextts_bpe), load_tokenizer(changed)
    assert first_difference(base, new) == 500
    assert first_difference(base, base) is None
    with pytest.raises(InputError, match=r"id 500 is '▁SWAPPED' but the base .* has '.+'"):
        require_prefix_extension(base, new)
    with pytest.raises(InputError, match="id 500"):
        extend_state_dict(_indextts_state(12001), get_family("indextts"), base, new)


def test_shrinking_needs_allow_truncate(chatterbox_tokenizer: Path) -> None:
    base = load_tokenizer(chatterbox_tokenizer)
    new = load_tokenizer(_chatterbox_with(chatterbox_tokenizer, [chr(0x1200 + i) for i in range(81)], "t2535.json"))
    sd = _chatterbox_state(3000)
    family = get_family("chatterbox")
    with pytest.raises(InputError, match="3000 text rows .* needs 2535: that drops 465 rows. Pass --allow-truncate"):
        extend_state_dict(sd, family, base, new)
    out, report = extend_state_dict(sd, family, base, new, allow_truncate=True)
    assert out["text_emb.weight"].shape == (2535, DIM) and report["rows_discarded"] == 546
    assert torch.equal(out["text_emb.weight"][:2454], sd["text_emb.weight"][:2454])
    with pytest.raises(InputError, match="has 1000 text rows but the chatterbox family needs 2454"):
        extend_state_dict(_chatterbox_state(1000), family, base, new)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_cli_extend_chatterbox(tmp_path: Path, chatterbox_tokenizer: Path, cli) -> None:
    new = _chatterbox_with(chatterbox_tokenizer, ["ሰ", "ላ", "ም"], "am.json")
    src = save_checkpoint(tmp_path / "t3.safetensors", _chatterbox_state(2454), None)
    out = tmp_path / "t3_am.safetensors"
    run = cli("embeddings", "extend", "--checkpoint", src, "--base-tokenizer", chatterbox_tokenizer,
              "--tokenizer", new, "--output", out, "--json")
    assert run.code == 0, run.stderr
    assert run.json()["init"] == {"fvt": 0, "translit": 0, "mean": 3, "normal": 0}
    loaded = load_checkpoint(out)
    assert loaded.state_dict["text_emb.weight"].shape == (2457, DIM)
    assert loaded.meta["family"] == "chatterbox" and loaded.meta["base_size"] == 2454
    with pytest.raises(InputError, match="ids 2454..2456 are missing"):
        extend_checkpoint(out, new, chatterbox_tokenizer, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
