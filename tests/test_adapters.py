"""LoRA adapters through peft on LinguaForge's own GPT: what trains, what is saved, exact resume,
vocabulary-growth resume, merge (strict load, same logits), the peft export and bad adapter settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.cli import main
from core.config import load_settings
from core.errors import InputError
from core.families.registry import get_model_family
from core.recipe import train
from core.training.adapter import full_weights, inject_lora, load_lora, merged_state_dict
from core.training.run_config import AdapterConfig, load_run_config, run_config_from_dict
from models.registry import build_model
from tests.trainer_helpers import NEW_WORDS, SPECIALS, english_words, extended_lm_workspace, lm_config, write_word_tokenizer

torch.set_num_threads(1)
MORE_WORDS = ["injera", "shai"]
LORA = {"kind": "lora", "rank": 4, "alpha": 8.0, "dropout": 0.0}
N_BASE = len(SPECIALS) + len(english_words())


def _train(workspace: Path, name: str, max_steps: int | None = None, resume: str | None = None, **overrides):
    path = lm_config(workspace, name, **overrides)
    return train(load_run_config(path), path, load_settings(), resume=resume, max_steps=max_steps)


def _metrics(workspace: Path, run: str) -> dict[int, dict]:
    lines = (workspace / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return {m["step"]: m for m in map(json.loads, lines) if m["split"] == "train"}


@pytest.fixture
def lora_ws(workspace: Path) -> Path:
    """An English base run extended to the English+new-words tokenizer (`checkpoints/en_plus.pt`)."""
    extended_lm_workspace(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "en_more.json", english_words() + NEW_WORDS + MORE_WORDS)
    return workspace


def _lora_run(workspace: Path, name: str, **overrides):
    return _train(workspace, name, tokenizer="tokenizers/en_plus.json", base_checkpoint="checkpoints/en_plus.pt",
                  adapter=LORA, optim={"weight_decay": 0.1, "lr": 1.0e-2}, **overrides)


@pytest.mark.slow  # 20 s at load 12 (issue 50: the quick loop keeps tests under ~5 s)
def test_lora_trains_adapter_and_new_rows_only_and_the_checkpoint_holds_only_them(lora_ws: Path) -> None:
    result = _lora_run(lora_ws, "lora")
    assert result.state == "finished" and result.step == 6
    sha = result.base_rows_sha256
    assert sha["start"] is not None and sha["start"] == sha["now"]
    saved = load_checkpoint(result.last_checkpoint)
    keys = set(saved.state_dict)
    lora_keys = {k for k in keys if ".lora_" in k}
    # 2 layers × 4 target modules × (A, B), plus the trainable text rows
    assert len(lora_keys) == 16 and keys - lora_keys == {"text_embedding.weight_new", "text_head.weight_new", "text_head.bias_new"}
    assert saved.state_dict["text_embedding.weight_new"].shape[0] == len(NEW_WORDS)
    record = saved.meta["adapter"]
    assert record["rank"] == 4 and record["alpha"] == 8.0 and record["frozen_rows"] == N_BASE
    assert set(record["modules"]) == {f"gpt.blocks.{i}.{m}" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")}
    base = load_checkpoint(lora_ws / "checkpoints" / "en_plus.pt")
    assert record["base_sha256"] == base.sha256
    # the B matrices start at zero and moved; the new rows moved; the base rows are the base's bit for bit
    assert any(saved.state_dict[k].abs().sum() > 0 for k in lora_keys if "lora_B" in k)
    merged = merged_state_dict(base.state_dict, saved.state_dict, record)
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert torch.equal(merged[key][:N_BASE], base.state_dict[key][:N_BASE]), key
        assert not torch.equal(merged[key][N_BASE:], base.state_dict[key][N_BASE:]), key
    assert torch.equal(merged["gpt.ln_f.weight"], base.state_dict["gpt.ln_f.weight"])  # not trained in an adapter run
    assert not torch.equal(merged["gpt.blocks.0.attn.qkv.weight"], base.state_dict["gpt.blocks.0.attn.qkv.weight"])
    assert saved.path.stat().st_size < base.path.stat().st_size / 2


def test_merged_weights_load_strictly_and_give_the_adapted_models_logits(lora_ws: Path) -> None:
    result = _lora_run(lora_ws, "merge")
    saved = load_checkpoint(result.last_checkpoint)
    base = load_checkpoint(lora_ws / "checkpoints" / "en_plus.pt")
    config = dict(saved.meta["model_config"], text_rows=saved.meta["rows"])
    published = build_model("lm", config)
    published.load_state_dict(merged_state_dict(base.state_dict, saved.state_dict, saved.meta["adapter"]), strict=True)
    family = get_model_family("linguaforge")
    adapted = build_model("lm", config)
    adapted.load_state_dict(full_weights(base.state_dict, saved.state_dict, saved.meta["adapter"]["frozen_rows"]))
    inject_lora(adapted, family, AdapterConfig(**LORA), "test")
    load_lora(adapted, saved.state_dict, "test")
    ids = torch.randint(0, saved.meta["rows"], (2, 12), generator=torch.Generator().manual_seed(0))
    published.eval(), adapted.eval()
    with torch.no_grad():
        want, got = adapted(ids), published(ids)
    want = want["logits"] if isinstance(want, dict) else want
    got = got["logits"] if isinstance(got, dict) else got
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_lora_resume_continues_exactly(lora_ws: Path) -> None:
    _lora_run(lora_ws, "straight")
    _lora_run(lora_ws, "paused", max_steps=3)
    second = _lora_run(lora_ws, "paused", resume="auto")
    assert second.step == 6 and second.info["resumed_from"].endswith("step_0000003.pt")
    straight, paused = _metrics(lora_ws, "straight"), _metrics(lora_ws, "paused")
    for step in (4, 5, 6):
        assert paused[step]["loss"] == pytest.approx(straight[step]["loss"], rel=1e-5, abs=1e-6)
    a = load_checkpoint(lora_ws / "runs" / "straight" / "checkpoints" / "step_0000006.pt").state_dict
    b = load_checkpoint(second.last_checkpoint).state_dict
    assert set(a) == set(b) and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_lora_resume_after_the_vocabulary_grew_extends_rows_and_remaps_adam(lora_ws: Path) -> None:
    _lora_run(lora_ws, "grow", max_steps=3)
    result = _train(lora_ws, "grow", resume="auto", tokenizer="tokenizers/en_more.json", base_checkpoint="checkpoints/en_plus.pt",
                    adapter=LORA, optim={"weight_decay": 0.1, "lr": 1.0e-2})
    assert result.state == "finished" and result.step == 6
    final = load_checkpoint(result.last_checkpoint)
    assert final.meta["rows"] == N_BASE + len(NEW_WORDS) + len(MORE_WORDS)
    assert final.state_dict["text_embedding.weight_new"].shape[0] == len(NEW_WORDS) + len(MORE_WORDS)
    assert final.extra["row_warmup"]["rows"] == {name: len(NEW_WORDS) for name in
                                                 ("text_embedding.weight_new", "text_head.weight_new", "text_head.bias_new")}
    assert result.base_rows_sha256["start"] == result.base_rows_sha256["now"]


@pytest.mark.parametrize("adapter, needle", [
    ({"kind": "lora", "rank": 0}, "adapter.rank: 0"),
    ({"kind": "lora", "alpha": -1}, "adapter.alpha: -1"),
    ({"kind": "lora", "dropout": 1.5}, "adapter.dropout: 1.5"),
    ({"kind": "dora"}, "adapter.kind: 'dora'"),
    ({"kind": "lora", "targets": [""]}, "adapter.targets"),
])
def test_bad_adapter_values_are_refused_naming_the_key(adapter: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        run_config_from_dict({"name": "x", "adapter": adapter}, "run.yaml")


def test_a_target_the_model_lacks_fails_before_training(lora_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lm_config(lora_ws, "bad-target", tokenizer="tokenizers/en_plus.json", base_checkpoint="checkpoints/en_plus.pt",
                     adapter={**LORA, "targets": ["q_proj"]})
    assert main(["doctor", "--config", str(path)]) == 2
    out = capsys.readouterr()
    assert "adapter.targets" in out.out + out.err and "q_proj" in out.out + out.err
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "q_proj" in err and "Traceback" not in err
    assert not (lora_ws / "runs" / "bad-target" / "checkpoints").exists()


def test_export_merge_writes_a_strict_published_state_dict_and_a_peft_adapter(lora_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file

    result = _lora_run(lora_ws, "export")
    out = lora_ws / "export"
    assert main(["export", "--checkpoint", str(result.last_checkpoint), "--output", str(out)]) == 2
    assert "--merge" in capsys.readouterr().err and not out.exists()
    base = lora_ws / "checkpoints" / "en_plus.pt"
    assert main(["export", "--checkpoint", str(base), "--output", str(out), "--merge"]) == 2
    assert "not an adapter checkpoint" in capsys.readouterr().err and not out.exists()
    (lora_ws / "a_file").write_text("x")
    assert main(["export", "--checkpoint", str(result.last_checkpoint), "--output", str(lora_ws / "a_file"), "--merge"]) == 2
    assert "a_file" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(result.last_checkpoint), "--output", str(out), "--merge"]) == 0
    merged = load_checkpoint(out / "merged.safetensors")
    assert merged.meta["adapter"] is None and merged.meta["parent"] == load_checkpoint(result.last_checkpoint).sha256
    config = dict(merged.meta["model_config"], text_rows=merged.meta["rows"])
    published = build_model("lm", config)
    published.load_state_dict(merged.state_dict, strict=True)
    # peft users: the published model with the trained rows, then PeftModel.from_pretrained on peft_adapter/
    plain = build_model("lm", config)
    rows = load_file(str(out / "peft_adapter" / "text_rows.safetensors"))
    assert set(rows) == {"text_embedding.weight", "text_head.weight", "text_head.bias"}
    plain.load_state_dict({**load_checkpoint(lora_ws / "checkpoints" / "en_plus.pt").state_dict, **rows}, strict=True)
    with_peft = PeftModel.from_pretrained(plain, str(out / "peft_adapter"))
    ids = torch.randint(0, merged.meta["rows"], (2, 12), generator=torch.Generator().manual_seed(1))
    published.eval(), with_peft.eval()
    with torch.no_grad():
        assert torch.allclose(with_peft(ids)["logits"], published(ids)["logits"], atol=1e-5)


def test_an_adapter_checkpoint_is_refused_for_generation_with_the_merge_fix(lora_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _lora_run(lora_ws, "speak")
    code = main(["generate", "--checkpoint", str(result.last_checkpoint), "--prompt", "the", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "export --checkpoint … --output DIR --merge" in err and "Traceback" not in err


def test_the_peft_adapter_files_replace_a_planted_link_and_leave_its_target_alone(tmp_path: Path) -> None:
    from peft import LoraConfig

    from core.training.adapter import write_peft_adapter

    outside = tmp_path / "outside.json"
    outside.write_text("keep me")
    folder = tmp_path / "peft_adapter"
    folder.mkdir()
    (folder / "adapter_config.json").symlink_to(outside)
    (folder / "adapter_model.safetensors").symlink_to(outside)
    trained = {"blocks.0.attn.c_attn.lora_A.default.weight": torch.ones(4, 8),
               "blocks.0.attn.c_attn.lora_B.default.weight": torch.zeros(24, 4)}
    record = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "targets": ["c_attn"], "modules": {"blocks.0.attn.c_attn": "linear"}}
    written = write_peft_adapter(trained, record, folder, "base.pt")
    assert outside.read_text() == "keep me"
    assert all(path.is_file() and not path.is_symlink() for path in written)
    config = LoraConfig.from_pretrained(str(folder))
    assert (config.r, config.lora_alpha, set(config.target_modules)) == (4, 8.0, {"c_attn"})
