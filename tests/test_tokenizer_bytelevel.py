"""`tokenizer merge` on a byte-level BPE: Chatterbox-Turbo's real tokenizer (GPT-2's 50,257 ids + 19 tags).

The base is the folder as the Turbo release ships it (GPT-2's vocab.json + merges.txt + added_tokens.json,
read through `AutoTokenizer`), built from GPT-2's real BPE ranks (tests/fixtures/gpt2). Amharic is
merged in with the `[am]` tag, English protected by default; the last 40 Amharic sentences are held out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.tokenizers.hf_merge import merge_hf_tokenizer
from core.tokenizers.report import measure_drift
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.vocab import first_difference
from tests.turbo_helpers import BASE_ROWS, TAGS, write_gpt2_tokenizer_folder

HELD_OUT = 40
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def merged(module_tmp: Path) -> dict[str, Any]:
    base = write_gpt2_tokenizer_folder(module_tmp / "turbo")
    report = merge_hf_tokenizer(base, module_tmp / "am.json", corpus_lines=list(AMHARIC_SENTENCES[:-HELD_OUT]),
                                vocab_size=600, language_tag="am")
    return {"base": base, "report": report, "output": module_tmp / "am.json"}


def _tagged(lines: list[str]) -> list[str]:
    """Each English line with a tag inside, in front and at the end, every tag used."""
    return [f"{TAGS[i % len(TAGS)]} {line[:20]} {TAGS[(i + 3) % len(TAGS)]}{line[20:]} {TAGS[(i + 7) % len(TAGS)]}"
            for i, line in enumerate(lines)]


def test_the_base_is_turbos_real_gpt2_tokenizer(merged: dict[str, Any]) -> None:
    base = load_tokenizer(merged["base"])
    assert base.size == BASE_ROWS and base.byte_level
    assert base.encode("Hello world") == [15496, 995]            # GPT-2's own ids
    assert base.encode("[laugh]") == [50257 + TAGS.index("[laugh]")] and base.encode("<|endoftext|>") == [50256]
    assert all(tok not in (base.unk_id,) for tok in base.encode(AMHARIC_SENTENCES[0]))  # bytes cover every script
    assert len(base.encode(AMHARIC_SENTENCES[0])) > 2 * len(AMHARIC_SENTENCES[0])  # ~3 byte tokens per letter


def test_amharic_costs_at_most_half_the_tokens_and_decodes_back(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    held_out = list(AMHARIC_SENTENCES[-HELD_OUT:])
    characters = sum(len(line) for line in held_out)
    before = sum(len(base.encode(line)) for line in held_out) / characters
    after = sum(len(new.encode(line)) for line in held_out) / characters
    print(f"\nheld-out Amharic tokens per character: GPT-2 {before:.3f}, merged {after:.3f} ({new.size - base.size} ids added)")
    assert after <= before / 2
    assert all(new.decode(new.encode(line)) == line for line in held_out)
    report = merged["report"]
    assert report["tokens_per_character"]["merged"] <= report["tokens_per_character"]["base"] / 2


def test_no_base_id_merge_or_added_token_moves_and_no_id_is_empty(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    base_spec = json.loads(base.raw.to_str())
    spec = json.loads(merged["output"].read_text(encoding="utf-8"))
    assert first_difference(base, new) is None                              # every base id keeps its piece
    assert spec["model"]["merges"][: len(base_spec["model"]["merges"])] == base_spec["model"]["merges"]
    for added in base_spec["added_tokens"]:
        assert new.raw.token_to_id(added["content"]) == added["id"] and new.encode(added["content"]) == [added["id"]]
    assert all(new.piece(i) for i in range(new.size))                       # no id without a token
    report = merged["report"]
    tag = report["language_tag_id"]
    assert tag == new.size - 1 >= BASE_ROWS and new.encode("[am]") == [tag]
    assert report["added_tokens_moved"] == [] and report["ids_without_token"] == 0
    known = set(base.pieces())
    assert min(i for i in range(new.size) if new.piece(i) not in known) == BASE_ROWS


def test_english_with_and_without_tags_tokenises_exactly_as_before(merged: dict[str, Any]) -> None:
    base, new = load_tokenizer(merged["base"]), load_tokenizer(merged["output"])
    lines = list(ENGLISH_SENTENCES) + _tagged(list(ENGLISH_SENTENCES))
    assert measure_drift(base, new, lines).lines_changed == 0
    drift = merged["report"]["base_drift"]
    assert drift["lines_changed"] == 0 and drift["lines_checked"] > 10_000
    assert drift["added_tokens"]["tokens"] == len(TAGS) + 1                 # the tags and <|endoftext|>
    assert drift["added_tokens"]["lines_checked"] > 10_000 and drift["added_tokens"]["lines_changed"] == 0


def test_the_merge_is_saved_as_an_autotokenizer_folder_of_the_new_length(merged: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    folder = Path(merged["report"]["tokenizer_folder"])
    new = load_tokenizer(merged["output"])
    loaded = AutoTokenizer.from_pretrained(folder)
    assert len(loaded) == new.size == merged["report"]["new_size"] and loaded.eos_token == "<|endoftext|>"
    for line in ["[am]" + AMHARIC_SENTENCES[-1], _tagged([ENGLISH_SENTENCES[2]])[0]]:
        assert loaded(line).input_ids == new.encode(line)
    assert load_tokenizer(folder).fingerprint == new.fingerprint            # the folder is the same tokenizer
