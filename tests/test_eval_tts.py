"""`eval tts` end to end on a real (untrained, tiny) LinguaForge TTS checkpoint with a real codec.

An untrained model speaks noise, so its identification must sit near chance while the codec
ceiling and the judges' own accuracy on the espeak references sit far above it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from core.checkpoint import CheckpointMeta, save_checkpoint
from core.speech.codec import load_codec
from core.eval.tts import evaluate_checkpoint, folder_references, read_sentences, write_entry_scalars
from core.errors import InputError
from core.runs import RunFolder
from core.data.sample_text import ENGLISH_SENTENCES
from core.tokenizers.tokenizer import load_tokenizer
from models.registry import build_model, model_config
from tests.data_helpers import make_codec, make_espeak_dataset
from tests.trainer_helpers import english_words, write_word_tokenizer

SENTENCES = sorted(ENGLISH_SENTENCES, key=len)[:5]


@pytest.fixture
def tiny_checkpoint(workspace: Path) -> Path:
    """A tiny TTS checkpoint in runs/evalrun/checkpoints/ with its tokenizer and codec recorded."""
    manifest = make_espeak_dataset(workspace / "datasets" / "en", per_language=6, languages=("en",))
    (workspace / "codecs").mkdir()
    codec_path = make_codec(manifest, workspace / "codecs" / "en.pt", codebook_size=32, iterations=10)
    codec = load_codec(codec_path)
    tokenizer = load_tokenizer(write_word_tokenizer(workspace / "tokenizers" / "en.json", english_words()))
    torch.manual_seed(0)
    config = model_config("tts", {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_text_tokens": 32,
                                  "max_speech_tokens": 48}, text_rows=tokenizer.size,
                          codebook_size=codec.codebook_size, n_mels=codec.n_mels)
    model = build_model("tts", config)
    meta = CheckpointMeta(family="linguaforge", task="tts", tokenizer_fingerprint=tokenizer.fingerprint,
                          tokenizer_size=tokenizer.size, rows=tokenizer.size, base_size=tokenizer.size,
                          codec_fingerprint=codec.fingerprint, model_config=asdict(config), step=7)
    path = workspace / "runs" / "evalrun" / "checkpoints" / "step_7.pt"
    path.parent.mkdir(parents=True)
    return save_checkpoint(path, model.state_dict(), meta,
                           {"tokenizer_path": str(tokenizer.path), "codec_path": str(codec_path)})


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_eval_tts_cli_writes_eval_json_tensorboard_and_the_three_rows(cli, workspace, tiny_checkpoint):
    sentences = workspace / "heldout.txt"
    sentences.write_text("# held-out\n" + "\n".join(SENTENCES) + "\n", encoding="utf-8")
    run = cli("eval", "tts", "--checkpoint", tiny_checkpoint, "--sentences", sentences,
              "--references", "espeak", "--no-wer", "--json")
    assert run.code == 0, run.stderr
    result = run.json()
    assert result["step"] == 7 and result["sentences"] == 5 and result["chance"] == 0.2
    rows = result["rows"]
    assert rows["references"]["sphinx_identification"] > result["chance"]
    assert rows["codec"]["dtw_identification"] >= 0.6
    assert rows["codec"]["mcd_db"] > 0 and rows["model"]["mcd_db"] > rows["codec"]["mcd_db"]
    assert rows["model"]["dtw_identification"] <= 0.5
    assert rows["model"]["wer"] is None
    quality = result["quality"]  # the quality report rides in --json (fields documented in docs/concepts/quality.md)
    assert set(quality["flags"]) == {"no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored"}
    assert quality["flags_raised"] == [name for name, flag in quality["flags"].items() if flag["flagged"]]
    assert [row["tokens"] <= 48 for row in quality["per_sentence"]] == [True] * 5
    assert 0.0 < quality["mos_estimate"] <= 5.0 and -1.0 <= quality["speaker_similarity"] <= 1.0
    assert quality["cer"] is None and quality["length_bounds_source"] == "evaluation references"
    assert all(Path(p).is_file() for p in result["audio"])
    stored = json.loads((tiny_checkpoint.parent / "eval.json").read_text())
    assert stored["checkpoints"]["step_7.pt"]["rows"]["codec"] == rows["codec"]
    events = list((tiny_checkpoint.parent.parent / "tb").glob("events.out.tfevents.*"))
    assert events
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(events[0].parent))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    assert {"eval/mcd_db", "eval/dtw_identification", "eval/codec_dtw_identification",
            "eval/references_sphinx_identification"} <= set(tags)
    assert accumulator.Scalars("eval/mcd_db")[0].step == 7

    with pytest.raises(InputError, match="nowhere: references folder not found"):
        evaluate_checkpoint(tiny_checkpoint, SENTENCES, workspace / "nowhere")


def test_an_evaluation_written_into_the_run_that_trained_it_reads_back_from_tensorboard(tmp_path: Path) -> None:
    """What the quickstart does with its final evaluation (a pruned checkpoint outside runs/): its rows' numbers
    as `eval/` scalars in the fine-tune run's TensorBoard folder at the evaluated step, per-sentence rows left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    entry = {"step": 20, "rows": {"model": {"dtw_identification": 0.85, "mcd_db": 9.5, "flagged": True,
                                            "per_sentence": [{"sentence": "a", "dtw_nearest": 0}]},
                                  "codec": {"dtw_identification": 1.0, "mcd_db": None}}}
    run = RunFolder(tmp_path / "runs" / "qs-am-finetune")
    write_entry_scalars(run.tensorboard, entry)
    board = EventAccumulator(str(run.tensorboard))
    board.Reload()
    assert sorted(board.Tags()["scalars"]) == ["eval/codec_dtw_identification", "eval/dtw_identification", "eval/mcd_db"]
    assert [(p.step, round(p.value, 6)) for p in board.Scalars("eval/dtw_identification")] == [(20, 0.85)]
    assert [(p.step, round(p.value, 6)) for p in board.Scalars("eval/mcd_db")] == [(20, 9.5)]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_bad_inputs_name_the_file(tmp_path: Path, cli, workspace):
    one = tmp_path / "one.txt"
    one.write_text("Only one sentence.\n", encoding="utf-8")
    with pytest.raises(InputError, match="one.txt.*at least 2"):
        read_sentences(one)
    with pytest.raises(InputError, match="missing.txt: sentences file not found"):
        read_sentences(tmp_path / "missing.txt")
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "1.wav").write_bytes(b"")
    with pytest.raises(InputError, match="no clip for sentence 2"):
        folder_references(tmp_path / "refs", 3)
    with pytest.raises(InputError, match="none.pt: checkpoint not found"):
        evaluate_checkpoint(tmp_path / "none.pt", ["a b", "c d"])
    run = cli("eval", "tts", "--checkpoint", tmp_path / "none.pt", "--sentences", one, "--json")
    assert run.code == 2 and "one.txt" in run.json()["error"]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_checkpoint_with_malformed_length_bounds_is_refused_in_one_line(cli, workspace, tiny_checkpoint):
    from core.checkpoint import load_checkpoint

    loaded = load_checkpoint(tiny_checkpoint)
    bad = save_checkpoint(tiny_checkpoint.with_name("bad_bounds.pt"), loaded.state_dict,
                          {**loaded.meta, "length_bounds": ["wide", 3]}, loaded.extra)
    sentences = workspace / "two.txt"
    sentences.write_text("\n".join(SENTENCES[:2]) + "\n", encoding="utf-8")
    run = cli("eval", "tts", "--checkpoint", bad, "--sentences", sentences, "--references", "espeak", "--no-wer",
              "--no-mos", "--json")
    assert run.code == 2 and "bad_bounds.pt: metadata length_bounds ['wide', 3]" in run.json()["error"]
    assert not (bad.parent / "eval_audio" / "bad_bounds").exists()  # refused before any synthesis


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_base_sentences_measure_the_base_language_in_a_section_of_the_same_entry(cli, workspace, tiny_checkpoint):
    """`--base-sentences`: the same rows and quality report on a second held-out set, its clips in a folder of its
    language, and one eval.json entry whose `sections` hold both languages (as periodic evaluation writes them)."""
    new, base = workspace / "new.txt", workspace / "base.txt"
    new.write_text("\n".join(SENTENCES[:2]) + "\n", encoding="utf-8")
    base.write_text("\n".join(SENTENCES[2:5]) + "\n", encoding="utf-8")
    one = workspace / "one.txt"
    one.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    refused = cli("eval", "tts", "--checkpoint", tiny_checkpoint, "--sentences", new, "--base-sentences", one,
                  "--no-wer", "--no-mos", "--json")
    assert refused.code == 2 and "one.txt" in refused.json()["error"]
    refused = cli("eval", "tts", "--checkpoint", tiny_checkpoint, "--sentences", new, "--base-references", "espeak", "--json")
    assert refused.code == 2 and "pass --base-sentences too" in refused.json()["error"]
    assert not (tiny_checkpoint.parent / "eval_audio").exists()  # refused before any synthesis

    run = cli("eval", "tts", "--checkpoint", tiny_checkpoint, "--sentences", new, "--references", "espeak",
              "--base-sentences", base, "--base-language", "en", "--no-wer", "--no-mos")
    assert run.code == 0, run.stderr
    assert "en: 2 sentences, chance 0.5" in run.stdout and "en: 3 sentences, chance 0.3333" in run.stdout
    # one progress line over both sets (2 + 3 sentences, each set then scored in 2 steps): it never restarts
    reported = [(int(done), int(total)) for done, total in re.findall(r"eval tts: (\d+)/(\d+)", run.stderr)]
    assert {total for _, total in reported} == {9} and reported[-1] == (9, 9), reported
    assert [done for done, _ in reported] == sorted(done for done, _ in reported), reported
    entry = json.loads((tiny_checkpoint.parent / "eval.json").read_text())["checkpoints"]["step_7.pt"]
    assert (entry["sentences"], entry["chance"]) == (2, 0.5)  # the new language stays at the top
    section = entry["sections"]["base_language"]
    assert (section["language"], section["used"], section["chance"]) == ("en", 3, round(1 / 3, 4))
    assert set(section["rows"]) == {"model", "codec", "references"}
    assert section["rows"]["codec"]["dtw_identification"] >= section["chance"]
    assert section["dtw_identification"] == section["rows"]["model"]["dtw_identification"]
    assert set(section["quality"]["flags"]) == {"no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored"}
    assert section["flags_raised"] == section["quality"]["flags_raised"]
    base_audio = [Path(p) for p in section["audio"]]
    assert len(base_audio) == 3 and all(p.is_file() and p.parent.name == "en" for p in base_audio)
    assert all(Path(p).parent.name == "step_7" for p in entry["audio"])


def _entry(step: int, mcd: float, audio: list[str]) -> dict:
    row = {"mcd_db": mcd, "dtw_identification": 0.5, "sphinx_identification": None, "wer": None,
           "per_sentence": [{"sentence": "One."}, {"sentence": "Two."}]}
    codec = {"mcd_db": 3.0, "dtw_identification": 1.0, "sphinx_identification": 1.0, "wer": None}
    return {"step": step, "language": "en", "chance": 0.5, "rows": {"model": row, "codec": codec}, "audio": audio}


def test_collect_evaluations_reads_a_runs_eval_json_in_step_order(tmp_path: Path) -> None:
    from core.eval.tts import collect_evaluations, update_eval_json

    folder = tmp_path / "runs" / "r" / "checkpoints"
    (folder / "eval_audio" / "step_10").mkdir(parents=True)
    (folder / "step_10.pt").write_bytes(b"x")
    (folder / "eval_audio" / "step_10" / "001.wav").write_bytes(b"RIFF")
    update_eval_json(folder / "eval.json", "step_10.pt", _entry(10, 6.5, ["/elsewhere/001.wav", "/elsewhere/002.wav"]))
    update_eval_json(folder / "eval.json", "step_2.pt", _entry(2, 8.0, []))
    found = collect_evaluations(tmp_path / "runs" / "r")
    assert [(e["checkpoint"], e["step"], e["exists"]) for e in found] == [("step_2.pt", 2, False), ("step_10.pt", 10, True)]
    latest = found[-1]
    assert latest["mcd_db"] == 6.5 and latest["codec_mcd_db"] == 3.0 and latest["sphinx_identification"] is None
    assert latest["sentences"] == ["One.", "Two."]
    # clips are found beside eval.json even when the folder moved; a missing one is None
    assert latest["audio"] == [str(folder / "eval_audio" / "step_10" / "001.wav"), None]
    assert collect_evaluations(folder / "eval.json") == found and collect_evaluations(tmp_path) == []
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "eval.json").write_text("{not json")
    assert collect_evaluations(tmp_path / "broken") == []


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_eval_tts_speaks_a_family_run_checkpoint_with_the_runs_model_dir(cli, workspace: Path) -> None:
    """Without --model-dir, `eval tts` hands the voice the `model_dir:` of the run config beside the checkpoint;
    an empty folder there is then refused in one line naming it (nothing is synthesized)."""
    from core.cli.eval import run_model_dir
    from core.config import load_settings

    run = workspace / "runs" / "cb"
    (run / "checkpoints").mkdir(parents=True)
    (workspace / "models" / "cb-empty").mkdir(parents=True)
    (run / "config.yaml").write_text("name: cb\nfamily: chatterbox\ntask: tts\nmodel_dir: models/cb-empty\n")
    checkpoint = save_checkpoint(run / "checkpoints" / "step_1.pt", {"w": torch.zeros(2)},
                                 CheckpointMeta(family="chatterbox", task="tts", step=1))
    assert run_model_dir(checkpoint, load_settings()) == "models/cb-empty"
    assert run_model_dir(workspace / "elsewhere.pt", load_settings()) is None
    sentences = workspace / "heldout.txt"
    sentences.write_text("One sentence.\nAnother sentence.\n", encoding="utf-8")
    result = cli("eval", "tts", "--checkpoint", checkpoint, "--sentences", sentences, "--references", "espeak",
                 "--no-wer", "--device", "cpu", "--json")
    assert result.code == 2, result.stderr
    assert str(workspace / "models" / "cb-empty") in result.json()["error"]


def test_temperature_option_makes_the_own_models_speech_greedy(workspace: Path, tiny_checkpoint: Path) -> None:
    """`eval tts --temperature 0` speaks greedily: the seed no longer matters; the default (0.8) samples."""
    from core.config import load_settings
    from core.eval.voices import load_eval_voice

    settings = load_settings()
    prompt = sorted((workspace / "datasets" / "en").rglob("*.wav"))[0]

    def tokens(options: dict, seed: int) -> list[int]:
        voice = load_eval_voice(tiny_checkpoint, settings, "cpu", options=options)
        return voice.speak(SENTENCES[0], prompt, 1.0, seed, "en")[1]["tokens"]

    assert tokens({"temperature": 0.0}, 0) == tokens({"temperature": 0.0}, 1)
    assert tokens({}, 0) != tokens({}, 1)
