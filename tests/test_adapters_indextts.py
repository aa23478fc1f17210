"""LoRA on IndexTTS2's UnifiedVoice (reduced published class, GPT-2 `Conv1D` inside): base rows and the extra
row bit-identical, exact resume, a merged state dict that IndexTTS2's own loader takes strictly into
`UnifiedVoice`, with the unmerged adapter's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.recipe import train
from core.training.run_config import run_config_from_dict
from tests.adapter_helpers import LORA, assert_adapter_only, assert_close_logits, assert_same_trained_tensors, merged_and_adapted
from tests.test_family_indextts import _run, _settings, folder, ws  # noqa: F401 — the module fixtures

torch.set_num_threads(2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_indextts_lora_keeps_base_rows_resumes_exactly_and_merges_into_the_published_unified_voice(
    folder: Path, ws: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    from omegaconf import OmegaConf

    from core.families.indextts.gpt import IndexTTSModelConfig
    from indextts.gpt.model_v2 import UnifiedVoice

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
    settings = _settings(folder)

    def lora(name: str, every: int):
        return run_config_from_dict(_run(name, folder, "tokenizers/am8.model", 4, adapter=LORA,
                                         schedule={"max_steps": 4, "val_every": every, "save_every": every, "log_every": 1}))

    straight = train(lora("it-lora", 4), None, settings)
    assert straight.state == "finished" and straight.base_rows_sha256["start"] == straight.base_rows_sha256["now"] is not None
    train(lora("it-lora-paused", 2), None, settings, max_steps=2)
    resumed = train(lora("it-lora-paused", 2), None, settings, resume="auto")
    assert resumed.step == 4
    assert_same_trained_tensors(Path(straight.last_checkpoint), Path(resumed.last_checkpoint))
    keys = {"text_embedding.weight_new", "text_head.weight_new", "text_head.bias_new"}
    record = assert_adapter_only(Path(straight.last_checkpoint), keys)
    assert set(record["modules"].values()) == {"conv1d"}

    saved = load_checkpoint(straight.last_checkpoint)
    gpt_config = OmegaConf.load(folder / "config.yaml").gpt

    def published(rows: int) -> torch.nn.Module:
        return UnifiedVoice(**{**gpt_config, "number_text_tokens": rows - 1})

    base = ws / "checkpoints" / "gpt_am8.pt"
    merged, adapted = merged_and_adapted(Path(straight.last_checkpoint), base, "indextts", published,
                                         IndexTTSModelConfig.from_dict(saved.meta["model_config"]))
    ids = torch.randint(0, saved.meta["rows"], (2, 9), generator=torch.Generator().manual_seed(0))

    def logits(model: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            hidden = model.final_norm(model.gpt(inputs_embeds=model.text_embedding(ids)).last_hidden_state)
            return torch.cat([model.text_head(hidden), model.mel_head(hidden)], dim=-1)

    assert_close_logits(logits(merged), logits(adapted))
    # the merged rows: base rows and the extra row are the base's bit for bit
    base_sd, merged_sd = load_checkpoint(base).state_dict, merged.state_dict()
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert torch.equal(merged_sd[key][:12000], base_sd[key][:12000]) and torch.equal(merged_sd[key][-1], base_sd[key][-1])
