"""A Chatterbox-Turbo model folder of random-initialised REAL classes at reduced size, in the published layout,
with GPT-2's real tokenizer.

The tokenizer is Turbo's: GPT-2's 50,257 ids (recovered from the real ranks in
`tests/fixtures/gpt2/gpt2.tiktoken` by transformers' `TikTokenConverter`) plus 19 bracketed tags at
50,257–50,275, written as the release ships it — `vocab.json`, `merges.txt`, `added_tokens.json`,
`special_tokens_map.json`, `tokenizer_config.json` (`add_prefix_space: false`), no `tokenizer.json`.
Which tag sits at which of those ids is not known offline; the order here is the community's list.

T3 is the published class built the Turbo way with a GPT-2 backbone of 2 layers × 256 and 1,024
positions (the published one is 24 × 1024 with 8,196; GPT-2's unread token table keeps its 50,276
rows), 50,276 text rows: narrower backbones memorise the clips' few, often repeated S3 codes too
slowly for the decode-back proof. `ve.safetensors` is the full VoiceEncoder; `s3gen_meanflow.safetensors`
holds only the S3 tokenizer's `tokenizer.*` tensors at width 128 with one block (features need no more). The folder is
built once per session and copied to each caller. `make_turbo_speech_folder` adds a random full
`S3Gen(meanflow=True)` in the published layout (floating tensors in bf16: `load_state_dict` copies
them into its fp32 weights, strictly) for the tests that speak.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from tests.fixture_paths import GPT2_RANKS

END_OF_TEXT = "<|endoftext|>"
TAGS = ("[angry]", "[fear]", "[surprised]", "[whispering]", "[advertisement]", "[dramatic]", "[narration]", "[crying]",
        "[happy]", "[sarcastic]", "[clear throat]", "[sigh]", "[shush]", "[cough]", "[groan]", "[sniff]", "[gasp]",
        "[chuckle]", "[laugh]")
BASE_ROWS = 50276
REDUCED = {"n_layers": 2, "hidden_size": 256, "n_positions": 1024}


def gpt2_spec() -> dict[str, Any]:
    """Return the tokenizer.json mapping of GPT-2's byte-level BPE plus Turbo's 19 tags (50,276 ids)."""
    from tests.artefacts import built_once

    def build(folder: Path) -> None:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
        from transformers.convert_slow_tokenizer import TikTokenConverter

        class RankFile(TikTokenConverter):
            @staticmethod
            def load_tiktoken_bpe(path: str) -> dict[bytes, int]:
                lines = Path(path).read_text(encoding="ascii").split("\n")
                return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}

        vocab, merges = RankFile().extract_vocab_merges_from_model(str(GPT2_RANKS))
        tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        tokenizer.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])
        tokenizer.add_tokens([AddedToken(tag, normalized=False) for tag in TAGS])
        tokenizer.save(str(folder / "tokenizer.json"))

    built = built_once("turbo-gpt2", {}, [Path(__file__), GPT2_RANKS], build, ["tokenizers", "transformers"])
    return json.loads((built / "tokenizer.json").read_text(encoding="utf-8"))


def write_gpt2_tokenizer_folder(dest: Path) -> Path:
    """Write Turbo's tokenizer into `dest` as the release ships it (GPT-2's slow files); return `dest`."""
    spec = gpt2_spec()
    dest.mkdir(parents=True, exist_ok=True)
    vocab = dict(spec["model"]["vocab"])
    vocab[END_OF_TEXT] = 50256
    (dest / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    (dest / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (dest / "added_tokens.json").write_text(json.dumps({tag: 50257 + i for i, tag in enumerate(TAGS)}), encoding="utf-8")
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT}
    (dest / "special_tokens_map.json").write_text(json.dumps(special), encoding="utf-8")
    config = {**special, "add_prefix_space": False, "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"}
    (dest / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return dest


def _build(folder: Path) -> None:
    from chatterbox.models.voice_encoder import VoiceEncoder

    from core.families.chatterbox.feature_models import build_s3_tokenizer
    from core.families.chatterbox_turbo.t3 import TurboConfig, build_turbo_t3

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    t3 = build_turbo_t3(TurboConfig(text_tokens_dict_size=BASE_ROWS, **REDUCED))
    save_file({k: v.contiguous() for k, v in t3.state_dict().items()}, str(folder / "t3_turbo_v1.safetensors"))
    save_file({k: v.contiguous() for k, v in VoiceEncoder().state_dict().items()}, str(folder / "ve.safetensors"))
    s3 = build_s3_tokenizer(128, 1)
    save_file({f"tokenizer.{k}": v.contiguous() for k, v in s3.state_dict().items()}, str(folder / "s3gen_meanflow.safetensors"))
    write_gpt2_tokenizer_folder(folder)


def _reduced_folder() -> Path:
    """The reduced folder, built once per test run and shared by the workers (tests/artefacts.py): read-only."""
    from tests.artefacts import built_once

    return built_once("turbo-model", REDUCED, [Path(__file__), GPT2_RANKS], _build,
                      ["chatterbox-light", "torch", "safetensors", "tokenizers", "transformers"])


def make_turbo_folder(dest: Path) -> Path:
    """Copy the session's reduced Turbo folder (S3 tokenizer only in s3gen_meanflow.safetensors) to `dest`; return it."""
    shutil.copytree(_reduced_folder(), dest, dirs_exist_ok=True)
    return dest


def make_turbo_speech_folder(dest: Path) -> Path:
    """Build the Turbo speech folder into `dest` — the reduced T3, VoiceEncoder and tokenizer (copies) with a random
    full `S3Gen(meanflow=True)` as `s3gen_meanflow.safetensors` — and return it."""
    from tests.chatterbox_helpers import copy_random_s3gen

    shutil.copytree(_reduced_folder(), dest, dirs_exist_ok=True)
    copy_random_s3gen(dest / "s3gen_meanflow.safetensors", meanflow=True)
    return dest


def merged_amharic_tokenizers(model_dir: Path, vocab_size: int = 600) -> Path:
    """Return the run's shared `tokenizers/` folder (read-only) holding `am.json`, its report and the AutoTokenizer folder `am/`:
    the tokenizer of `model_dir` (the session's reduced folder's, unchanged) merged with Amharic pieces and the
    [am] tag, English protected. The merge runs once per test run (it costs more than everything else a Turbo
    workspace needs) and each caller copies the result."""
    from core.data.sample_text import AMHARIC_SENTENCES
    from core.tokenizers.hf_merge import merge_hf_tokenizer

    from core.tokenizers import hf_merge
    from tests.artefacts import built_once

    def build(folder: Path) -> None:
        merge_hf_tokenizer(model_dir, folder / "am.json", corpus_lines=list(AMHARIC_SENTENCES), vocab_size=vocab_size,
                           language_tag="am")

    tokenizer_files = sorted(p for p in model_dir.iterdir() if p.is_file() and p.suffix in (".json", ".txt"))
    return built_once(f"turbo-am-{vocab_size}", {"vocab_size": vocab_size},
                      [Path(__file__), Path(hf_merge.__file__), *tokenizer_files], build, ["tokenizers"])


def extend_turbo_to_amharic(root: Path, model_dir: Path, vocab_size: int = 600) -> None:
    """Write `root/tokenizers/am.json` (+ the AutoTokenizer folder `root/tokenizers/am/`: the folder's tokenizer
    merged with Amharic pieces and the [am] tag, English protected; `merged_amharic_tokenizers`) and
    `root/checkpoints/t3_am.safetensors` (the folder's T3 extended to it, new rows the mean)."""
    from core.training.embeddings import extend_checkpoint

    shutil.copytree(merged_amharic_tokenizers(model_dir, vocab_size), root / "tokenizers", dirs_exist_ok=True)
    (root / "checkpoints").mkdir(parents=True, exist_ok=True)
    extend_checkpoint(model_dir / "t3_turbo_v1.safetensors", model_dir, root / "tokenizers" / "am.json",
                      root / "checkpoints" / "t3_am.safetensors", family="chatterbox-turbo", init="mean")


def turbo_workspace(root: Path, per_language: int = 4) -> Path:
    """Fill the workspace `root`: the reduced folder (`models/turbo`), `per_language` Amharic espeak clips of two voices
    (`datasets/am`), `tokenizers/am.json` and `checkpoints/t3_am.safetensors` (`extend_turbo_to_amharic`); return it."""
    from tests.data_helpers import make_espeak_dataset

    model_dir = make_turbo_folder(root / "models" / "turbo")
    make_espeak_dataset(root / "datasets" / "am", per_language=per_language, languages=("am",))
    extend_turbo_to_amharic(root, model_dir)
    return root
