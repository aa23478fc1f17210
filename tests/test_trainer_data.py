"""Data pipeline tests: bucketing lowers padding, positions resume exactly, ranks split batches, long lines are counted."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from core.errors import InputError
from core.training.run_config import OptimConfig
from core.tokenizers.tokenizer import load_tokenizer
from core.families.linguaforge.tasks import IGNORE, collate_lm, load_text_corpus
from core.training.data import Batcher
from core.training.optim import lr_factor, parameter_groups
from models.lm import GPTLM, LMConfig
from tests.trainer_helpers import english_words, write_corpus, write_word_tokenizer

LENGTHS = [(i * 37) % 90 + 5 for i in range(400)]


def test_bucketing_cuts_padding_and_covers_every_sample() -> None:
    bucketed, random = Batcher(LENGTHS, 8, seed=1), Batcher(LENGTHS, 8, seed=1, bucket=False)
    assert bucketed.padding_share() < random.padding_share() / 3
    for batcher in (bucketed, random):
        assert sorted(i for b in batcher.epoch_batches(0) for i in b) == list(range(400))
    assert bucketed.epoch_batches(0) != bucketed.epoch_batches(1)


def test_position_resumes_the_same_batches_across_epochs() -> None:
    straight = Batcher(LENGTHS, 8, seed=3)
    expected = list(itertools.islice(iter(straight), 70))
    first = Batcher(LENGTHS, 8, seed=3)
    head = list(itertools.islice(iter(first), 55))
    resumed = Batcher(LENGTHS, 8, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert head + list(itertools.islice(iter(resumed), 15)) == expected
    assert first.state_dict() == {"epoch": 1, "index": 5, "global_batch": 8}


def test_ranks_share_out_the_batches_one_process_cuts_with_the_doubled_batch() -> None:
    single = Batcher(LENGTHS, 16, seed=0).epoch_batches(0)
    ranks = [Batcher(LENGTHS, 8, seed=0, rank=r, world=2).epoch_batches(0) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(single) == 25
    assert [a + b for a, b in zip(*ranks)] == single
    assert all(len(b) == 8 for b in ranks[0] + ranks[1])
    # 13 samples, global batches of 8: the last one (5) splits 3 + 2; 3 samples over 2 ranks in batches of 2:
    # the single-sample global batch cannot give each rank one and is left out
    uneven = [Batcher(LENGTHS[:13], 4, seed=0, rank=r, world=2).epoch_batches(0) for r in (0, 1)]
    assert sorted(len(b) for b in uneven[0]) == [3, 4] and sorted(len(b) for b in uneven[1]) == [2, 4]
    assert [a + b for a, b in zip(*uneven)] == Batcher(LENGTHS[:13], 8, seed=0).epoch_batches(0)
    tiny = [Batcher(LENGTHS[:3], 1, seed=0, rank=r, world=2).epoch_batches(0) for r in (0, 1)]
    assert len(tiny[0]) == len(tiny[1]) == 1 and len(tiny[0][0] + tiny[1][0]) == 2
    with pytest.raises(InputError, match="1 training samples for 2 processes"):
        Batcher(LENGTHS[:1], 4, seed=0, rank=0, world=2)


def test_a_position_saved_under_two_ranks_resumes_at_the_same_share_of_the_epoch_under_one() -> None:
    two = Batcher(LENGTHS, 8, seed=0, rank=0, world=2)
    list(itertools.islice(iter(two), 10))  # 10 of the epoch's 25 global batches of 16
    one = Batcher(LENGTHS, 8, seed=0)
    one.load_state_dict(two.state_dict())
    assert one.resized_from == {"global_batch": 16, "index": 10}
    assert one.state_dict() == {"epoch": 0, "index": 20, "global_batch": 8}  # 20 of its 50 batches of 8
    same = Batcher(LENGTHS, 8, seed=0)
    same.load_state_dict(one.state_dict())
    assert same.resized_from is None and same.state_dict() == one.state_dict()


def test_corpus_filters_long_lines_with_a_count_and_counts_bytes(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(write_word_tokenizer(tmp_path / "t.json", english_words()))
    corpus = write_corpus(tmp_path / "c.txt", repeats=1)
    splits = load_text_corpus([corpus], tokenizer, max_text_tokens=10, val_ratio=0.0)
    kept = len(splits["train"])
    lines = [line for line in corpus.read_text().splitlines() if line]
    too_long = sum(len(tokenizer.encode(line)) > 10 for line in lines)
    assert too_long > 0 and splits["train"].filtered == too_long and kept == len(lines) - too_long
    batch = collate_lm([splits["train"].load(i) for i in range(3)], pad_id=1)
    assert (batch["targets"] == IGNORE).sum() == batch["ids"].numel() - sum(splits["train"].lengths[:3])
    with pytest.raises(InputError, match="max_text_tokens 1"):
        load_text_corpus([corpus], tokenizer, max_text_tokens=1, val_ratio=0.0)


def test_schedule_and_parameter_groups() -> None:
    config = OptimConfig(warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, config, 110) == pytest.approx(0.1) and lr_factor(9, config, 110) == pytest.approx(1.0)
    assert lr_factor(60, config, 110) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(110, config, 110) == pytest.approx(0.1) and lr_factor(500, config, 110) == pytest.approx(0.1)
    model = GPTLM(LMConfig(text_rows=20, d_model=16, n_layers=1, n_heads=2), frozen_rows=12)
    groups, names = parameter_groups(model, 0.1)
    no_decay = set(names[len(groups[0]["params"]):])
    assert "text_head.bias_new" in no_decay and "gpt.ln_f.weight" in no_decay
    assert "text_embedding.weight_new" in names[: len(groups[0]["params"])]
    assert not any("base" in n for n in names) and groups[1]["weight_decay"] == 0.0
    assert sum(p.numel() for g in groups for p in g["params"]) == sum(p.numel() for p in model.parameters())
    assert torch.equal(model.state_dict()["text_embedding.weight"][:12], model.text_embedding.weight_base)


def test_adam_state_resumes_without_a_parameter_that_never_stepped() -> None:
    from core.training.state import remap_optimizer_state

    a, b, c = (torch.nn.Parameter(torch.randn(3, 2)) for _ in range(3))
    saved = torch.optim.AdamW([{"params": [a, b], "weight_decay": 0.1}, {"params": [c], "weight_decay": 0.0}])
    a.grad, c.grad = torch.ones_like(a), torch.ones_like(c)  # b got no gradient (an unused module): no state
    saved.step()
    state, grown = remap_optimizer_state(saved.state_dict(), ["a", "b", "c"], ["a", "c"], {"a": a.shape, "c": c.shape})
    now = torch.optim.AdamW([{"params": [a], "weight_decay": 0.1}, {"params": [c], "weight_decay": 0.0}])
    now.load_state_dict(state)  # b, now frozen, is left out; the groups keep their settings
    assert grown == {} and [g["weight_decay"] for g in now.param_groups] == [0.1, 0.0]
    for p in (a, c):
        assert torch.equal(now.state[p]["exp_avg"], saved.state[p]["exp_avg"])
    b.grad = torch.ones_like(b)
    saved.step()  # b has state now: leaving it out would lose it
    with pytest.raises(InputError, match=r"gone: \['b'\]"):
        remap_optimizer_state(saved.state_dict(), ["a", "b", "c"], ["a", "c"], {"a": a.shape, "c": c.shape})
