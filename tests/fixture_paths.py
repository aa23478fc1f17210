"""Where the tests' real published fixture files live: `tests/fixtures/` in this repository (their sources
and licences are in `tests/fixtures/README.md`). Tests copy them before changing anything."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
INDEXTTS_BPE = FIXTURES / "indextts2" / "bpe.model"
INDEXTTS_CONFIG = FIXTURES / "indextts2" / "config.yaml"
CHATTERBOX_TOKENIZER = FIXTURES / "chatterbox" / "tokenizer_mtl_2454.json"
GPT2_RANKS = FIXTURES / "gpt2" / "gpt2.tiktoken"
