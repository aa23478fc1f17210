"""Keeping the base languages on a published family (issue 45, item 5): a reduced two-language (English + Spanish)
base, extended to Amharic and fine-tuned with and without replay on the same seed — bench/retention_families.py's
own steps, at a test's size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.retention_families import BASE_LANGUAGES, FamilyBench, measure, speech_data
from core.config import load_settings
from tests.data_helpers import require_espeak

FAMILY = "csm"


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a base and two fine-tunes: a few CPU minutes, more on a shared machine
def test_replay_keeps_more_of_a_family_base_than_the_same_fine_tune_without_it(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The same English + Spanish base, Amharic data, seed and steps, fine-tuned with 25 % replay of the base languages
    and without (base rows frozen, Amharic alone): each base language's validation loss rises less with replay,
    measured on the same validation clips before and after."""
    require_espeak()
    torch.set_num_threads(2)
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    data = speech_data(tmp_path / "bench" / "data", per_language=12)
    record = measure(FamilyBench(FAMILY, tmp_path / "bench" / FAMILY, data, settings, batch=4), base_steps=40, steps=30)
    replay, alone = record["rows"]
    assert (replay["strategy"], alone["strategy"]) == ("replay", "frozen")
    rise = {row["strategy"]: sum(row["change"][lang] for lang in BASE_LANGUAGES) / len(BASE_LANGUAGES)
            for row in (replay, alone)}
    assert rise["frozen"] > 0.01, record  # Amharic alone makes the base languages worse…
    for lang in BASE_LANGUAGES:  # …and replay keeps more of each (bench: 6 points less on each at this size)
        assert replay["change"][lang] < alone["change"][lang] - 0.02, record
    assert replay["val_loss"]["am"] < record["val_loss_start"]["am"], record  # while Amharic is learnt
