"""A Sesame CSM model folder of random-initialised REAL transformers classes at reduced size, in the
`sesame/csm-1b` layout, with a tokenizer in the Llama-3 layout.

The tokenizer is built here, offline, the way Llama-3's is laid out: a byte-level BPE (Llama-3's split
regex, then bytes; `ignore_merges`) learnt on the built-in English sentences with `REGULAR` regular ids,
then 256 special tokens after them — `<|begin_of_text|>`, `<|end_of_text|>`, CSM's `<|AUDIO|>` and
`<|audio_eos|>` (Llama-3's first two reserved tokens, renamed by the CSM release), then
`<|reserved_special_token_N|>` — as `added_tokens`, exactly where Llama-3's 128,000–128,255 sit.

The model is `CsmForConditionalGeneration` from a reduced `CsmConfig` (backbone 2 × 64, depth decoder
1 × 32, `CODEBOOKS` codebooks of `CODEBOOK_SIZE` codes + 3, Mimi with 2 × 32 transformers and the
published strides, so 12.5 frames per second at 24 kHz as `CsmProcessor` counts them; its codebooks' centroids
random, as Mimi's own initialisation leaves them at zero), saved with
`save_pretrained` (config.json, generation_config.json, model.safetensors) beside the processor's files
(tokenizer.json, tokenizer_config.json, preprocessor_config.json, chat_template.jinja). The folder is
built once per session and copied to each caller.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from tests.artefacts import built_once

REGULAR = 1000
SPECIALS = 256
TEXT_ROWS = REGULAR + SPECIALS
CODEBOOKS = 4
CODEBOOK_SIZE = 64
#: Llama-3's pre-tokenizer split (tokenizer.json of meta-llama/Llama-3.2-1B)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
#: the CSM release's chat template: each turn `<bos>[speaker]text<eos>`, then its audio when it has one
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- bos_token }}{{- '[' + message['role'] + ']' }}"
    "{{- message['content'][0]['text'] }}{{- eos_token }}"
    "{%- if message['content'] | length > 1 %}{{- '<|AUDIO|><|audio_eos|>' }}{%- endif %}{%- endfor %}"
)


def special_names() -> list[str]:
    """Return the 256 special tokens after the regular ids, in id order."""
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|AUDIO|>", "<|audio_eos|>"]
    return named + [f"<|reserved_special_token_{i}|>" for i in range(2, SPECIALS - 2)]


def llama3_tokenizer_json(regular: int = REGULAR) -> str:
    """Return a tokenizer.json text in the Llama-3 layout: byte-level BPE of `regular` ids learnt on the
    built-in English sentences, then the 256 special tokens as added tokens at `regular`…`regular + 255`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from core.data.sample_text import ENGLISH_SENTENCES

    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=regular, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(list(ENGLISH_SENTENCES), trainer)
    spec = json.loads(tokenizer.to_str())
    assert len(spec["model"]["vocab"]) == regular, len(spec["model"]["vocab"])
    spec["added_tokens"] = [{"id": regular + i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, name in enumerate(special_names())]
    return json.dumps(spec, ensure_ascii=False)


def write_llama3_tokenizer(path: Path) -> Path:
    """Write the Llama-3-layout tokenizer.json to `path`; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(llama3_tokenizer_json(), encoding="utf-8")
    return path


def reduced_config(text_rows: int = TEXT_ROWS, hidden: int = 64) -> Any:
    """Return a reduced `CsmConfig` (its Mimi codec too) with `text_rows` text rows, ids as CSM-1B lays them out."""
    from transformers import CsmConfig, MimiConfig

    mimi = MimiConfig(hidden_size=32, num_filters=4, num_residual_layers=1, codebook_size=CODEBOOK_SIZE, codebook_dim=16, vector_quantization_hidden_dimension=16,
                      num_quantizers=CODEBOOKS, num_semantic_quantizers=1, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, head_dim=16, intermediate_size=64, sliding_window=50, upsample_groups=32)
    depth = {"num_codebooks": CODEBOOKS, "backbone_hidden_size": hidden, "vocab_size": CODEBOOK_SIZE + 3,
             "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1, "max_position_embeddings": CODEBOOKS + 1}
    return CsmConfig(num_codebooks=CODEBOOKS, vocab_size=CODEBOOK_SIZE + 3, text_vocab_size=text_rows, hidden_size=hidden,
                     intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=512, bos_token_id=REGULAR, pad_token_id=REGULAR + 2,
                     audio_token_id=REGULAR + 2, audio_eos_token_id=REGULAR + 3, codebook_pad_token_id=CODEBOOK_SIZE + 2,
                     codebook_eos_token_id=0, depth_decoder_config=depth, codec_config=mimi.to_dict())


def write_processor(folder: Path, tokenizer_json: str) -> None:
    """Write the processor files of a CSM folder (tokenizer, Encodec feature extractor at 24 kHz, chat template)."""
    from transformers import CsmProcessor, EncodecFeatureExtractor, PreTrainedTokenizerFast
    from tokenizers import Tokenizer

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json), bos_token="<|begin_of_text|>",
                                        eos_token="<|end_of_text|>", pad_token="<|AUDIO|>")
    CsmProcessor(EncodecFeatureExtractor(feature_size=1, sampling_rate=24000), tokenizer,
                 chat_template=CHAT_TEMPLATE).save_pretrained(folder)


def random_centroids(mimi: Any) -> None:
    """Give a random-initialised Mimi's codebooks random centroids (Mimi initialises them at zero: every frame would
    be code 0)."""
    for name, buffer in mimi.named_buffers():
        if name.endswith("codebook.embed_sum"):
            buffer.copy_(torch.randn_like(buffer))


def reduced_mimi(**changes: Any) -> Any:
    """Return the reduced folder's `MimiModel` (its codec_config with `changes`) random-initialised, in eval mode."""
    from transformers import MimiConfig, MimiModel

    torch.manual_seed(0)
    mimi = MimiModel(MimiConfig.from_dict({**reduced_config().codec_config.to_dict(), **changes}))
    random_centroids(mimi)
    return mimi.eval()


def _build(folder: Path) -> None:
    from transformers import CsmForConditionalGeneration

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    model = CsmForConditionalGeneration(reduced_config())
    random_centroids(model.codec_model)
    model.save_pretrained(folder)
    write_processor(folder, llama3_tokenizer_json())


def _reduced_folder() -> Path:
    return built_once("csm-model", {}, [Path(__file__)], _build, ["transformers", "tokenizers"])


def make_csm_folder(dest: Path) -> Path:
    """Copy the session's reduced CSM folder (sesame/csm-1b layout) to `dest`; return it."""
    shutil.copytree(_reduced_folder(), dest, dirs_exist_ok=True)
    return dest


def merged_amharic_tokenizer() -> Path:
    """Return the session's `am.json` (+ its report): the reduced folder's Llama-3-layout tokenizer merged with
    Amharic pieces (byte-level BPE extension, English protected), merged once per session."""
    from core.data.sample_text import AMHARIC_SENTENCES
    from core.tokenizers.hf_merge import merge_hf_tokenizer

    def merge(folder: Path) -> None:
        merge_hf_tokenizer(_reduced_folder() / "tokenizer.json", folder / "am.json",
                           corpus_lines=list(AMHARIC_SENTENCES[:-40]), vocab_size=600)

    return built_once("csm-am", {}, [Path(__file__)], merge, ["transformers", "tokenizers"]) / "am.json"


def csm_workspace(root: Path, per_language: int = 4) -> Path:
    """Fill the workspace `root`: the reduced folder (`models/csm`), `per_language` Amharic espeak clips of two voices
    (`datasets/am`), `tokenizers/am.json` (`merged_amharic_tokenizer`) and `checkpoints/csm_am.safetensors` (the
    folder's model.safetensors with embed_text_tokens grown to it by `embeddings extend`, new rows the mean); return it."""
    from core.training.embeddings import extend_checkpoint
    from tests.data_helpers import make_espeak_dataset

    model_dir = make_csm_folder(root / "models" / "csm")
    make_espeak_dataset(root / "datasets" / "am", per_language=per_language, languages=("am",))
    (root / "tokenizers").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(merged_amharic_tokenizer(), root / "tokenizers" / "am.json")
    (root / "checkpoints").mkdir(parents=True, exist_ok=True)
    extend_checkpoint(model_dir / "model.safetensors", model_dir / "tokenizer.json", root / "tokenizers" / "am.json",
                      root / "checkpoints" / "csm_am.safetensors", family="csm", init="mean")
    return root
