"""Checkpoint I/O: metadata round trips, foreign layouts, refused pickles, truncation, atomic saves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from core.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from core.families.summary import inspect_checkpoint
from core.errors import InputError, InternalError
from core.fsutil import atomic_write, atomic_write_json, sha256_file


def _indextts_state(rows: int = 12001, dim: int = 8) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {
        "text_embedding.weight": torch.randn(rows, dim, generator=gen),
        "text_head.weight": torch.randn(rows, dim, generator=gen),
        "text_head.bias": torch.randn(rows, generator=gen),
        "mel_embedding.weight": torch.randn(8194, dim, generator=gen),
        "mel_pos_embedding.emb.weight": torch.randn(16, dim, generator=gen),
    }


class _Payload:
    """Unpickling this runs code that writes a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_safetensors_round_trip_keeps_metadata_and_bits(tmp_path: Path) -> None:
    sd = _indextts_state(rows=101)
    sd["tied"] = sd["text_embedding.weight"]
    meta = CheckpointMeta(family="indextts", tokenizer_size=100, rows=101, base_size=100, init="fvt", step=7)
    path = save_checkpoint(tmp_path / "m.safetensors", sd, meta)
    loaded = load_checkpoint(path)
    assert loaded.meta == meta.to_dict()
    assert CheckpointMeta.from_dict({**loaded.meta, "future_field": 1}) == meta
    assert all(torch.equal(loaded.state_dict[k], v) for k, v in sd.items())
    assert loaded.sha256 == sha256_file(path) and len(loaded.sha256) == 64
    with pytest.raises(InternalError, match="tensors only"):
        save_checkpoint(tmp_path / "x.safetensors", sd, meta, extra={"optimizer": {}})


def test_pt_keeps_training_extras_loadable_with_weights_only(tmp_path: Path) -> None:
    sd = {"w": torch.arange(6.0).reshape(2, 3)}
    extra = {"optimizer": {"state": {0: {"exp_avg": torch.ones(2, 3), "step": torch.tensor(5.0)}}}, "epoch": 3}
    path = save_checkpoint(tmp_path / "train.pt", sd, {"family": "linguaforge", "step": 5}, extra)
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"model", "linguaforge", "optimizer", "epoch"}
    loaded = load_checkpoint(path)
    assert loaded.meta == {"family": "linguaforge", "step": 5}
    assert loaded.extra["epoch"] == 3
    assert torch.equal(loaded.extra["optimizer"]["state"][0]["exp_avg"], torch.ones(2, 3))
    with pytest.raises(InternalError, match="extra.bad is a object"):
        save_checkpoint(tmp_path / "bad.pt", sd, None, {"bad": object()})
    with pytest.raises(InputError, match=r"unsupported checkpoint suffix '\.npz'"):
        save_checkpoint(tmp_path / "m.npz", sd, None)
    assert not (tmp_path / "bad.pt").exists()


@pytest.mark.parametrize("wrapper", ["model", "state_dict"])
def test_foreign_wrapped_layouts_unwrap_and_drop_aliases(tmp_path: Path, wrapper: str) -> None:
    sd = _indextts_state(rows=11)
    sd["gpt.wte.weight"] = sd["mel_embedding.weight"]
    sd["inference_model.lm_head.weight"] = torch.zeros(3, 8)
    path = tmp_path / "gpt.pth"
    torch.save({wrapper: {f"module.{k}": v for k, v in sd.items()}, "optimizer": {"lr": 0.1}}, path)
    loaded = load_checkpoint(path)
    assert loaded.meta is None
    assert loaded.dropped == ["gpt.wte.weight", "inference_model.lm_head.weight"]
    assert sorted(loaded.state_dict) == sorted(_indextts_state(rows=11))
    assert loaded.extra == {"optimizer": {"lr": 0.1}}


@pytest.mark.parametrize("zipped", [True, False])
def test_code_execution_pickle_is_refused_and_never_runs(tmp_path: Path, zipped: bool) -> None:
    marker = tmp_path / "payload_ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "hook": _Payload(marker)}, path, _use_new_zipfile_serialization=zipped)
    with pytest.raises(InputError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "refused" in str(info.value) and "not executed" in str(info.value)
    assert not marker.exists(), "the payload ran during the refused load"
    torch.load(path, weights_only=False)  # control: an unsafe load does run it, so the check above is meaningful
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("name", ["cut.pt", "cut.safetensors"])
def test_truncated_files_are_input_errors_naming_the_file(tmp_path: Path, name: str) -> None:
    path = save_checkpoint(tmp_path / name, _indextts_state(rows=50), {"family": "indextts"})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=f"{path}.*(truncated|re-copy)"):
        load_checkpoint(path)
    path.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load_checkpoint(path)
    with pytest.raises(InputError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_crash_during_save_leaves_previous_checkpoint_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_checkpoint(tmp_path / "keep.pt", {"w": torch.ones(3)}, {"step": 1})
    before = path.read_bytes()

    def crash(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("the process was interrupted")   # not a full disk: propagates as it is

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="interrupted"):
        save_checkpoint(path, {"w": torch.zeros(3)}, {"step": 2})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]


def test_atomic_write_helpers(tmp_path: Path) -> None:
    target = atomic_write_json(tmp_path / "sub" / "a.json", {"x": "é"})
    assert target.read_text(encoding="utf-8") == '{\n  "x": "é"\n}\n'
    with pytest.raises(ValueError):
        with atomic_write(target) as tmp:
            tmp.write_text("partial")
            raise ValueError("boom")
    assert '"é"' in target.read_text(encoding="utf-8")
    assert os.listdir(target.parent) == ["a.json"]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_cli_inspect_foreign_and_refused(tmp_path: Path, cli) -> None:
    path = tmp_path / "gpt.pth"
    torch.save({"model": {**_indextts_state(), "gpt.wte.weight": torch.zeros(8194, 8)}}, path)
    run = cli("checkpoint", "inspect", path, "--json")
    assert run.code == 0, run.stderr
    info = run.json()
    assert (info["family"], info["rows"], info["dim"], info["meta"]) == ("indextts", 12001, 8, None)
    assert info["dropped"] == ["gpt.wte.weight"]
    assert ["text_head.bias", [12001], "float32"] in info["text_tensors"]
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save({"x": _Payload(marker)}, evil)
    run = cli("checkpoint", "inspect", evil)
    assert run.code == 2
    assert "refused" in run.stderr and "Traceback" not in run.stderr
    assert not marker.exists()


def test_inspect_reports_unknown_layouts_without_failing(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "lm.safetensors", {"transformer.wte.weight": torch.zeros(5, 3), "ln.bias": torch.zeros(3)}, None)
    info = inspect_checkpoint(path)
    assert (info["family"], info["rows"], info["meta"], info["parameters"]) == (None, None, None, 18)
    assert "Embedding-like keys seen: transformer.wte.weight" in info["family_error"]
    assert info["groups"] == [["ln", 1, 3], ["transformer", 1, 15]]
