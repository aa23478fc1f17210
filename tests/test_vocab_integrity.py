"""Issue 16 regressions: family detection, foreign-config gate, same-size tokenizers, honest init counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from core.checkpoint import load_checkpoint, save_checkpoint
from core.checks.doctor import DoctorContext, run_doctor
from core.errors import InputError
from core.families.target_config import read_target_config, write_corrected_config
from core.tokenizers.romanize import base_is_uppercase, romanize
from core.tokenizers.tokenizer import load_tokenizer
from tests.sp_helpers import append_pieces
from core.training.embeddings import extend_checkpoint, extend_state_dict
from core.families import get_family

DIM = 8


def _text_only_indextts(rows: int) -> dict[str, torch.Tensor]:
    """An IndexTTS gpt.pth as a pruned or partial file can be: text tensors, no markers, no record."""
    gen = torch.Generator().manual_seed(7)
    return {"text_embedding.weight": torch.randn(rows, DIM, generator=gen),
            "text_head.weight": torch.randn(rows, DIM, generator=gen), "text_head.bias": torch.randn(rows, generator=gen)}


def _checks(ctx: DoctorContext) -> dict[str, dict]:
    return {c.id: c.to_dict() for c in run_doctor(ctx).checks}


def test_markerless_indextts_checkpoint_extends_with_its_extra_row_last(
    tmp_path: Path, indextts_bpe: Path, grow_sentencepiece
) -> None:
    grown = grow_sentencepiece(indextts_bpe, 12500)
    sd = _text_only_indextts(12001)
    src = save_checkpoint(tmp_path / "gpt.pth", sd, None)
    report = extend_checkpoint(src, indextts_bpe, grown, tmp_path / "ext.safetensors")
    assert report["family"] == "indextts" and "no LinguaForge metadata" in report["family_reason"]
    out = load_checkpoint(tmp_path / "ext.safetensors").state_dict
    assert out["text_embedding.weight"].shape == (12501, DIM)
    assert torch.equal(out["text_embedding.weight"][12500], sd["text_embedding.weight"][12000])
    assert torch.equal(out["text_head.bias"][12500], sd["text_head.bias"][12000])
    assert torch.equal(out["text_embedding.weight"][:12000], sd["text_embedding.weight"][:12000])
    checks = _checks(DoctorContext(tokenizer_path=grown, checkpoint_path=src))
    assert checks["checkpoint.family"]["status"] == "pass"
    assert checks["checkpoint.family"]["message"].startswith("indextts: no LinguaForge metadata")
    assert checks["checkpoint.rows"]["status"] == "fail" and "12001 rows" in checks["checkpoint.rows"]["message"]
    good = _checks(DoctorContext(tokenizer_path=grown, checkpoint_path=tmp_path / "ext.safetensors"))
    assert good["checkpoint.rows"]["message"] == "12501 rows = tokenizer size 12500 + 1 (indextts family)."


def _chatterbox_config(path: Path, size: int) -> Path:
    path.write_text(yaml.safe_dump({"t3": {"text_tokens_dict_size": size, "speech_tokens_dict_size": 8194}}))
    return path


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_foreign_configs_declaring_887_fail_the_doctor(
    tmp_path: Path, indextts_bpe: Path, indextts_config: Path, chatterbox_tokenizer: Path, cli
) -> None:
    config = indextts_config.read_text(encoding="utf-8")
    stale = tmp_path / "config_887.yaml"
    stale.write_text(config.replace("number_text_tokens: 12000", "number_text_tokens: 887"), encoding="utf-8")
    run = cli("doctor", "--tokenizer", indextts_bpe, "--target-config", stale, "--json")
    assert run.code == 2, run.stderr
    check = {c["id"]: c for c in run.json()["checks"]}["config.target"]
    assert check["status"] == "fail"
    assert "`gpt.number_text_tokens` is 887, but the tokenizer has 12000 ids" in check["message"]
    assert "builds 888 text rows" in check["message"] and "gpt.number_text_tokens: 12000" in check["fix"]
    assert _checks(DoctorContext(tokenizer_path=indextts_bpe, target_config_path=indextts_config))["config.target"][
        "status"] == "pass"

    t3 = _chatterbox_config(tmp_path / "t3.yaml", 887)
    check = _checks(DoctorContext(tokenizer_path=chatterbox_tokenizer, target_config_path=t3))["config.target"]
    assert check["status"] == "fail"
    assert "`t3.text_tokens_dict_size` is 887, but the tokenizer has 2454 ids" in check["message"]
    t3_json = tmp_path / "t3.json"
    t3_json.write_text(json.dumps({"text_tokens_dict_size": 2454}))
    assert _checks(DoctorContext(tokenizer_path=chatterbox_tokenizer, target_config_path=t3_json))["config.target"][
        "status"] == "pass"

    # --declared-vocab alone has an unknown consumer: it fails instead of "overridden".
    declared = _checks(DoctorContext(tokenizer_path=chatterbox_tokenizer, declared_vocab=887))["config.declared_vocab"]
    assert declared["status"] == "fail" and "Overridden" not in declared["message"]

    empty = tmp_path / "nothing.yaml"
    empty.write_text("gpt: {layers: 2}\n")
    with pytest.raises(InputError, match="no text vocabulary size found"):
        read_target_config(empty)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_write_config_corrects_a_copy_and_never_an_input(
    tmp_path: Path, indextts_bpe: Path, indextts_config: Path, grow_sentencepiece, cli
) -> None:
    grown = grow_sentencepiece(indextts_bpe, 12100)
    src = save_checkpoint(tmp_path / "gpt.pth", _text_only_indextts(12001), None)
    fixed = tmp_path / "config_am.yaml"
    before = indextts_config.read_text(encoding="utf-8")
    run = cli("embeddings", "extend", "--checkpoint", src, "--base-tokenizer", indextts_bpe, "--tokenizer", grown,
              "--output", tmp_path / "gpt_am.safetensors", "--target-config", indextts_config,
              "--write-config", fixed, "--json")
    assert run.code == 0, run.stderr
    assert run.json()["config"] == {"output": str(fixed), "key": "gpt.number_text_tokens", "before": 12000, "after": 12100}
    assert indextts_config.read_text(encoding="utf-8") == before
    lines_changed = [(a, b) for a, b in zip(before.splitlines(), fixed.read_text().splitlines()) if a != b]
    assert lines_changed == [("    number_text_tokens: 12000", "    number_text_tokens: 12100")]
    assert _checks(DoctorContext(tokenizer_path=grown, target_config_path=fixed))["config.target"]["status"] == "pass"
    with pytest.raises(InputError, match="would overwrite an input"):
        write_corrected_config(indextts_config, indextts_config, 12100)
    with pytest.raises(InputError, match="would overwrite an input"):
        extend_checkpoint(src, indextts_bpe, grown, tmp_path / "x.safetensors", target_config=indextts_config,
                          write_config=src)
    assert not (tmp_path / "x.safetensors").exists()


def test_same_size_tokenizer_with_other_pieces(tmp_path: Path, chatterbox_tokenizer: Path) -> None:
    data = json.loads(chatterbox_tokenizer.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # a "from-scratch" tokenizer: same 2454 ids, other pieces
    scratch = tmp_path / "scratch.json"
    scratch.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    gen = torch.Generator().manual_seed(1)
    sd = {"text_emb.weight": torch.randn(2454, DIM, generator=gen), "text_head.weight": torch.randn(2454, DIM, generator=gen)}
    ckpt = save_checkpoint(tmp_path / "t3.safetensors", sd, None)
    checks = _checks(DoctorContext(tokenizer_path=scratch, checkpoint_path=ckpt, base_tokenizer_path=chatterbox_tokenizer))
    assert checks["checkpoint.rows"]["status"] == "pass"
    assert checks["tokenizer.base"]["status"] == "fail"
    assert f"id 300 is {b!r}" in checks["tokenizer.base"]["message"]
    unknown = _checks(DoctorContext(tokenizer_path=scratch, checkpoint_path=ckpt))["tokenizer.base"]
    assert unknown["status"] == "warn"
    assert "2454 text rows = 2454-id tokenizer +0" in unknown["message"] and "does not mean the pieces do" in unknown["message"]
    same = _checks(DoctorContext(tokenizer_path=chatterbox_tokenizer, base_tokenizer_path=chatterbox_tokenizer))
    assert same["tokenizer.base"]["status"] == "pass"


def test_init_counts_are_recorded_and_translit_spells_ethiopic(tmp_path: Path, indextts_bpe: Path) -> None:
    new = append_pieces(indextts_bpe, ["▁ሰላም", "ም", "▁THEZ", "።"], indextts_bpe.with_name("am.model"))
    sd = _text_only_indextts(12001)
    src = save_checkpoint(tmp_path / "gpt.pth", sd, None)
    report = extend_checkpoint(src, indextts_bpe, new, tmp_path / "fvt.safetensors", init="fvt")
    meta = load_checkpoint(tmp_path / "fvt.safetensors").meta
    assert report["init"] == {"fvt": 1, "translit": 0, "mean": 3, "normal": 0}
    assert (meta["init"], meta["init_rows"]) == ("fvt+mean", {"fvt": 1, "mean": 3})

    base = load_tokenizer(indextts_bpe)
    assert base_is_uppercase(base) and romanize("ሰላም", uppercase=True) == "SELAM"
    out, report = extend_state_dict(sd, get_family("indextts"), base, load_tokenizer(new), init="translit")
    assert report["init"] == {"fvt": 1, "translit": 3, "mean": 0, "normal": 0}
    rows = sd["text_embedding.weight"].double()
    boundary = base.pieces().index("▁")
    for row, spelling in ((12000, " SELAM"), (12001, "M"), (12003, ".")):
        ids = [i for i in base.encode(spelling) if i != boundary]
        assert ids and torch.allclose(out["text_embedding.weight"][row], rows[ids].mean(0).float()), spelling
    assert not torch.allclose(out["text_embedding.weight"][12000], out["text_embedding.weight"][12001])
    checks = _checks(DoctorContext(tokenizer_path=new, checkpoint_path=tmp_path / "fvt.safetensors"))
    assert "1 by `fvt`, 3 by `mean`" in checks["embeddings.provenance"]["message"]
