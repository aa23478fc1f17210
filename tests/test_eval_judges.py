"""Objective-evaluation metrics and sentence judges on real espeak-ng speech (no model needed).

References are one espeak voice; the "synthesized" clips are a different voice at a different
speed speaking the same held-out sentences, so a judge must recognise the sentence, not the clip.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from core.audio import read_audio
from core.data.sample import espeak_binary
from core.errors import InputError
from core.eval.asr import SphinxJudge, normalize_words, word_error_rate
from core.eval.metrics import (
    SAMPLE_RATE,
    duration_ratio,
    dtw_cost,
    dtw_costs,
    dtw_distance_matrix,
    dtw_path,
    identification_accuracy,
    identify_by_dtw,
    log_f0_ratio,
    mcd_dtw,
)
from core.data.sample_text import ENGLISH_SENTENCES

SENTENCES = list(ENGLISH_SENTENCES[:12])
CHANCE = 1 / len(SENTENCES)


def _render_all(folder: Path, voice: str, speed: int) -> list[torch.Tensor]:
    """Render every test sentence with espeak-ng `voice` at `speed` words/min, as 16 kHz tensors."""
    clips = []
    for i, text in enumerate(SENTENCES):
        dest = folder / f"{voice}-{speed}-{i}.wav"
        subprocess.run([espeak_binary(), "-v", voice, "-s", str(speed), "-w", str(dest), text], check=True)
        clips.append(read_audio(dest, SAMPLE_RATE)[0])
    return clips


@pytest.fixture(scope="module")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[torch.Tensor]]:
    folder = tmp_path_factory.mktemp("espeak")
    return {"reference": _render_all(folder, "en-us", 175), "other": _render_all(folder, "en-us+f3", 145)}


@pytest.fixture(scope="module")
def sphinx() -> SphinxJudge:
    return SphinxJudge(SENTENCES)


def test_mcd_is_zero_for_a_clip_against_itself_and_grows_with_noise(renderings):
    clip = renderings["reference"][0]
    assert mcd_dtw(clip, clip) == 0.0
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(clip.shape, generator=generator)
    values = [mcd_dtw(clip + level * noise, clip) for level in (0.001, 0.01, 0.1)]
    assert values == sorted(values) and values[0] > 0.5, values
    same_sentence = mcd_dtw(renderings["other"][0], clip)
    other_sentence = mcd_dtw(renderings["other"][1], clip)
    assert same_sentence < other_sentence, (same_sentence, other_sentence)


def test_dtw_path_is_diagonal_on_identical_sequences_and_monotone_otherwise():
    a = torch.randn(30, 5, generator=torch.Generator().manual_seed(1))
    assert dtw_path(a, a) == [(i, i) for i in range(30)]
    assert dtw_cost(a, a) == 0.0
    path = dtw_path(a, a[::2])
    assert path[0] == (0, 0) and path[-1] == (29, 14)
    assert all(0 <= i2 - i1 <= 1 and 0 <= j2 - j1 <= 1 for (i1, j1), (i2, j2) in zip(path, path[1:]))
    with pytest.raises(ValueError):
        dtw_cost(a, torch.zeros(0, 5))


def test_dtw_costs_to_many_references_equal_each_pairs_cost_bit_for_bit():
    generator = torch.Generator().manual_seed(2)
    query = torch.randn(37, 6, generator=generator)
    references = [torch.randn(length, 6, generator=generator) for length in (5, 61, 37, 1, 40)]
    assert list(dtw_costs(query, references)) == [dtw_cost(query, r) for r in references]
    assert dtw_costs(query, [query])[0] == 0.0
    matrix = dtw_distance_matrix(references, references)
    assert matrix.shape == (5, 5) and np.allclose(matrix, matrix.T) and (matrix.diagonal() == 0).all()
    with pytest.raises(ValueError):
        dtw_costs(query, [torch.zeros(3, 5)])


def test_f0_and_duration_ratios_follow_voice_and_speed(renderings):
    reference, other = renderings["reference"][2], renderings["other"][2]
    assert log_f0_ratio(reference, reference) == 0.0
    assert log_f0_ratio(other, reference) > 0.2  # the +f3 variant speaks higher
    assert 1.1 < duration_ratio(other, reference) < 1.4  # 145 vs 175 words per minute
    assert log_f0_ratio(torch.zeros(16000), reference) is None


def test_dtw_judge_identifies_sentences_far_above_chance_and_shuffled_pairs_at_chance(renderings):
    predicted = identify_by_dtw(renderings["other"], renderings["reference"])
    assert identification_accuracy(predicted) >= 0.9, predicted
    order = list(range(len(SENTENCES)))
    random.Random(0).shuffle(order)
    shuffled = identify_by_dtw(renderings["other"], [renderings["reference"][i] for i in order])
    assert identification_accuracy(shuffled) <= 2 * CHANCE, shuffled


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_sphinx_grammar_judge_identifies_sentences_far_above_chance(sphinx, renderings):
    assert sphinx.out_of_vocabulary == []
    for name in ("reference", "other"):
        predicted = [sphinx.identify(clip) for clip in renderings[name]]
        assert identification_accuracy(predicted) >= 4 * CHANCE, (name, predicted)
    order = list(range(len(SENTENCES)))
    random.Random(0).shuffle(order)
    shuffled = [sphinx.identify(renderings["other"][i]) for i in order]
    assert identification_accuracy(shuffled) <= 2 * CHANCE, shuffled


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_sphinx_free_decoding_word_error_rate(sphinx, renderings):
    hypotheses = [sphinx.transcribe(clip) for clip in renderings["reference"][:1]]
    assert any(hypotheses)
    wer = word_error_rate(SENTENCES[:1], hypotheses)
    assert 0.0 <= wer < 1.0, (hypotheses, wer)
    assert word_error_rate(["The cat, sat."], ["the cat sat"]) == 0.0
    assert word_error_rate(["the cat sat"], ["the dog sat"]) == pytest.approx(1 / 3)


def test_sphinx_judge_reports_words_it_cannot_know_and_refuses_unusable_sets():
    judge = SphinxJudge(["the cat sat on the mat", "zzxqv blorptastic morning"])
    assert judge.out_of_vocabulary == ["blorptastic", "zzxqv"]
    assert judge.alternatives == ["the cat sat on the mat", "morning"]
    assert normalize_words("Don't stop, Mr. Smith!") == ["don't", "stop", "mr", "smith"]
    with pytest.raises(InputError, match="at least 2"):
        SphinxJudge(["only one"])
    with pytest.raises(InputError, match="DTW judge"):
        SphinxJudge(["ሰላም ነው", "እንዴት ነህ"])
