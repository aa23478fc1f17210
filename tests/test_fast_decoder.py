"""The own model's fast decoder (a `StaticKVCache`: fixed shapes, a device-held position, the whole buffer masked;
the default on CUDA) speaks the same codes as the growing KV cache (the CPU's default) and as no cache, greedy and sampled with a fixed seed, for one
text and for a left-padded batch, on the CPU."""

from __future__ import annotations

import pytest
import torch

from models.gpt import StaticKVCache
from models.registry import MODEL_SIZES, build_model, model_config

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    config = model_config("tts", dict(MODEL_SIZES["tiny"], max_speech_tokens=40), text_rows=30, codebook_size=16, n_mels=8,
                          start_text=1, stop_text=2)
    torch.manual_seed(0)
    return build_model("tts", config).eval()


@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("texts", [[[5, 6, 7, 8]], [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]])
def test_the_static_cache_speaks_the_codes_of_the_growing_cache_and_of_no_cache(model, temperature, texts) -> None:
    ref = torch.randn(12, 8, generator=torch.Generator().manual_seed(3))
    spoken = {}
    for name, options in (("static", {"static_cache": True}), ("growing", {}), ("none", {"use_cache": False})):
        spoken[name] = model.generate_batch(texts, ref, temperature=temperature, top_k=8, min_codes=[30] * len(texts),
                                            generator=torch.Generator().manual_seed(7), **options)
    assert all(len(codes) >= 30 for codes in spoken["static"])
    assert spoken["static"] == spoken["growing"] == spoken["none"]


def test_a_static_step_has_fixed_shapes_and_needs_its_mask(model) -> None:
    cache = model.gpt.new_cache(20, static=True)
    assert isinstance(cache, StaticKVCache) and int(cache.position) == 0
    with pytest.raises(ValueError, match="needs the mask"):
        model.gpt(torch.randn(1, 3, 64), cache)
    from models.gpt import step_mask

    valid = torch.ones(1, 20, dtype=torch.bool)
    shapes = []
    for queries in (3, 1, 1):
        model.gpt(torch.randn(1, queries, 64), cache, step_mask(valid, cache.position, queries))
        shapes.append(tuple(cache.keys[0].shape))
    assert int(cache.position) == 5 and shapes == [(1, 4, 20, 16)] * 3


@pytest.mark.slow  # the published width: about a minute here
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_chatterbox_t3_with_a_static_cache_speaks_the_growing_caches_tokens(temperature: float) -> None:
    """A reduced T3 (random weights, 1 layer at the published width), CFG on: the static cache's tokens equal the
    growing cache's, greedy and sampled from the same seed."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    from core.families.chatterbox.decode import Sampling, decode_speech
    from core.families.chatterbox.layout import t3_cond_embeds, wrap_text
    from core.families.chatterbox.t3 import ChatterboxConfig, build_t3
    from tests.chatterbox_helpers import REDUCED

    torch.manual_seed(0)
    model = build_t3(ChatterboxConfig(text_tokens_dict_size=300, **REDUCED)).eval()
    g = torch.Generator().manual_seed(0)
    cond = T3Cond(speaker_emb=torch.randn(1, 256, generator=g), cond_prompt_speech_tokens=torch.randint(0, 6561, (1, 150), generator=g),
                  emotion_adv=0.5 * torch.ones(1, 1, 1))
    embeds, text = t3_cond_embeds(model, cond), wrap_text([5, 6, 7, 8, 9])
    sampling = Sampling(temperature=temperature, cfg_weight=0.5)
    from transformers import StaticCache

    caches: list[type] = []
    forward = model.tfmr.forward
    model.tfmr.forward = lambda **kw: caches.append(type(kw.get("past_key_values"))) or forward(**kw)
    spoken = []
    for static in (True, False):
        torch.manual_seed(11)
        spoken.append(decode_speech(model, embeds, text, 16, sampling, static_cache=static))
    assert len(spoken[0].tokens) > 3 and spoken[0] == spoken[1]
    assert caches[0] is StaticCache and caches[1] is StaticCache  # the prefix and the steps ran on the static cache
