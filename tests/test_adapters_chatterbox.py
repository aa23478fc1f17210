"""LoRA on Chatterbox T3 (reduced published class, Llama inside): base rows bit-identical, exact resume,
a merged state dict that loads strictly into the published `T3` and gives the unmerged adapter's logits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.config import load_settings
from core.recipe import train
from core.training.run_config import run_config_from_dict
from tests.adapter_helpers import LORA, assert_adapter_only, assert_close_logits, assert_same_trained_tensors, merged_and_adapted
from tests.chatterbox_helpers import REDUCED, with_pieces
from tests.test_family_chatterbox import _config, ws  # noqa: F401 — the module workspace fixture

torch.set_num_threads(2)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _lora(name: str, steps: int) -> dict[str, Any]:
    return _config(name, adapter=LORA, schedule={"max_steps": 4, "val_every": steps, "save_every": steps, "keep_last": 2, "log_every": 1})


def test_chatterbox_lora_keeps_base_rows_resumes_exactly_and_merges_into_the_published_t3(ws: Path) -> None:  # noqa: F811
    from chatterbox.models.t3 import T3

    from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams

    settings = load_settings()
    straight = train(run_config_from_dict(_lora("cb-lora", 4), "a.yaml"), settings=settings)
    assert straight.state == "finished" and straight.base_rows_sha256["start"] == straight.base_rows_sha256["now"] is not None
    train(run_config_from_dict(_lora("cb-lora-paused", 2), "b.yaml"), settings=settings, max_steps=2)
    resumed = train(run_config_from_dict(_lora("cb-lora-paused", 2), "b.yaml"), settings=settings, resume="auto")
    assert resumed.step == 4
    assert_same_trained_tensors(Path(straight.last_checkpoint), Path(resumed.last_checkpoint))
    record = assert_adapter_only(Path(straight.last_checkpoint), {"text_emb.weight_new", "text_head.weight_new"})
    assert any(name.endswith("self_attn.q_proj") for name in record["modules"]) and set(record["modules"].values()) == {"linear"}

    def published(rows: int) -> torch.nn.Module:
        return T3(t3_hparams(ChatterboxConfig(text_tokens_dict_size=rows, **REDUCED)))

    rows = load_checkpoint(straight.last_checkpoint).meta["rows"]
    merged, adapted = merged_and_adapted(Path(straight.last_checkpoint), ws / "checkpoints" / "t3_am.safetensors", "chatterbox",
                                         published, ChatterboxConfig(text_tokens_dict_size=rows, **REDUCED))
    ids = torch.randint(0, rows, (2, 9), generator=torch.Generator().manual_seed(0))

    def logits(model: torch.nn.Module) -> torch.Tensor:
        with torch.no_grad():
            hidden = model.tfmr(inputs_embeds=model.text_emb(ids)).last_hidden_state
            return torch.cat([model.text_head(hidden), model.speech_head(hidden)], dim=-1)

    assert_close_logits(logits(merged), logits(adapted))


def test_chatterbox_lora_resumes_after_the_vocabulary_grew(ws: Path) -> None:  # noqa: F811
    from core.tokenizers.tokenizer import load_tokenizer

    settings = load_settings()
    train(run_config_from_dict(_lora("cb-lora-grow", 2), "g.yaml"), settings=settings, max_steps=2)
    old = load_tokenizer(ws / "tokenizers" / "am.json")
    with_pieces(old.path, ["ሰላምታ", "qzxw"], ws / "tokenizers" / "am_grown.json")
    grown = run_config_from_dict({**_lora("cb-lora-grow", 2), "tokenizer": "tokenizers/am_grown.json"}, "g2.yaml")
    result = train(grown, settings=settings, resume="auto")
    assert result.state == "finished" and result.step == 4
    assert result.base_rows_sha256["start"] == result.base_rows_sha256["now"] is not None
    saved = load_checkpoint(result.last_checkpoint)
    assert saved.meta["rows"] == old.size + 2
    assert saved.state_dict["text_emb.weight_new"].shape[0] == old.size + 2 - saved.meta["adapter"]["frozen_rows"]
