"""Model tests: exact freezing of base rows, full-matrix state dicts, KV-cache generation."""

from __future__ import annotations

import pytest
import torch

from models.gpt import sample_next
from models.lm import GPTLM, LMConfig
from models.rows import SplitEmbedding, SplitHead
from models.tts import GPTTTS, TTSConfig, aligned_text_index, sequence_layout

torch.set_num_threads(1)


def _tts(frozen: int = 0, attention: str = "sdpa", progress: bool = False) -> GPTTTS:
    torch.manual_seed(0)
    config = TTSConfig(text_rows=40, codebook_size=16, n_mels=8, d_model=32, n_layers=2, n_heads=4,
                       max_text_tokens=20, max_speech_tokens=30, attention=attention, progress_alignment=progress)
    model = GPTTTS(config, frozen_rows=frozen)
    if progress:
        model.speech_rate.fill_(2.5)  # as if trained on 2.5 codes per text position
    return model


def _tts_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "text_ids": torch.randint(2, 40, (3, 6), generator=g),
        "text_lengths": torch.tensor([6, 4, 2]),
        "codes": torch.randint(0, 16, (3, 9), generator=g),
        "code_lengths": torch.tensor([9, 5, 7]),
        "ref_mel": torch.randn(3, 11, 8, generator=g),
        "ref_lengths": torch.tensor([11, 7, 3]),
    }


def test_frozen_rows_stay_bit_identical_under_adamw_weight_decay() -> None:
    model = _tts(frozen=30)
    before = model.state_dict()
    sha = model.text_embedding.base_sha256(), model.text_head.base_sha256()
    names = {n for n, _ in model.named_parameters()}
    assert "text_embedding.weight_new" in names and "text_embedding.weight_base" not in names
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(5):
        out = model(_tts_batch())
        (0.2 * out["text_loss"] + 0.8 * out["mel_loss"]).backward()
        optimizer.step()
        optimizer.zero_grad()
    after = model.state_dict()
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert after[key].shape[0] == 40
        assert torch.equal(after[key][:30], before[key][:30]), key
        assert not torch.equal(after[key][30:], before[key][30:]), key
    assert (model.text_embedding.base_sha256(), model.text_head.base_sha256()) == sha


def test_state_dict_has_full_family_keys_and_reloads_across_splits() -> None:
    model = _tts(frozen=30)
    state = model.state_dict()
    text_keys = sorted(k for k in state if k.startswith("text_"))
    assert text_keys == ["text_embedding.weight", "text_head.bias", "text_head.weight", "text_pos.weight"]
    assert tuple(state["text_head.weight"].shape) == (40, 32)
    other = _tts(frozen=0)
    other.load_state_dict(state)
    batch = _tts_batch()
    torch.testing.assert_close(other(batch)["mel_loss"], model(batch)["mel_loss"], rtol=0, atol=0)
    bad = dict(state)
    bad["text_embedding.weight"] = bad["text_embedding.weight"][:39]
    try:
        other.load_state_dict(bad)
    except RuntimeError as exc:
        assert "text_embedding.weight" in str(exc)
    else:
        raise AssertionError("a wrong row count must not load")


def test_tts_losses_are_finite_and_start_near_uniform() -> None:
    out = _tts()(_tts_batch())
    assert abs(out["mel_loss"].item() - torch.log(torch.tensor(18.0)).item()) < 0.3
    assert abs(out["text_loss"].item() - torch.log(torch.tensor(40.0)).item()) < 0.3
    assert 0.0 <= out["mel_top1"].item() <= 1.0
    assert (out["text_tokens"].item(), out["mel_tokens"].item()) == (7 + 5 + 3, 10 + 6 + 8)  # each + its stop token


@pytest.mark.parametrize("progress", [False, True])
def test_tts_kv_cache_generation_equals_uncached(progress: bool) -> None:
    model = _tts(progress=progress).eval()
    with torch.no_grad():
        model.mel_head.bias[model.config.stop_speech] = -10.0  # run to max_codes
    ref = torch.randn(12, 8)
    greedy = [model.generate([3, 4, 5], ref, temperature=0, use_cache=c, max_codes=25) for c in (True, False)]
    assert greedy[0] == greedy[1] and len(greedy[0]) == 25
    sampled = [
        model.generate([3, 4, 5], ref, temperature=1.0, top_k=8, use_cache=c, max_codes=25,
                       generator=torch.Generator().manual_seed(7))
        for c in (True, False)
    ]
    assert sampled[0] == sampled[1]


@pytest.mark.parametrize("progress", [False, True])
def test_tts_generation_never_stops_before_min_codes(progress: bool) -> None:
    model = _tts(progress=progress).eval()
    with torch.no_grad():
        model.mel_head.bias[model.config.stop_speech] = 50.0  # the model wants to stop at once
    ref = torch.randn(12, 8)
    assert model.generate([3, 4, 5], ref, temperature=0, max_codes=25) == []
    codes = model.generate([3, 4, 5], ref, temperature=0, max_codes=25, min_codes=6)
    assert len(codes) == 6 and all(code < model.config.codebook_size for code in codes)


def test_naive_attention_matches_sdpa() -> None:
    batch = _tts_batch()
    fused, naive = _tts(attention="sdpa"), _tts(attention="naive")
    torch.testing.assert_close(fused(batch)["mel_loss"], naive(batch)["mel_loss"], rtol=1e-5, atol=1e-5)


def test_lm_generation_with_and_without_cache_agree_and_stop_at_limit() -> None:
    torch.manual_seed(0)
    model = GPTLM(LMConfig(text_rows=50, d_model=32, n_layers=2, n_heads=4, max_text_tokens=16, eos_id=1)).eval()
    runs = [model.generate([5, 6], 100, temperature=0, use_cache=c) for c in (True, False)]
    assert runs[0] == runs[1]
    assert len(runs[0]) <= 16 + 2 - 3
    ids = torch.randint(0, 50, (2, 9))
    out = model(ids[:, :-1], ids[:, 1:])
    assert abs(out["loss"].item() - torch.log(torch.tensor(50.0)).item()) < 0.3


def test_sample_next_filters() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9]])
    assert int(sample_next(logits, temperature=0)) == 1
    g = torch.Generator().manual_seed(0)
    assert {int(sample_next(logits, 1.0, top_k=1, generator=g)) for _ in range(20)} == {1}
    assert {int(sample_next(logits, 1.0, top_p=0.01, generator=g)) for _ in range(20)} == {1}
    assert {int(sample_next(logits, 1.0, top_k=2, generator=g)) for _ in range(50)} == {1, 3}


@pytest.mark.parametrize("progress", [False, True])
def test_batched_generation_equals_one_text_at_a_time(progress: bool) -> None:
    model = _tts(progress=progress).eval()
    ref = torch.randn(12, 8)
    texts, minimum = [[3, 4, 5], [6, 7, 8, 9, 10, 11, 12], [3]], [6, 10, 2]
    for use_cache in (True, False):
        together = model.generate_batch(texts, ref, temperature=0, min_codes=minimum, use_cache=use_cache, max_codes=25)
        alone = [model.generate(t, ref, temperature=0, min_codes=m, use_cache=use_cache, max_codes=25)
                 for t, m in zip(texts, minimum)]
        assert together == alone
        assert all(len(codes) >= m for codes, m in zip(together, minimum))


def test_vectorised_tts_loss_equals_a_per_sample_reference() -> None:
    """The training forward (host-built layout, logits only where scored) against a loop written out by hand."""
    model, batch = _tts(), _tts_batch()
    out = model(batch)
    c = model.config
    cond = model.reference(batch["ref_mel"], batch["ref_lengths"])
    text_losses, mel_losses = [], []
    for b in range(3):
        text = torch.tensor([c.start_text, *batch["text_ids"][b, : batch["text_lengths"][b]].tolist(), c.stop_text])
        speech = torch.tensor([c.start_speech, *batch["codes"][b, : batch["code_lengths"][b]].tolist(), c.stop_speech])
        x = torch.cat([cond[b], model.text_embedding(text) + model.text_pos(torch.arange(len(text))),
                       model.mel_embedding(speech[:-1]) + model.mel_pos(torch.arange(len(speech) - 1))])
        hidden = model.gpt(x[None])[0]
        n = cond.shape[1]
        text_losses.append(torch.nn.functional.cross_entropy(
            model.text_head(hidden[n : n + len(text) - 1]), text[1:], reduction="none"))
        mel_losses.append(torch.nn.functional.cross_entropy(
            model.mel_head(hidden[n + len(text) :]), speech[1:], reduction="none"))
    torch.testing.assert_close(out["text_loss"], torch.cat(text_losses).mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["mel_loss"], torch.cat(mel_losses).mean(), rtol=1e-5, atol=1e-6)
    assert int(out["text_tokens"]) == sum(len(t) for t in text_losses)
    assert int(out["mel_tokens"]) == sum(len(m) for m in mel_losses)


def test_preallocated_kv_cache_refuses_to_overflow() -> None:
    model = _tts().eval()
    cache = model.gpt.new_cache(4)
    with torch.no_grad():
        model.gpt(torch.randn(1, 4, 32), cache)
        assert cache.length == 4
        try:
            model.gpt(torch.randn(1, 1, 32), cache)
        except ValueError as exc:
            assert "4 positions" in str(exc)
        else:
            raise AssertionError("a full cache must refuse another position")


def test_split_rows_keep_a_frozen_tail_bit_identical_and_wrap_published_modules() -> None:
    torch.manual_seed(3)
    embedding, linear = torch.nn.Embedding(12, 8), torch.nn.Linear(8, 12, bias=True)
    split_emb = SplitEmbedding.from_module(embedding, frozen=5, frozen_tail=1)
    split_head = SplitHead.from_module(linear, frozen=5, frozen_tail=1)
    assert torch.equal(split_emb.state_dict()["weight"], embedding.weight)
    assert torch.equal(split_head.state_dict()["bias"], linear.bias)
    assert split_emb.weight_new.shape[0] == 6 and split_emb.rows == 12
    sha = split_emb.base_sha256(), split_head.base_sha256()
    optimizer = torch.optim.AdamW([*split_emb.parameters(), *split_head.parameters()], lr=1e-2, weight_decay=0.1)
    ids = torch.arange(12).repeat(2)  # every row, the tail included, is indexed
    for _ in range(4):
        split_head(split_emb(ids)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    after = split_emb.state_dict()["weight"]
    assert torch.equal(after[:5], embedding.weight[:5]) and torch.equal(after[11:], embedding.weight[11:])
    assert not torch.equal(after[5:11], embedding.weight[5:11])
    assert torch.equal(split_head.state_dict()["weight"][11:], linear.weight[11:])
    assert (split_emb.base_sha256(), split_head.base_sha256()) == sha
    no_bias = SplitHead.from_module(torch.nn.Linear(8, 12, bias=False), frozen=3)
    assert sorted(no_bias.state_dict()) == ["weight"]
    reloaded = SplitEmbedding(12, 8, frozen=2, frozen_tail=2)
    reloaded.load_state_dict(split_emb.state_dict())
    assert torch.equal(reloaded.state_dict()["weight"], after)


def test_progress_alignment_gives_each_speech_position_the_text_at_its_share_of_the_way() -> None:
    config = _tts(progress=True).config
    layout = sequence_layout(torch.tensor([[5, 6, 7]]), [3], torch.arange(9)[None], [9], config)
    speech = layout["layout_kind"][0] == 2
    # 5 text positions (start, 5, 6, 7, stop) over 10 speech positions (start_speech + 9 codes): two each
    assert layout["layout_aligned"][0][speech].tolist() == [0, 0, 5, 5, 6, 6, 7, 7, 1, 1]
    assert layout["layout_progress"][0][speech].tolist() == pytest.approx([s / 10 for s in range(10)])
    assert layout["layout_progress"][0][~speech].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert aligned_text_index(torch.tensor([0.0, 0.999, 1.5]), 5).tolist() == [0, 4, 4]


def test_progress_alignment_must_be_true_or_false() -> None:
    from models.registry import model_shape

    assert model_shape({"preset": "tiny", "progress_alignment": True})["progress_alignment"] is True
    with pytest.raises(ValueError, match="model.progress_alignment 'yes': give true or false"):
        model_shape({"preset": "tiny", "progress_alignment": "yes"})


def test_progress_alignment_decodes_what_it_trains_on() -> None:
    """Greedy codes generated to the expected length are the argmax of the training forward's logits."""
    model = _tts(progress=True).eval()
    text, ref = [3, 4, 5, 6], torch.randn(12, 8)
    expected = model.expected_codes(text, 30)
    assert expected == round(2.5 * (len(text) + 2))
    codes = model.generate(text, ref, temperature=0, min_codes=expected, max_codes=expected)
    batch = {"text_ids": torch.tensor([text]), "text_lengths": torch.tensor([len(text)]),
             "codes": torch.tensor([codes]), "code_lengths": torch.tensor([len(codes)]),
             "ref_mel": ref[None], "ref_lengths": torch.tensor([12])}
    seen: list[torch.Tensor] = []
    hook = model.mel_head.register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        model(batch)
    hook.remove()
    assert seen[0][:expected, : model.config.codebook_size].argmax(-1).tolist() == codes


def test_progress_alignment_tracks_the_speech_rate_while_training_only() -> None:
    model = _tts(progress=True)
    model.speech_rate.zero_()
    batch = _tts_batch()
    model(batch)
    first = (9 + 5 + 7) / ((6 + 2) + (4 + 2) + (2 + 2))
    assert model.speech_rate.item() == pytest.approx(first)
    model(batch)  # the same batch again: the running mean stays
    assert model.speech_rate.item() == pytest.approx(first)
    model.eval()(dict(batch, code_lengths=torch.tensor([2, 2, 2]), codes=batch["codes"][:, :2]))
    assert model.speech_rate.item() == pytest.approx(first)
    restored = GPTTTS(model.config)
    with pytest.raises(ValueError, match="never trained"):
        restored.expected_codes([3], 30)
    restored.load_state_dict(model.state_dict())
    assert restored.expected_codes([3, 4], 30) == round(first * 4) == 5


@pytest.mark.parametrize(("frozen", "tail"), [(0, 0), (5, 0), (5, 3), (0, 3), (17, 3)])
def test_a_split_embedding_looks_up_and_trains_as_its_full_table(frozen: int, tail: int) -> None:
    """Each id is read from the part that holds it (the full table is never built): the same rows and the same
    gradient of the trainable rows as a lookup in the full table, and an id outside the table still raises."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    split = SplitEmbedding(20, 8, frozen, tail)
    ids = torch.randint(0, 20, (3, 11))
    ids[0, :3] = torch.tensor([0, 19, frozen])  # the first and last rows and the first trainable one
    out, full = split(ids), F.embedding(ids, split.full("weight"))
    assert torch.equal(out, full)
    if split.weight_new.shape[0]:
        weights = torch.randn_like(out)
        (out * weights).sum().backward()
        looked_up = split.weight_new.grad.clone()
        split.weight_new.grad = None
        (full * weights).sum().backward()
        assert torch.equal(looked_up, split.weight_new.grad)
    for outside in (20, -1):
        with pytest.raises(IndexError):
            split(torch.tensor([outside]))
