"""CSM's Llama-3 tokenizer extended to Amharic with the byte-level BPE extension (`tokenizer merge`), then
CSM's `embed_text_tokens` grown to it (`embeddings extend --family csm`).

The base is built here in the Llama-3 layout (tests/csm_helpers.py: byte-level BPE behind Llama-3's split
regex, `REGULAR` regular ids, then 256 special tokens — `<|begin_of_text|>`, `<|end_of_text|>`, CSM's
`<|AUDIO|>` / `<|audio_eos|>`, reserved ones — as added tokens). The merge keeps every base id, merge and
special, puts the new ids after the specials, tokenises English exactly as before (alone and around the
specials) and at least halves Amharic's tokens per character on held-out sentences. The grown checkpoint keeps
every base row bit for bit, makes the new rows by fvt or mean, and the family builds and loads it with the base
rows frozen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.families import get_family
from core.families.csm.layout import layout_ids, segment_text_ids
from core.families.csm.model import CsmModelConfig, module_state_dict, read_folder_config
from core.families.registry import get_model_family
from core.tokenizers.report import measure_drift
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.vocab import first_difference
from core.training.embeddings import extend_state_dict
from tests.csm_helpers import REGULAR, SPECIALS, TEXT_ROWS, make_csm_folder, merged_amharic_tokenizer, special_names

HELD_OUT = 40
pytestmark = pytest.mark.slow  # the merge with its English drift check: about a minute on a loaded 2-core machine


@pytest.fixture(scope="module")
def merged(module_tmp: Path) -> dict[str, Any]:
    folder = make_csm_folder(module_tmp / "csm")
    output = merged_amharic_tokenizer()                  # the sentences but the last HELD_OUT, vocabulary 600
    report = json.loads(output.with_suffix(".report.json").read_text(encoding="utf-8"))
    return {"folder": folder, "base": folder / "tokenizer.json", "report": report, "output": output}


def test_the_base_is_in_the_llama3_layout(merged: dict[str, Any]) -> None:
    base = load_tokenizer(merged["base"])
    assert base.size == TEXT_ROWS == REGULAR + SPECIALS and base.byte_level
    assert [base.encode(name) for name in special_names()] == [[REGULAR + i] for i in range(SPECIALS)]
    assert max(max(base.encode(line)) for line in ENGLISH_SENTENCES) < REGULAR      # text never reaches a special


def test_every_base_id_merge_and_special_is_kept_and_new_ids_follow_the_specials(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    base_spec = json.loads(merged["base"].read_text(encoding="utf-8"))
    spec = json.loads(merged["output"].read_text(encoding="utf-8"))
    assert first_difference(base, new) is None
    assert spec["model"]["merges"][: len(base_spec["model"]["merges"])] == base_spec["model"]["merges"]
    assert len(spec["model"]["merges"]) > len(base_spec["model"]["merges"])
    for added in base_spec["added_tokens"]:
        assert new.encode(added["content"]) == [added["id"]]
    known = set(base.pieces())
    assert min(i for i in range(new.size) if new.piece(i) not in known) == TEXT_ROWS  # after the 256 specials
    report = merged["report"]
    assert report["added_tokens_moved"] == [] and report["ids_without_token"] == 0 and new.size > TEXT_ROWS
    assert layout_ids(new, read_folder_config(merged["folder"])) == layout_ids(base, read_folder_config(merged["folder"]))


def test_english_tokenises_exactly_as_before_alone_and_around_the_specials(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    lines = list(ENGLISH_SENTENCES)
    segments = [f"<|begin_of_text|>[0]{line}<|end_of_text|><|AUDIO|><|AUDIO|><|audio_eos|>" for line in lines]
    assert measure_drift(base, new, lines + segments).lines_changed == 0
    assert all(segment_text_ids(new, line) == segment_text_ids(base, line) for line in lines)
    drift = merged["report"]["base_drift"]
    assert drift["lines_changed"] == 0 and drift["added_tokens"]["tokens"] == SPECIALS
    assert drift["added_tokens"]["lines_changed"] == 0


def test_amharic_costs_at_most_half_the_tokens_per_character(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    held_out = list(AMHARIC_SENTENCES[-HELD_OUT:])
    characters = sum(len(line) for line in held_out)
    before = sum(len(base.encode(line)) for line in held_out) / characters
    after = sum(len(new.encode(line)) for line in held_out) / characters
    print(f"\nheld-out Amharic tokens per character: Llama-3 layout {before:.3f}, merged {after:.3f} "
          f"({new.size - base.size} ids added)")
    assert before > 2.0 and after <= before / 2
    assert all(new.decode(new.encode(line)) == line for line in held_out)


def test_the_grown_rows_keep_every_base_row_and_load_with_them_frozen(merged: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    folder = merged["folder"]
    family = get_model_family("csm")
    config = CsmModelConfig(base.size, read_folder_config(folder))
    published = module_state_dict(config.csm_config(), load_file(str(folder / "model.safetensors")), "model.safetensors")
    key = get_family("csm").embedding_key
    for init in ("fvt", "mean"):
        grown, report = extend_state_dict(published, get_family("csm"), base, new, init=init)
        assert tuple(grown[key].shape) == (new.size, 64) and torch.equal(grown[key][: base.size], published[key])
        assert report["tensors"] == {key: {"before": [base.size, 64], "after": [new.size, 64]}}
        made = grown[key][base.size:]
        if init == "mean":
            assert torch.allclose(made, published[key].double().mean(0).float().expand_as(made))
        else:
            assert report["init"]["fvt"] == new.size - base.size              # every new piece spelt by the base's bytes
            first = new.piece(base.size)                                    # Ge'ez bytes the base never merged:
            spelled = [base.raw.token_to_id(byte) for byte in first]         # each its own base id
            assert len(spelled) >= 2 and [t.id for t in base.raw.model.tokenize(first)] == spelled
            assert torch.allclose(made[0], published[key][spelled].double().mean(0).float())
    model = family.build_model(CsmModelConfig(new.size, config.config).to_dict(), frozen_rows=base.size)
    family.load_weights(model, grown, "grown", new)
    assert torch.equal(model.embed_text_tokens.weight_base, published[key])
    assert [name for name, p in model.named_parameters() if name.startswith("embed_text_tokens.")] == ["embed_text_tokens.weight_new"]
