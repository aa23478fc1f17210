"""Sesame CSM as a model family, on a random-initialised REAL `CsmForConditionalGeneration` + `MimiModel` at reduced
size in the sesame/csm-1b folder layout (tests/csm_helpers.py), with a tokenizer in the Llama-3 layout.

The family builds the model from the folder's own config.json at the tokenizer's size and loads the published
`model.safetensors` strictly; the one sequence layout lays a conversation out exactly as the published
`CsmProcessor` does (the same input ids) and its losses, through the published forward, are the published
forward's on the processor's inputs and labels (Mimi run inside); a sample's losses are the same alone and in a
padded batch; the backbone's and the depth decoder's losses come apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from core.errors import InputError
from core.families import explain_family
from core.families.csm.features import encode_clip, load_mimi
from core.families.csm.layout import IGNORE, collate, csm_forward, lay_out_sample, layout_ids, segment_text_ids
from core.families.csm.model import CsmModelConfig, read_folder_config
from core.families.registry import get_model_family
from core.tokenizers.tokenizer import load_tokenizer
from tests.csm_helpers import CODEBOOKS, REGULAR, TEXT_ROWS, make_csm_folder

torch.set_num_threads(2)
pytestmark = pytest.mark.slow  # the reduced folder is built once per session: about 20 s on a loaded 2-core machine
TEXTS = ("The old house stood on the hill.", "A quiet river runs past the mill.")


@pytest.fixture(scope="module")
def folder(module_tmp: Path) -> Path:
    return make_csm_folder(module_tmp / "csm")


@pytest.fixture(scope="module")
def model(folder: Path) -> Any:
    """The family's model of the folder at its tokenizer's size, the published weights loaded strictly."""
    family = get_model_family("csm")
    tokenizer = load_tokenizer(folder)
    config = CsmModelConfig(tokenizer.size, read_folder_config(folder), dropout=0.0)
    built = family.build_model(config.to_dict(), frozen_rows=tokenizer.size)
    family.load_weights(built, load_file(str(folder / "model.safetensors")), "model.safetensors", tokenizer)
    return built.eval()


def _clips(seed: int = 0) -> list[np.ndarray]:
    generator = np.random.default_rng(seed)
    return [(0.1 * generator.standard_normal(n)).astype(np.float32) for n in (36_000, 24_000 * 2 + 500)]


def test_the_family_is_registered_and_reads_the_published_folder(folder: Path, model: Any) -> None:
    family = get_model_family("csm")
    files = family.published_files(folder)
    assert files["tokenizer"] == folder and files["model"].name == "model.safetensors"
    state = load_file(str(folder / "model.safetensors"))
    assert explain_family(state, None, TEXT_ROWS).family.name == "csm"
    assert tuple(model.embed_text_tokens.weight_base.shape) == (TEXT_ROWS, 64) and model.embed_text_tokens.frozen == TEXT_ROWS
    from transformers import CsmForConditionalGeneration

    published = CsmForConditionalGeneration.from_pretrained(folder).state_dict()   # Mimi's keys renamed, the tied table
    ours = model.state_dict()
    assert set(ours) == set(published) != set(state)
    assert all(torch.equal(ours[k], published[k]) for k in published)
    assert family.text_row_prefixes(model) == ("embed_text_tokens.",)


def test_the_folder_check_reads_the_config_against_the_tokenizer(folder: Path, tmp_path: Path) -> None:
    import json

    family = get_model_family("csm")
    files = family.published_files(folder)
    assert family.check_release(files) == f"CSM backbone 2 × 64, {CODEBOOKS} Mimi codebooks, {TEXT_ROWS} text rows = the tokenizer's ids"
    config = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "text_vocab_size": TEXT_ROWS + 8}))
    with pytest.raises(InputError, match=rf"text_vocab_size {TEXT_ROWS + 8}, but .*tokenizer.json has {TEXT_ROWS} ids.*models pull csm"):
        family.check_release({**files, "config": tmp_path / "config.json"})


def test_a_folder_without_a_csm_config_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"config.json: missing"):
        read_folder_config(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(InputError, match=r"model_type 'llama', not 'csm'"):
        read_folder_config(tmp_path)


def test_a_mimi_codec_at_another_rate_or_frame_is_refused_in_one_line(folder: Path) -> None:
    """The decoder, the cache and the server's frames assume the published Mimi (24 kHz, 1,920-sample frames): a
    folder whose codec_config differs is refused before its tensors are read, naming both figures."""
    config = json.loads((folder / "config.json").read_text())
    weights = folder / "model.safetensors"
    assert load_mimi(config, weights).config.frame_size == 1920  # the reduced folder's codec is the published frame
    for change, said in (({"sampling_rate": 16000}, "runs at 16000 Hz in frames of 1920 samples"),
                         ({"upsampling_ratios": [8, 6, 5, 2]}, "runs at 24000 Hz in frames of 960 samples")):
        changed = {**config, "codec_config": {**config["codec_config"], **change}}
        with pytest.raises(InputError, match=said) as refused:
            load_mimi(changed, tmp := folder / "absent.safetensors")
        assert str(tmp) in str(refused.value) and "\n" not in str(refused.value)


def test_a_tokenizer_whose_specials_sit_elsewhere_is_refused(folder: Path) -> None:
    config = read_folder_config(folder)
    ids = layout_ids(load_tokenizer(folder), config)
    assert (ids.bos, ids.eos, ids.audio, ids.audio_eos, ids.codebooks) == (REGULAR, REGULAR + 1, REGULAR + 2, REGULAR + 3, 4)
    with pytest.raises(InputError, match=r"<\|AUDIO\|> is id 1002 but the CSM config.json says audio_token_id 7"):
        layout_ids(load_tokenizer(folder), {**config, "audio_token_id": 7})


def _processor_inputs(folder: Path, clips: list[np.ndarray]) -> Any:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    conversation = [{"role": "0", "content": [{"type": "text", "text": text}, {"type": "audio", "path": clip}]}
                    for text, clip in zip(TEXTS, clips)]
    return processor.apply_chat_template(conversation, tokenize=True, return_dict=True, output_labels=True)


def test_the_layout_is_the_processors_and_its_losses_the_published_forwards(folder: Path, model: Any) -> None:
    clips = _clips()
    inputs = _processor_inputs(folder, clips)
    tokenizer = load_tokenizer(folder)
    ids = layout_ids(tokenizer, read_folder_config(folder))
    mimi = load_mimi(read_folder_config(folder), folder / "model.safetensors")
    segments = [(torch.tensor(segment_text_ids(tokenizer, text)), torch.from_numpy(encode_clip(mimi, torch.from_numpy(clip),
                                                                                               CODEBOOKS)))
                for text, clip in zip(TEXTS, clips)]
    sample = lay_out_sample(ids, segments, scored=(0, 1))
    assert torch.equal(sample["input_ids"], inputs["input_ids"][0])
    assert [len(frames) for _, frames in segments] == [19, 26]              # ⌈samples / 1,920⌉: 12.5 frames/s at 24 kHz
    with torch.no_grad():
        published = model(**inputs)
        ours = csm_forward(model, collate([sample]))
    assert float(published.backbone_loss) == pytest.approx(float(ours["backbone_loss"][0]), rel=1e-5)
    assert float(published.depth_decoder_loss) == pytest.approx(float(ours["depth_loss"][0]), rel=1e-5)
    assert int(ours["backbone_loss"][1]) == 19 + 1 + 26 + 1               # each frame and each audio-eos frame
    assert int(ours["depth_loss"][1]) == (19 + 1 + 26 + 1) * (CODEBOOKS - 1)


def test_training_scores_the_target_segment_alone_and_padding_cannot_leak(folder: Path, model: Any) -> None:
    tokenizer = load_tokenizer(folder)
    ids = layout_ids(tokenizer, read_folder_config(folder))
    generator = torch.Generator().manual_seed(1)
    segments = [(torch.tensor(segment_text_ids(tokenizer, text)), torch.randint(1, 64, (n, CODEBOOKS), generator=generator))
                for text, n in zip(TEXTS, (9, 14))]
    long = lay_out_sample(ids, segments)
    short = lay_out_sample(ids, [segments[1], (segments[0][0], segments[0][1][:4])])
    assert (long["labels"][: len(segments[0][0]) + 2 + 10] == IGNORE).all()  # the context segment is never scored
    assert torch.equal(long["labels"][-15:-1], segments[1][1]) and (long["labels"][-1] == 0).all()
    with torch.no_grad():
        alone = csm_forward(model, collate([short]))
        padded = csm_forward(model, collate([short, long]))
        second = csm_forward(model, collate([long]))
    batch = collate([short, long])
    assert batch["n_tokens"] == 5 + 15 and (batch["labels"][0, len(short["input_ids"]):] == IGNORE).all()
    for name in ("backbone_loss", "depth_loss"):
        mean, count = padded[name]
        expected = (alone[name][0] * alone[name][1] + second[name][0] * second[name][1]) / (alone[name][1] + second[name][1])
        assert int(count) == int(alone[name][1] + second[name][1])
        assert float(mean) == pytest.approx(float(expected), rel=1e-4)
