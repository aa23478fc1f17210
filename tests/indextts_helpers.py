"""A reduced IndexTTS2 model folder: random-initialised modules of the REAL published classes.

`build_model_folder(dest)` writes what LinguaForge reads from a user's IndexTTS2 folder, with
IndexTTS2's file names and `config.yaml` layout (the published config with the widths shrunk):
`config.yaml`, `gpt.pth` (`UnifiedVoice`, 2 layers × 64 wide, V = 12,000 from the real
`bpe.model`, so 12,001 text rows), `bpe.model`, `wav2vec2bert_stats.pt`, `w2v-bert-2.0/` (a
`Wav2Vec2BertModel` 1024 wide as UnifiedVoice's conformer input requires, with W2V_LAYERS layers
instead of 24: 17 layers of width 1024 would be a 485 MB file and a minute of CPU per session, so
the tests read layer W2V_LAYERS through the `families.indextts.w2v_layer` setting, default 17) and `semantic_codec/model.safetensors` (MaskGCT `RepCodec`,
8192 codes, a one-layer Vocos). Speech-side files (`s2mel.pth`, CAMPPlus, BigVGAN) are written by
`add_speech_models` for the synthesis test only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import yaml

from tests.fixture_paths import INDEXTTS_BPE, INDEXTTS_CONFIG

W2V_LAYERS = 2
SMALL_CONFORMER = {"output_size": 32, "linear_units": 64, "attention_heads": 2, "num_blocks": 1, "input_layer": "conv2d2", "perceiver_mult": 2}
SMALL_CODEC = {"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 32, "vocos_intermediate_dim": 64, "vocos_num_layers": 1}


def small_config(model_dim: int = 64, heads: int = 4, layers: int = 2) -> dict:
    """Return the published config.yaml with the GPT, conformers and codec shrunk (limits 600/1815 kept)."""
    config = yaml.safe_load(INDEXTTS_CONFIG.read_text(encoding="utf-8"))
    config["gpt"].update(model_dim=model_dim, heads=heads, layers=layers)
    config["gpt"]["condition_module"] = dict(SMALL_CONFORMER)
    config["gpt"]["emo_condition_module"] = dict(SMALL_CONFORMER)
    config["semantic_codec"] = dict(SMALL_CODEC)
    return config


def _gpt_kwargs(config: dict) -> dict:
    return dict(config["gpt"])


def write_w2v_bert(dest: Path) -> None:
    """Save a random W2V_LAYERS-layer Wav2Vec2BertModel and its SeamlessM4T feature extractor to `dest`."""
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    config = Wav2Vec2BertConfig(
        hidden_size=1024, num_hidden_layers=W2V_LAYERS, num_attention_heads=2, intermediate_size=16,
        conv_depthwise_kernel_size=3, add_adapter=False,
    )
    torch.manual_seed(1)
    Wav2Vec2BertModel(config).eval().save_pretrained(dest)
    SeamlessM4TFeatureExtractor().save_pretrained(dest)


PACKAGES = ["indextts2-inference", "torch", "transformers", "safetensors", "omegaconf"]


def build_model_folder(dest: Path, seed: int = 0, layers: int = 2, checkpointing: bool | None = None) -> Path:
    """Write the reduced IndexTTS2 folder to `dest` (a GPT of `layers` layers) and return it.

    `checkpointing` False writes `gpt.checkpointing: false` (UnifiedVoice's default, True, recomputes
    every block's activations in the backward pass: the same numbers, slower). The folder is built once per
    test run for each set of arguments, shared by the workers (tests/artefacts.py); `dest` gets a copy and
    torch's random state as the build left it.
    """
    from tests.artefacts import built_once, copy_artefact, leave_rng_as_built

    built = built_once("indextts-model", {"seed": seed, "layers": layers, "checkpointing": checkpointing},
                       [Path(__file__), INDEXTTS_CONFIG, INDEXTTS_BPE],
                       lambda folder: _write_model_folder(folder, seed, layers, checkpointing), PACKAGES, keep_rng=True)
    leave_rng_as_built(built)
    return copy_artefact(built, dest)


def _write_model_folder(dest: Path, seed: int, layers: int, checkpointing: bool | None) -> None:
    """Write the reduced IndexTTS2 folder (`build_model_folder`) to `dest`."""
    from safetensors.torch import save_model

    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.utils.maskgct_utils import build_semantic_codec
    from omegaconf import OmegaConf

    dest.mkdir(parents=True, exist_ok=True)
    config = small_config(layers=layers)
    if checkpointing is not None:
        config["gpt"]["checkpointing"] = checkpointing
    (dest / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    shutil.copyfile(INDEXTTS_BPE, dest / "bpe.model")
    torch.manual_seed(seed)
    gpt = UnifiedVoice(**_gpt_kwargs(config))
    torch.save(gpt.state_dict(), dest / "gpt.pth")
    torch.save({"mean": torch.randn(1024) * 0.1, "var": torch.rand(1024) + 0.5}, dest / "wav2vec2bert_stats.pt")
    write_w2v_bert(dest / "w2v-bert-2.0")
    codec = build_semantic_codec(OmegaConf.create(config["semantic_codec"]))
    (dest / "semantic_codec").mkdir(exist_ok=True)
    save_model(codec, str(dest / "semantic_codec" / "model.safetensors"))


def amharic_workspace(root: Path, folder: Path) -> Path:
    """Put 4 espeak Amharic clips (2 speakers, `datasets/am`), `tokenizers/am8.model` (the folder's bpe.model grown
    to 12,008 pieces) and `checkpoints/gpt_am8.pt` (its gpt.pth extended to them by `embeddings extend`, mean init,
    extra row moved last) into the workspace `root`, for the reduced IndexTTS2 folder `folder`; return `root`."""
    from core.training.embeddings import extend_checkpoint
    from tests.data_helpers import make_espeak_dataset
    from tests.sp_helpers import grow_to

    make_espeak_dataset(root / "datasets" / "am", per_language=4, languages=("am",))
    grow_to(folder / "bpe.model", 12008, root / "tokenizers" / "am8.model")
    extend_checkpoint(folder / "gpt.pth", folder / "bpe.model", root / "tokenizers" / "am8.model",
                      root / "checkpoints" / "gpt_am8.pt", family="indextts", init="mean")
    return root


def add_speech_models(folder: Path) -> None:
    """Add a small `s2mel.pth` (MyModel: CFM + length regulator + gpt_layer), CAMPPlus and a small BigVGAN."""
    from munch import DefaultMunch

    from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel

    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    s2mel = config["s2mel"]
    s2mel["length_regulator"]["channels"] = 32
    s2mel["DiT"].update(hidden_dim=32, num_heads=2, depth=1, content_dim=32)
    s2mel["wavenet"].update(hidden_dim=32, num_layers=1)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    model = MyModel(DefaultMunch.fromDict(s2mel), use_gpt_latent=True)
    torch.save({"net": {k: m.state_dict() for k, m in model.models.items()}}, folder / "s2mel.pth")
    torch.save(CAMPPlus(feat_dim=80, embedding_size=192).state_dict(), folder / "campplus_cn_common.bin")
    h = {
        "resblock": "1", "num_mels": 80, "upsample_rates": [4, 4, 4, 4], "upsample_kernel_sizes": [8, 8, 8, 8],
        "upsample_initial_channel": 32, "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3, 5]],
        "activation": "snakebeta", "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False,
        "sampling_rate": 22050, "hop_size": 256,
    }
    (folder / "bigvgan").mkdir(exist_ok=True)
    (folder / "bigvgan" / "config.json").write_text(json.dumps(h), encoding="utf-8")
    from indextts.s2mel.modules.bigvgan.bigvgan import load_hparams_from_json

    vocoder = BigVGAN(load_hparams_from_json(folder / "bigvgan" / "config.json"))
    torch.save({"generator": vocoder.state_dict()}, folder / "bigvgan" / "bigvgan_generator.pt")


def build_speech_folder(base: Path, dest: Path, seed: int = 0, checkpointing: bool | None = None) -> Path:
    """Write a folder for synthesis: the base folder's feature models (linked), a 1-layer GPT at the
    published width 1280 (s2mel's `gpt_layer` takes 1280-wide latents) and small speech models
    (`checkpointing` as `build_model_folder` takes it). The models are built once per test run for each set
    of arguments, shared by the workers (tests/artefacts.py); `dest` gets copies and torch's random state
    as the build left it."""
    from tests.artefacts import built_once, copy_artefact, leave_rng_as_built

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("bpe.model", "wav2vec2bert_stats.pt", "w2v-bert-2.0", "semantic_codec"):
        (dest / name).symlink_to(base / name)
    built = built_once("indextts-speech", {"seed": seed, "checkpointing": checkpointing},
                       [Path(__file__), INDEXTTS_CONFIG],
                       lambda folder: _write_speech_models(folder, seed, checkpointing), PACKAGES, keep_rng=True)
    leave_rng_as_built(built)
    return copy_artefact(built, dest)


def _write_speech_models(dest: Path, seed: int, checkpointing: bool | None) -> None:
    """Write `build_speech_folder`'s own files (config.yaml, gpt.pth, the speech models) to `dest`."""
    from indextts.gpt.model_v2 import UnifiedVoice

    config = small_config(model_dim=1280, heads=20, layers=1)
    if checkpointing is not None:
        config["gpt"]["checkpointing"] = checkpointing
    (dest / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    torch.manual_seed(seed)
    torch.save(UnifiedVoice(**_gpt_kwargs(config)).state_dict(), dest / "gpt.pth")
    add_speech_models(dest)


def amharic_tokenizer(base: Path, texts: list[str], dest: Path) -> Path:
    """Write a prefix extension of `base` (IndexTTS2's bpe.model) with each Ethiopic character of `texts`
    as a piece, alone and word-initial, so the texts get distinct ids of different lengths; return `dest`."""
    from core.families.indextts.gpt import IndexTextNormalizer
    from tests.sp_helpers import append_pieces

    normalizer = IndexTextNormalizer()
    chars = sorted({c for text in texts for c in normalizer.normalize(text) if not c.isspace() and not c.isascii()})
    return append_pieces(base, [f"▁{c}" for c in chars] + chars, dest)


def published_greedy_codes(gpt: torch.nn.Module, spk_cond_emb: torch.Tensor, emo_cond_emb: torch.Tensor, text_ids: list[int],
                           max_codes: int, repetition_penalty: float = 1.0) -> list[int]:
    """Return the codes (up to the first stop) of the documented published call: `UnifiedVoice.inference_speech`
    as `IndexTTS2.infer_generator` calls it (features of the speaker and emotion prompts, `merge_emovec` with
    alpha 1, lengths as it passes them), greedy: do_sample False, one beam, the given repetition penalty."""
    text = torch.tensor([text_ids], dtype=torch.int32)
    spk_length, emo_length = torch.tensor([spk_cond_emb.shape[-1]]), torch.tensor([emo_cond_emb.shape[-1]])
    with torch.no_grad():
        emovec = gpt.merge_emovec(spk_cond_emb, emo_cond_emb, spk_length, emo_length, alpha=1.0)
        codes, _ = gpt.inference_speech(spk_cond_emb, text, emo_cond_emb, cond_lengths=spk_length, emo_cond_lengths=emo_length,
                                        emo_vec=emovec, do_sample=False, num_beams=1, repetition_penalty=repetition_penalty,
                                        max_generate_length=max_codes)
    out = codes[0].tolist()
    return out[: out.index(8193)] if 8193 in out else out


def hand_cache_to_published_model(gpt: torch.nn.Module) -> None:
    """Make `generate` hand the published `GPT2InferenceModel` its KV cache, as transformers 4 did (measurement only).

    Under transformers 5 `generate` passes the cache as `cache` and drops the all-ones mask, so the
    published `prepare_inputs_for_generation` never sees a cache and every step runs the whole
    sequence. Passed both, it runs IndexTTS2's cached path, which embeds each new code at mel
    position `attention_mask length − prompt length`: one more than the training layout gives it.
    """
    import types

    model = gpt.inference_model
    published = type(model).prepare_inputs_for_generation

    def prepare(self, input_ids, past_key_values=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        cache = kwargs.pop("cache", None)
        if kwargs.get("attention_mask") is None:
            kwargs["attention_mask"] = torch.ones_like(input_ids)
        kwargs.pop("position_ids", None)
        return published(self, input_ids, past_key_values if past_key_values is not None else cache, **kwargs)

    model.prepare_inputs_for_generation = types.MethodType(prepare, model)


def reproduced(decoded: list[int], target: list[int]) -> float:
    """Return the share of `target`'s codes that `decoded` has at the same index."""
    return sum(a == b for a, b in zip(decoded, target)) / len(target)


def add_published_inference_files(folder: Path, w2v_dest: Path) -> Path:
    """Add what the published `IndexTTS2` class reads beyond LinguaForge's speaker: a tiny random Qwen
    emotion model (`qwen_emo_path`, loaded in `__init__`), the emotion and speaker matrices
    (`emo_matrix` [73, model_dim], `spk_matrix` [73, 192]: `emo_num` sums to 73) and, at `w2v_dest`,
    a w2v-BERT with 17 layers (the published `get_emb` reads hidden state 17; 1024 wide, as the
    conformers and the codec take it; about 500 MB). Returns `w2v_dest` (pass it as the
    `families.indextts.w2v_bert` setting)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    rows = sum(config["emo_num"])
    torch.manual_seed(2)
    torch.save(torch.randn(rows, config["gpt"]["model_dim"]), folder / config["emo_matrix"])
    torch.save(torch.randn(rows, 192), folder / config["spk_matrix"])
    qwen = folder / config["qwen_emo_path"]
    vocab = {"<unk>": 0, "<|endoftext|>": 1, **{c: i + 2 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<|endoftext|>").save_pretrained(qwen)
    Qwen3ForCausalLM(Qwen3Config(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=8)).save_pretrained(qwen)
    w2v = Wav2Vec2BertConfig(hidden_size=1024, num_hidden_layers=17, num_attention_heads=2, intermediate_size=16,
                             conv_depthwise_kernel_size=3, add_adapter=False)
    Wav2Vec2BertModel(w2v).eval().save_pretrained(w2v_dest)
    SeamlessM4TFeatureExtractor().save_pretrained(w2v_dest)
    return w2v_dest
