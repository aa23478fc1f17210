"""The preflight doctor and the regression cases from the field (FIELD_NOTES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import core.checks.doctor as doctor
from core.checkpoint import CheckpointMeta, save_checkpoint
from core.checks.vocab import find_random_tail
from core.config import Settings, load_settings
from core.checks.doctor import CheckResult, DoctorContext, doctor_context_from_run_config, register_check, run_doctor
from core.training.embeddings import extend_checkpoint
from core.errors import InputError
from core.training.run_config import load_run_config
from core.tokenizers.sp_proto import parse_model_proto
from core.tokenizers.tokenizer import load_tokenizer

DIM = 8


def _by_id(report) -> dict[str, CheckResult]:
    return {c.id: c for c in report.checks}


def _indextts_state(rows: int, markers: bool = True) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    sd = {
        "text_embedding.weight": torch.randn(rows, DIM, generator=gen) * 0.1,
        "text_head.weight": torch.randn(rows, DIM, generator=gen) * 0.1,
        "text_head.bias": torch.randn(rows, generator=gen),
        "mel_embedding.weight": torch.randn(8194, DIM, generator=gen),
    }
    if markers:
        sd["mel_pos_embedding.emb.weight"] = torch.randn(16, DIM, generator=gen)
    return sd


def _chatterbox_state(rows: int, random_from: int | None = None) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(rows, DIM, generator=gen) * 0.05
    if random_from is not None:
        emb[random_from:] = torch.randn(rows - random_from, DIM, generator=gen)
    return {"text_emb.weight": emb, "text_head.weight": torch.randn(rows, DIM, generator=gen) * 0.05}


def _chatterbox_tokenizer_of(base: Path, size: int, dest: Path) -> Path:
    data = json.loads(base.read_text(encoding="utf-8"))
    for i in range(size - 2454):
        data["model"]["vocab"][chr(0x1200 + i)] = 2454 + i
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return dest


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_field_three_way_mismatch_fails_and_declared_vocab_is_overridden(
    workspace: Path, chatterbox_tokenizer: Path, cli
) -> None:
    tok = _chatterbox_tokenizer_of(chatterbox_tokenizer, 2535, workspace / "tokenizers" / "t2535.json")
    save_checkpoint(workspace / "checkpoints" / "ext.pt", _chatterbox_state(3000), None)
    config = workspace / "runs" / "field" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "name: field\ntask: tts\ntokenizer: tokenizers/t2535.json\nbase_checkpoint: checkpoints/ext.pt\n"
        "model: {preset: tiny, n_vocab: 887}\n",
        encoding="utf-8",
    )
    run = cli("doctor", "--config", config, "--json")
    assert run.code == 2, run.stderr
    data = run.json()
    assert data["ok"] is False and set(data["checks"][0]) == {"id", "status", "message", "fix"}
    checks = {c["id"]: c for c in data["checks"]}
    rows = checks["checkpoint.rows"]
    assert rows["status"] == "fail"
    assert "3000 rows" in rows["message"] and "needs 2535" in rows["message"] and "465 too many" in rows["message"]
    assert "embeddings extend" in rows["fix"] and "--allow-truncate" in rows["fix"]
    declared = checks["config.declared_vocab"]
    assert declared["status"] == "warn"
    assert "887" in declared["message"] and "stale" in declared["message"] and "Overridden" in declared["message"]
    assert "sized from the tokenizer (2535)" in declared["message"]
    assert checks["freeze.range"]["status"] == "warn" and "records no base size" in checks["freeze.range"]["message"]

    settings = load_settings()
    ctx = doctor_context_from_run_config(load_run_config(config), config, settings)
    report = run_doctor(ctx)
    with pytest.raises(InputError, match="refused to start: checkpoint.rows: .*3000 rows"):
        report.raise_for_failures()  # the gate training calls before it builds a model
    extend_checkpoint(workspace / "checkpoints" / "ext.pt", chatterbox_tokenizer, tok,
                      workspace / "checkpoints" / "ext.pt.fixed.safetensors", allow_truncate=True)
    config.write_text(config.read_text(encoding="utf-8").replace("ext.pt", "ext.pt.fixed.safetensors"), encoding="utf-8")
    fixed = run_doctor(doctor_context_from_run_config(load_run_config(config), config, settings))
    assert fixed.ok, fixed.render()
    assert _by_id(fixed)["config.declared_vocab"].status == "warn"
    assert _by_id(fixed)["freeze.range"].message.startswith("rows 0..2453 frozen, 81 new row(s) train")


def test_indextts_rows_follow_the_family_offset(tmp_path: Path, indextts_bpe: Path, grow_sentencepiece) -> None:
    tok = grow_sentencepiece(indextts_bpe, 24000)
    good = save_checkpoint(tmp_path / "good.pt", _indextts_state(24001), None)
    report = run_doctor(DoctorContext(tokenizer_path=tok, checkpoint_path=good))
    assert report.ok, report.render()
    assert _by_id(report)["checkpoint.rows"].message == "24001 rows = tokenizer size 24000 + 1 (indextts family)."
    bad = save_checkpoint(tmp_path / "bad.pt", _indextts_state(24002), None)
    result = _by_id(run_doctor(DoctorContext(tokenizer_path=tok, checkpoint_path=bad)))["checkpoint.rows"]
    assert result.status == "fail"
    assert "24002 rows, but the indextts family needs 24001" in result.message
    assert "rows = size +2, but the indextts family's offset is +1" in result.message


def test_rows_mismatch_names_the_family_it_looks_like(tmp_path: Path, indextts_bpe: Path) -> None:
    plain = save_checkpoint(tmp_path / "plain.pt", _indextts_state(12001, markers=False), None)
    ok = _by_id(run_doctor(DoctorContext(tokenizer_path=indextts_bpe, checkpoint_path=plain)))
    assert ok["checkpoint.rows"].status == "pass", "no metadata: never linguaforge, so the IndexTTS offset applies"
    wrong = run_doctor(DoctorContext(tokenizer_path=indextts_bpe, checkpoint_path=plain, family="linguaforge"))
    result = _by_id(wrong)["checkpoint.rows"]
    assert result.status == "fail"
    assert "rows = size +1: this is an indextts-family checkpoint" in result.message
    assert _by_id(wrong)["checkpoint.family"].message == "linguaforge: given with --family."


def test_freeze_until_beyond_the_vocabulary_fails(indextts_bpe: Path) -> None:
    proto = parse_model_proto(indextts_bpe.read_bytes())
    del proto.pieces[1000:]
    small = indextts_bpe.with_name("t1000.model")
    small.write_bytes(proto.SerializeToString())
    statuses = {}
    for until in (2454, 1000, 999):
        result = _by_id(run_doctor(DoctorContext(tokenizer_path=small, freeze_until=until)))["freeze.range"]
        statuses[until] = result.status
        if until == 2454:
            assert "2454 is outside 0..1000" in result.message and "not clamped" in result.message
    assert statuses == {2454: "fail", 1000: "warn", 999: "pass"}


def test_checkpoint_for_another_tokenizer_of_the_same_size_fails(tmp_path: Path, indextts_bpe: Path) -> None:
    proto = parse_model_proto(indextts_bpe.read_bytes())
    proto.pieces[7000].score -= 1.0
    other = indextts_bpe.with_name("other.model")
    other.write_bytes(proto.SerializeToString())
    tok_a, tok_b = load_tokenizer(indextts_bpe), load_tokenizer(other)
    assert tok_a.size == tok_b.size
    meta = CheckpointMeta(family="indextts", tokenizer_fingerprint=tok_a.fingerprint, tokenizer_size=12000,
                          rows=12001, base_size=12000, init="fvt")
    ckpt = save_checkpoint(tmp_path / "a.safetensors", _indextts_state(12001), meta)
    report = run_doctor(DoctorContext(tokenizer_path=other, checkpoint_path=ckpt))
    result = _by_id(report)["checkpoint.fingerprint"]
    assert result.status == "fail" and not report.ok
    assert tok_a.fingerprint[:16] in result.message and tok_b.fingerprint[:16] in result.message
    same = run_doctor(DoctorContext(tokenizer_path=indextts_bpe, checkpoint_path=ckpt))
    assert same.ok
    assert _by_id(same)["embeddings.provenance"].message == (
        "written by LinguaForge: rows from 12000 on were made by `fvt` (recorded in the metadata)."
    )


def test_refused_pickle_checkpoint_is_a_failure_not_a_traceback(tmp_path: Path, indextts_bpe: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    evil = tmp_path / "evil.pth"
    torch.save({"model": {"w": torch.zeros(1)}, "x": Payload()}, evil)
    result = _by_id(run_doctor(DoctorContext(tokenizer_path=indextts_bpe, checkpoint_path=evil)))["checkpoint.rows"]
    assert result.status == "fail" and "refused" in result.message
    assert not marker.exists()


def test_tokenizer_resolution_order(workspace: Path, indextts_bpe: Path, chatterbox_tokenizer: Path) -> None:
    settings = load_settings()
    stored = workspace / "tokenizers" / "base.model"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(indextts_bpe.read_bytes())
    meta = {"family": "indextts", "tokenizer_fingerprint": load_tokenizer(stored).fingerprint}
    ckpt = save_checkpoint(workspace / "checkpoints" / "m.safetensors", _indextts_state(12001), meta)
    ctx = DoctorContext(checkpoint_path=ckpt, settings=settings)
    assert ctx.tokenizer().path == stored and ctx.tokenizer_source() == "checkpoint metadata"
    ctx = DoctorContext(checkpoint_path=ckpt, tokenizer_path=chatterbox_tokenizer, settings=settings)
    assert ctx.tokenizer().path == chatterbox_tokenizer and ctx.tokenizer_source() == "explicit path"
    with_default = Settings(workspace, {"tokenizer": {"default": "tokenizers/base.model"}})
    ctx = DoctorContext(settings=with_default)
    assert ctx.tokenizer().path == stored and ctx.tokenizer_source().startswith("workspace default")
    report = run_doctor(DoctorContext(settings=settings))
    result = _by_id(report)["tokenizer"]
    assert result.status == "fail" and "no tokenizer" in result.message and "--tokenizer" in result.fix
    assert [c.id for c in report.checks if c.id in ("checkpoint.rows", "freeze.range")] == []
    broken = workspace / "broken.model"
    broken.write_bytes(indextts_bpe.read_bytes()[:1000])
    result = _by_id(run_doctor(DoctorContext(tokenizer_path=broken, settings=settings)))["tokenizer"]
    assert result.status == "fail" and str(broken) in result.message


def test_random_looking_new_rows_warn(tmp_path: Path, chatterbox_tokenizer: Path) -> None:
    tok = _chatterbox_tokenizer_of(chatterbox_tokenizer, 2535, tmp_path / "t.json")
    foreign = save_checkpoint(tmp_path / "f.pt", _chatterbox_state(2535, random_from=2454), None)
    result = _by_id(run_doctor(DoctorContext(tokenizer_path=tok, checkpoint_path=foreign)))["embeddings.provenance"]
    assert result.status == "warn" and result.message.startswith("rows 2454..2534 (81 rows)")
    assert "--init fvt" in result.fix
    clean = save_checkpoint(tmp_path / "c.pt", _chatterbox_state(2535), None)
    result = _by_id(run_doctor(DoctorContext(tokenizer_path=tok, checkpoint_path=clean)))["embeddings.provenance"]
    assert result.status == "pass"
    norms = torch.ones(100)
    norms[90:] = 1.5
    assert find_random_tail(norms) is None
    norms[90:] = 30.0
    assert find_random_tail(norms)[0] == 90


def test_checks_are_discovered_and_raising_checks_become_failures(monkeypatch: pytest.MonkeyPatch, indextts_bpe: Path) -> None:
    doctor.discover_checks()  # register the real checks in the real registry before copying it
    monkeypatch.setattr(doctor, "_REGISTRY", dict(doctor._REGISTRY))

    @register_check("test.raises", order=1)
    def raises(ctx: DoctorContext) -> CheckResult:
        raise InputError("data.yaml line 3: bad value 7. Use 8.")

    ids = [cid for cid, _ in doctor.discover_checks()]
    assert ids[0] == "test.raises"
    expected = ["tokenizer", "checkpoint.rows", "config.declared_vocab", "freeze.range",
                "checkpoint.fingerprint", "embeddings.provenance"]
    assert [i for i in ids if i in expected] == expected
    report = run_doctor(DoctorContext(tokenizer_path=indextts_bpe))
    assert report.checks[0].to_dict()["message"] == "data.yaml line 3: bad value 7. Use 8."
    assert not report.ok and "1 check(s) failed" in report.render()
