"""Quickstart end to end on reduced presets: real espeak speech, real jobs, real training.

The TTS journey runs as the dashboard's button runs it (a `quickstart.tts` job whose stages are
jobs consumed by the same worker) with a preset cut down to a few dozen steps; the LM journey runs
as `python -m core quickstart lm` does (stages consumed by a worker inside the command). Both check the numbers the report
promises: zero `<unk>` on Amharic, English encodings unchanged, base rows bit-identical, Amharic
validation mel_loss lower at the end than at the start, and bits per byte for two vocabulary sizes.
"""

from __future__ import annotations

import json
import resource
import signal
from pathlib import Path

import pytest
import torch
import yaml

from core.checkpoint import load_checkpoint
from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from core.errors import InputError
from core.runs import RunFolder
from journeys.quickstart import load_preset
from journeys.stages import HANDLED_SIGNALS, StageRunner
from jobs.kinds import is_gpu_kind
from jobs.runner import JobRunner, start_worker
from tests.data_helpers import require_espeak, run_cli

CATALOGUE = cli_catalogue()
REDUCED_TTS = {
    "journey": "tts",
    "sample": {"per_language": 16, "recombined": 8},
    "val_ratio": 0.25,
    "codec": {"codebook_size": 64, "iterations": 20, "hop_length": 512},
    "tokenizer": {"base_size": 200, "extended_size": 700},
    "model": {"preset": "tiny", "max_speech_tokens": 300, "progress_alignment": True},
    "base": {"steps": 30, "batch_size": 4, "lr": 2.0e-3, "warmup_steps": 3},
    "finetune": {"steps": 20, "batch_size": 4, "lr": 2.0e-3, "warmup_steps": 3, "val_every": 10,
                 "loss": {"text_weight": 0.0, "mel_weight": 1.0}},
    "synthesis": {"sentences": 1, "temperature": 0.8},
    "eval": {"sentences": 2},
    "cpu_threads": 1,
    "stage_timeout_s": 600,
}
REDUCED_LM = {
    "journey": "lm",
    "sweep_sizes": [300, 600, 5000],
    "compare_sizes": [300, 600],
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_text_tokens": 64},
    "train": {"steps": 30, "batch_size": 16, "lr": 3.0e-3, "warmup_steps": 5, "val_every": 15},
    "val_ratio": 0.1,
    "samples": {"prompt": "The ", "temperatures": [0.5, 1.2], "max_new_tokens": 12},
}


def _preset(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.slow
def test_tts_quickstart_job_learns_amharic_and_keeps_base_rows(workspace: Path, tmp_path: Path) -> None:
    """What the dashboard's button does: a `quickstart.tts` job whose stages go to the same worker."""
    require_espeak()
    jobs = JobRunner(catalogue=CATALOGUE)
    worker = start_worker(jobs.settings)
    try:
        # a job's paths are confined to the workspace, so the preset lives there (as the dashboard's would)
        job_id = jobs.submit("quickstart.tts", {"preset": str(_preset(workspace, "reduced", REDUCED_TTS)), "name": "qs",
                                                "external_worker": True})
        job = jobs.wait(job_id, 600)
    finally:
        worker.stop()
    assert (job["status"], job["gpu"]) == ("succeeded", 0), jobs.read_log(job_id, tail=40)
    report = job["artifacts"]
    assert report == json.loads((workspace / "runs" / "qs" / "report.json").read_text())

    # the sample's recombined clips, the 31.25 codes/s codec and the progress-aligned model, as the quick preset has them
    assert (report["sample"]["recombined"], report["sample"]["clips"], report["codec"]["frame_rate"]) == (8, 48, 31.25)
    am_texts = [json.loads(line)["text"] for line in Path(report["sample"]["manifests"]["am"]).read_text().splitlines()]
    assert len(am_texts) == 24 and len(set(am_texts)) > 16
    kinds = {stage["name"]: stage["kind"] for stage in report["stages"]}
    assert kinds["sample"] == "dataset.sample" and kinds["train.finetune"] == "train" and kinds["prune"] == "prune"
    for stage in report["stages"]:  # every stage, the starting validation included, is a job of its own
        assert stage["seconds"] >= 0
        job = jobs.get_job(stage["job_id"])
        assert (job["kind"], job["status"]) == (stage["kind"], "succeeded")
        assert job["gpu"] == is_gpu_kind(stage["kind"])
    assert kinds["validate.start"] == "validate" and is_gpu_kind("validate")  # it builds the model: a GPU slot
    for run in ("base_run", "finetune_run"):  # the preset's cpu_threads reached each training
        assert json.loads((Path(report["training"][run]) / "status.json").read_text())["cpu_threads"] == 1

    tokenizer = report["tokenizer"]
    assert (tokenizer["base_size"], tokenizer["size"]) == (200, 700)
    assert tokenizer["unk_rate_new_language"] == 0.0
    assert tokenizer["base_drift"]["lines_checked"] > 100 and tokenizer["base_drift"]["lines_changed"] == 0

    freeze = report["freeze"]
    assert freeze["base_rows_sha256_before"] == freeze["base_rows_sha256_after"]
    assert freeze["trainer"]["start"] == freeze["trainer"]["now"] and freeze["frozen_rows"] == 200
    base = load_checkpoint(report["training"]["base_run"] + "/checkpoints/step_0000030.pt").state_dict
    final = load_checkpoint(report["checkpoint"]).state_dict
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert final[key].shape[0] == 700 and torch.equal(final[key][:200], base[key][:200]), key
    assert 2.0 < final["speech_rate"].item() < 20.0  # codes per text position, carried through prune
    assert report["eval"]["quality"]["length_bounds_source"] == "training data"
    assert report["eval"]["quality"]["length_bounds"] == load_checkpoint(report["checkpoint"]).meta["length_bounds"]

    training = report["training"]
    assert training["val_samples"] >= 2 and training["finetune_steps"] == 20
    assert training["val_mel_loss_end"] < training["val_mel_loss_start"] - 0.2, training

    assert {a["language"] for a in report["audio"]} == {"am", "en"}
    for clip in report["audio"]:
        assert Path(clip["path"]).stat().st_size > 1000 and clip["rtf"] > 0
    assert set(report["eval"]["rows"]) == {"model", "codec", "references"}
    assert report["eval"]["rows"]["codec"]["mcd_db"] > 0

    # what English kept: the same measures on held-out English sentences before (the English base checkpoint)
    # and after (the final Amharic one), and the English validation loss at the start and end of the fine-tune
    english = report["base_language"]
    before, after = english["before"], english["after"]
    assert before["checkpoint"].endswith("step_0000030.pt") and after["checkpoint"] == report["checkpoint"]
    assert (before["step"], after["step"], before["sentences"], after["sentences"]) == (30, 20, 2, 2)
    for measured in (before, after):
        assert set(measured["rows"]) == {"model", "codec", "references"}
        assert measured["rows"]["codec"]["dtw_identification"] >= measured["chance"] == 0.5
        assert measured["rows"]["model"]["mcd_db"] > measured["rows"]["codec"]["mcd_db"] > 0
        assert measured["rows"]["references"]["sphinx_identification"] is not None  # English: PocketSphinx judges too
        assert set(measured["quality"]["flags"]) == {"no_stop", "length_out_of_range", "loops", "prompt_copying",
                                                     "text_ignored"}
        assert all(Path(clip).is_file() for clip in measured["audio"])
    assert all(Path(clip).parent.name == "en" for clip in after["audio"])  # beside, not over, the Amharic clips
    # English is judged by the length range of English speech: the base model's training data, the references after
    assert (before["quality"]["length_bounds_source"], after["quality"]["length_bounds_source"]) == (
        "training data", "evaluation references")
    assert english["val_samples"] >= 2
    assert english["val_base_loss_start"] > 0 and english["val_base_loss_end"] > 0
    assert english["val_base_loss_change"] == round(
        (english["val_base_loss_end"] - english["val_base_loss_start"]) / english["val_base_loss_start"], 4)
    assert english["val_base_mel_loss_start"] == english["val_base_loss_start"]  # mel-only loss in this preset
    # the final evaluation (its pruned checkpoint lies outside runs/) is in TensorBoard beside the fine-tune's curves
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(RunFolder(Path(training["finetune_run"])).tensorboard))
    board.Reload()
    assert [(p.step, round(p.value, 4)) for p in board.Scalars("eval/dtw_identification")] == [
        (20, report["eval"]["rows"]["model"]["dtw_identification"])]
    eval_json = json.loads((Path(report["checkpoint"]).parent / "eval.json").read_text())["checkpoints"]
    assert eval_json["am.safetensors"]["language"] == "am"  # Amharic at the top, English in its section
    assert eval_json["am.safetensors"]["sections"]["base_language"]["rows"]["model"]["mcd_db"] == \
        after["rows"]["model"]["mcd_db"]
    verdict = english["verdict"]  # in words, by the thresholds it carries
    assert verdict["verdict"] in ("kept", "degraded", "lost") and verdict["loss_change"] == english["val_base_loss_change"]
    assert verdict["thresholds"] == {"kept_loss_rise": 0.1, "kept_identification_drop": 0.1, "lost_loss_rise": 0.5,
                                     "lost_identification_drop": 0.5}
    assert english["summary"].startswith(f"English **{verdict['verdict']}** through the Amharic fine-tune: the model "
                                         "predicts held-out English speech ")
    assert "; held-out English sentences identified " in english["summary"]
    assert report["new_language"]["summary"].startswith("Amharic: held-out sentences identified ")
    # the fine-tune kept hearing English: the default retention replays the English clips in every batch
    assert report["retention"]["strategy"] == "replay" and report["retention"]["share"] == 0.25
    assert report["retention"]["replay_manifest"] == report["sample"]["manifests"]["en"]
    finetune_status = json.loads((Path(training["finetune_run"]) / "status.json").read_text())
    assert finetune_status["replay"]["per_batch"] == 1 and finetune_status["replay"]["of_batch"] == 4

    markdown = (workspace / "runs" / "qs" / "report.md").read_text()
    assert "**unchanged**" in markdown and f"{training['val_mel_loss_start']:.4g}" in markdown
    assert "## English kept (the base language)" in markdown and english["summary"] in markdown
    assert f"Verdict: **{verdict['verdict']}**. {verdict['words']}" in markdown
    assert report["new_language"]["summary"] in markdown
    assert f"{english['val_base_loss_start']:.4g}" in markdown and f"{english['val_base_loss_end']:.4g}" in markdown
    assert "](audio/am_1.wav)" in markdown


@pytest.mark.slow
def test_lm_quickstart_compares_bits_per_byte_and_samples_two_temperatures(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = workspace / "corpus.txt"
    monkeypatch.chdir(workspace)  # command-line paths resolve against the current directory
    from core.data.sample_text import ENGLISH_SENTENCES, SPANISH_SENTENCES

    corpus.write_text("\n".join(ENGLISH_SENTENCES + SPANISH_SENTENCES) + "\n", encoding="utf-8")
    run = run_cli("quickstart", "lm", "--corpus", "corpus.txt", "--preset", _preset(tmp_path, "lm-small", REDUCED_LM),
                  "--name", "lmqs", "--json")
    assert run.code == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    sweep_errors = {row["size"]: row["error"] for row in report["sweep"]["rows"]}
    assert sweep_errors[300] is None and "too large" in sweep_errors[5000]
    sizes = [model["vocab_size"] for model in report["models"]]
    assert len(sizes) >= 2 and {300, 600} <= set(sizes)
    for model in report["models"]:
        assert 0 < model["val_bpb_end"] < model["val_bpb_start"], model
    assert report["best_vocab_size"] == min(report["models"], key=lambda m: m["val_bpb_end"])["vocab_size"]
    assert [s["temperature"] for s in report["samples"]] == [0.5, 1.2]
    assert all(s["text"] for s in report["samples"])
    assert all(JobRunner(catalogue=CATALOGUE).get_job(s["job_id"])["status"] == "succeeded" for s in report["stages"] if s["job_id"])
    assert "val bpb end" in (workspace / "runs" / "lmqs" / "report.md").read_text()


def test_bad_presets_and_existing_runs_are_refused(workspace: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="quick"):
        load_preset("nope", "tts")
    with pytest.raises(InputError, match="not a tts quickstart preset"):
        load_preset("lm", "tts")
    assert {load_preset("quick", "tts")["preset"], load_preset("full", "tts")["preset"]} == {"quick", "full"}
    broken = _preset(tmp_path, "broken", {**REDUCED_TTS, "sample": {"per_language": 10000}})
    run = run_cli("quickstart", "tts", "--preset", broken, "--inline")
    assert run.code == 2 and "per_language 10000" in run.stderr
    broken = _preset(tmp_path, "broken2", {**REDUCED_TTS, "sample": {"per_language": 10, "recombined": -5}})
    run = run_cli("quickstart", "tts", "--preset", broken, "--inline")
    assert run.code == 2 and "sample.recombined -5" in run.stderr and not (workspace / "datasets").exists()
    broken = _preset(tmp_path, "broken3", {**REDUCED_TTS, "codec": {"codebook_size": 64, "iterations": 20, "hop_length": 1024}})
    run = run_cli("quickstart", "tts", "--preset", broken, "--inline")
    assert run.code == 2 and "codec.hop_length 1024: choose 1 to 512" in run.stderr and not (workspace / "datasets").exists()
    broken = _preset(tmp_path, "broken4", {**REDUCED_TTS, "cpu_threads": 0})
    run = run_cli("quickstart", "tts", "--preset", broken, "--inline")
    assert run.code == 2 and run.stderr.count("\n") == 1 and not (workspace / "datasets").exists()
    assert f"{broken}: cpu_threads: 0: give `auto` (one thread per core) or a whole number from 1 to 1024" in run.stderr
    (workspace / "runs" / "taken").mkdir(parents=True)
    run = run_cli("quickstart", "lm", "--name", "taken", "--inline")
    assert run.code == 2 and "runs/taken already exists" in run.stderr


def test_quickstart_jobs_validate_like_the_cli_and_hold_no_gpu_slot() -> None:
    assert CATALOGUE.build_argv("quickstart.tts", {"preset": "quick", "external_worker": True}) == [
        "quickstart", "tts", "--preset", "quick", "--external-worker", "--json"]
    with pytest.raises(InputError, match="not allowed with"):
        CATALOGUE.build_argv("quickstart.lm", {"inline": True, "external_worker": True})
    assert not is_gpu_kind("quickstart.tts") and not is_gpu_kind("quickstart.lm") and is_gpu_kind("train")


def test_embedded_worker_leaves_ctrl_c_and_sigterm_to_the_command(workspace: Path) -> None:
    """Huey's consumer installs its own handlers, which would swallow Ctrl-C and a job's SIGTERM."""
    before = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    with StageRunner(load_settings(), "queue", embedded_worker=True, catalogue=CATALOGUE) as stages:
        assert stages._worker is not None
        assert {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS} == before


def test_stages_report_the_cpu_seconds_of_their_job_processes(workspace: Path) -> None:
    """A stage consumed by the worker inside the command counts its job process's CPU time (the figure to judge
    a preset by on a loaded machine)."""
    corpus = workspace / "corpus.txt"
    corpus.write_text("\n".join(f"the quick brown fox number {i} jumps over the lazy dog" for i in range(200)) + "\n")
    params = {"corpus": [str(corpus)], "vocab_size": 60, "output": str(workspace / "tok.model")}
    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before = children_cpu()
    with StageRunner(load_settings(), "queue", embedded_worker=True, catalogue=CATALOGUE) as stages:
        stages.run("tokenizer.base", "tokenizer.train", params)
        job_process_cpu = children_cpu() - before
    [summary] = [record.summary() for record in stages.records]
    # the stage's job process ran and was reaped inside the stage, and the stage's figure includes its CPU time
    assert job_process_cpu > 0 and summary["seconds"] > 0
    assert summary["cpu_seconds"] >= round(job_process_cpu, 2) - 0.01, (summary, job_process_cpu)
