"""The chunked cross-entropy (models.losses.head_cross_entropy): the same loss and gradients as the plain
full-vocabulary fp32 loss, no more than one chunk of logits at once, and frozen head rows untouched —
on its own, and through every family's training loss (the own TTS and LM, Chatterbox T3, Turbo, IndexTTS2)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import models.losses
from models.losses import head_cross_entropy
from models.rows import SplitHead

torch.set_num_threads(1)


def _head(frozen: int = 5) -> SplitHead:
    torch.manual_seed(0)
    return SplitHead(37, 16, frozen, bias=True, weight=torch.randn(37, 16), bias_value=torch.randn(37))


def test_same_loss_and_gradients_as_the_plain_loss_and_frozen_rows_untouched() -> None:
    head = _head()
    hidden = torch.randn(3, 50, 16, requires_grad=True)
    targets = torch.randint(0, 37, (3, 50))
    targets[0, 40:] = -100
    frozen_before = head.full("weight")[:5].clone()

    logits = head(hidden).float()
    plain = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")
    plain.sum().backward()
    plain_grads = [hidden.grad.clone()] + [p.grad.clone() for p in head.parameters()]
    hidden.grad = None
    head.zero_grad(set_to_none=True)

    losses, best = head_cross_entropy(head, hidden, targets, chunk=16)   # 150 positions: 10 chunks
    assert losses.shape == targets.shape and torch.equal(best, logits.argmax(-1))
    assert torch.allclose(losses, plain, atol=1e-6) and torch.all(losses[0, 40:] == 0)
    losses.sum().backward()
    grads = [hidden.grad] + [p.grad for p in head.parameters()]
    assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(grads, plain_grads))
    assert torch.equal(head.full("weight")[:5], frozen_before)
    assert sum(1 for name, _ in head.named_parameters()) >= 1 and all(b.grad is None for b in head.buffers())


def test_no_more_than_one_chunk_of_logits_is_held_for_the_backward_pass() -> None:
    """What autograd keeps between forward and backward: the plain loss keeps the fp32 logits (positions × rows),
    the chunked one only the per-position losses and the hidden states it recomputes from."""
    head = SplitHead(4000, 8, 0)
    hidden = torch.randn(4096, 8, requires_grad=True)
    targets = torch.randint(0, 4000, (4096,))
    kept: dict[str, int] = {}
    for name, chunk in (("plain", 8192), ("chunked", 512)):
        sizes: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            sizes.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            head_cross_entropy(head, hidden, targets, chunk=chunk)[0].sum()
        kept[name] = sum(sizes)
    assert kept["plain"] > 4096 * 4000 * 4            # the whole fp32 logits
    assert kept["chunked"] < 4096 * 4000 * 4 / 20     # a chunk's worth of tensors at the most


def _family_step(family: str) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """Return a small model of `family` as a run trains it (frozen base rows), its training forward and a batch."""
    if family == "linguaforge":
        from core.families.linguaforge.tasks import collate_tts, tts_forward
        from models.registry import MODEL_SIZES, build_model, model_config

        config = model_config("tts", MODEL_SIZES["tiny"], text_rows=50, codebook_size=16, n_mels=8, start_text=1, stop_text=2)
        g = torch.Generator().manual_seed(0)
        samples = [{"text_ids": torch.randint(3, 50, (n,), generator=g), "codes": torch.randint(0, 16, (2 * n,), generator=g),
                    "ref_mel": torch.randn(9, 8, generator=g)} for n in (5, 9, 7)]
        batch = collate_tts(samples, config)
        batch.pop("n_tokens")
        torch.manual_seed(0)
        return build_model("tts", config, frozen_rows=20), tts_forward, batch
    from bench.families import Case, build, make_batch, model_config
    from core.families.chatterbox.t3 import t3_forward
    from core.families.indextts.training import indextts_forward

    config = model_config(family, "smoke")
    case = Case(family, "smoke", False, 2, 6, 11, False)
    return build(case, config, torch.device("cpu")), indextts_forward if family == "indextts" else t3_forward, make_batch(family, config, case)


@pytest.mark.parametrize("family", ["linguaforge", "indextts", pytest.param("chatterbox", marks=pytest.mark.slow),
                                    pytest.param("chatterbox-turbo", marks=pytest.mark.slow)])  # width 1024: 15–30 s here
def test_every_familys_training_loss_is_unchanged_by_chunking(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each family's training loss and gradients with chunks of 7 positions equal those of one chunk (the plain loss)."""
    model, forward, batch = _family_step(family)
    results = []
    for chunk in (10**9, 7):
        monkeypatch.setattr(models.losses, "CHUNK_POSITIONS", chunk)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        out = {name: value for name, (value, _) in forward(model, batch).items()}
        (out["text_loss"] + out["mel_loss"]).backward()
        results.append((out["text_loss"].detach(), out["mel_loss"].detach(),
                        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (text, mel, grads), (text_c, mel_c, grads_c) = results
    assert torch.allclose(text, text_c, atol=1e-5) and torch.allclose(mel, mel_c, atol=1e-5)
    assert grads.keys() == grads_c.keys() and grads
    assert all(torch.allclose(grads[n], grads_c[n], atol=1e-5, rtol=1e-4) for n in grads)


def test_frozen_rows_stay_bit_identical_through_chunked_training_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """An own LM with 10 frozen text rows trains 3 AdamW steps (weight decay on) with chunks of 5 positions:
    the frozen rows of its table and head are the same bits, the trained rows moved."""
    from models.registry import build_model, model_config

    monkeypatch.setattr(models.losses, "CHUNK_POSITIONS", 5)
    config = model_config("lm", {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_text_tokens": 16}, text_rows=30, bos_id=1, eos_id=2)
    torch.manual_seed(0)
    model = build_model("lm", config, frozen_rows=10)
    before = {name: module.full("weight").detach().clone() for name, module in
              (("embedding", model.text_embedding), ("head", model.text_head))}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        model(torch.randint(0, 30, (2, 9), generator=g), torch.randint(0, 30, (2, 9), generator=g))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
    for name, module in (("embedding", model.text_embedding), ("head", model.text_head)):
        after = module.full("weight").detach()
        assert torch.equal(after[:10], before[name][:10]) and not torch.equal(after[10:], before[name][10:]), name
