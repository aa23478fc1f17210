"""Every family under torchrun: two gloo ranks on the CPU train exactly as one process on the doubled batch.

One row of FAMILIES per model family — LinguaForge's own LM and TTS, Chatterbox T3, Chatterbox-Turbo's
GPT-2 T3, IndexTTS2's GPT, Sesame CSM (a family added later is one more row) — each a workspace built by the family's
test helpers, with a base checkpoint whose first rows are frozen. For each row, full fine-tune and LoRA under two ranks
(`python -m torch.distributed.run --standalone --nproc_per_node 2 -m tests.ranks_train`: `core train`
of both runs, one start of the ranks) with `batch.size` B end with the same weights on both ranks
(status.json `rank_weights_sha256`), the frozen base rows bit-identical to the start, and every
train metric at every step (loss, each loss part, gradient norm, learning rate) and the validation
equal, within float tolerance, to one process (`core.recipe.train` here) with `batch.size` 2B. The
published families train with `model.dropout: 0` (dropout masks cannot be split over ranks). The own
TTS row mixes replay clips into every batch and tracks its speech rate over the global batch, and its
two-rank full fine-tune evaluates every checkpoint (rank 0 only; periodic evaluation speaks from full
checkpoints, not adapters).

A run stopped (STOP file) under two ranks through `-m core train` resumes under one: with the doubled
batch it continues exactly as one uninterrupted process; with the same `batch.size` it continues at
the same share of the epoch and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
import yaml

from core.checkpoint import load_checkpoint
from core.config import load_settings
from core.recipe import train
from core.training.embeddings import extend_checkpoint
from core.training.run_config import run_config_from_dict
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.filterwarnings("ignore")]
torch.set_num_threads(1)

LORA = {"kind": "lora", "rank": 4, "alpha": 8.0, "dropout": 0.0}
STEPS = 3
CURVE = ("loss", "text_loss", "mel_loss", "backbone_loss", "depth_loss", "grad_norm", "lr")  # the train metrics compared step by step


def _lm(root: Path) -> dict[str, Any]:
    from tests.trainer_helpers import extended_lm_workspace

    extended_lm_workspace(root)
    return {"preset": "tiny-lm", "tokenizer": "tokenizers/en_plus.json", "base_checkpoint": "checkpoints/en_plus.pt",
            "data": {"corpus": ["corpus/en.txt"], "val_ratio": 0.1},
            "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "max_text_tokens": 32},
            "optim": {"lr": 3.0e-3, "warmup_steps": 1, "weight_decay": 0.1}}


def _tts(root: Path) -> dict[str, Any]:
    from tests.trainer_helpers import tts_workspace

    tts_workspace(root)
    run = {"preset": "new-language", "codec": "codecs/c64.pt", "data": {"val_ratio": 0.2},
           "model": {"preset": "tiny", "max_speech_tokens": 400, "progress_alignment": True},
           "optim": {"lr": 2.0e-3, "warmup_steps": 1}}
    base = train(run_config_from_dict({**run, "name": "en-base", "tokenizer": "tokenizers/en.model", "batch": {"size": 4},
                                       "data": {**run["data"], "manifest": "datasets/sample/en.jsonl"},
                                       "schedule": {"max_steps": 2, "val_every": 2, "save_every": 2}}), None, load_settings())
    extend_checkpoint(base.last_checkpoint, root / "tokenizers/en.model", root / "tokenizers/en_am.model",
                      root / "checkpoints" / "en_am.pt")
    return {**run, "tokenizer": "tokenizers/en_am.model", "base_checkpoint": "checkpoints/en_am.pt",
            "data": {"manifest": "datasets/sample/manifest.jsonl", "val_ratio": 0.2,
                     "replay": {"manifest": "datasets/sample/en.jsonl", "share": 0.25}}}


def _chatterbox(root: Path) -> dict[str, Any]:
    from tests.chatterbox_helpers import chatterbox_workspace

    chatterbox_workspace(root)
    return {"family": "chatterbox", "model_dir": "models/chatterbox", "tokenizer": "tokenizers/am.json",
            "base_checkpoint": "checkpoints/t3_am.safetensors", "model": {"dropout": 0.0},
            "data": {"manifest": "datasets/espeak/manifest.jsonl", "val_ratio": 0.2},
            "optim": {"lr": 2.0e-3, "weight_decay": 0.1, "warmup_steps": 1}}


def _turbo(root: Path) -> dict[str, Any]:
    from tests.turbo_helpers import turbo_workspace

    turbo_workspace(root, per_language=5)  # 4 training clips and 1 validation clip: one global batch of 4
    return {"family": "chatterbox-turbo", "model_dir": "models/turbo", "tokenizer": "tokenizers/am.json",
            "base_checkpoint": "checkpoints/t3_am.safetensors", "model": {"dropout": 0.0},
            "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.2},
            "optim": {"lr": 2.0e-3, "weight_decay": 0.1, "warmup_steps": 1}}


def _indextts(root: Path) -> dict[str, Any]:
    from tests.indextts_helpers import W2V_LAYERS, amharic_workspace, build_model_folder

    folder = build_model_folder(root / "models" / "IndexTTS-2")
    amharic_workspace(root, folder)
    (root / "settings.yaml").write_text(yaml.safe_dump({"families": {"indextts": {"w2v_layer": W2V_LAYERS}}}))
    return {"family": "indextts", "model_dir": "models/IndexTTS-2", "tokenizer": "tokenizers/am8.model",
            "base_checkpoint": "checkpoints/gpt_am8.pt", "model": {"dropout": 0.0},
            "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prompts_per_target": 1},
            "freeze": {"mode": "base-rows", "until": "auto"},
            "optim": {"lr": 1.0e-2, "warmup_steps": 0, "weight_decay": 0.1}}


def _csm(root: Path) -> dict[str, Any]:
    from tests.csm_helpers import csm_workspace

    csm_workspace(root, per_language=5)  # 4 training clips and 1 validation clip: one global batch of 4
    return {"family": "csm", "model_dir": "models/csm", "tokenizer": "tokenizers/am.json",
            "base_checkpoint": "checkpoints/csm_am.safetensors", "model": {"dropout": 0.0},
            "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.2},
            "optim": {"lr": 3.0e-3, "weight_decay": 0.1, "warmup_steps": 1}}


@dataclass(frozen=True)
class Row:
    """One family: its workspace (returns the run config common to its runs), the batch per rank, and what only
    the two-rank full fine-tune adds (nothing that changes the numbers)."""

    name: str
    workspace: Callable[[Path], dict[str, Any]]
    batch: int
    under_ranks: dict[str, Any] = field(default_factory=dict)


FAMILIES = [
    Row("linguaforge-lm", _lm, 4),
    Row("linguaforge-tts", _tts, 4, {"schedule": {"eval_every": 1}, "eval": {"count": 2}}),
    Row("chatterbox", _chatterbox, 2),
    Row("chatterbox-turbo", _turbo, 2),
    Row("indextts", _indextts, 1),
    Row("csm", _csm, 2),
]


@dataclass
class Workspace:
    root: Path
    run: dict[str, Any]
    row: Row


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LINGUAFORGE_WORKSPACE": str(root)}
    settings = root / "settings.yaml"
    if settings.is_file():
        env["LINGUAFORGE_SETTINGS"] = str(settings)
    return env


@pytest.fixture(params=FAMILIES, ids=[row.name for row in FAMILIES])
def family_ws(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workspace]:
    row = request.param
    root = tmp_path / row.name
    root.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in _env(root).items():
            patch.setenv(key, value)
        run = row.workspace(root)
        for key, value in _env(root).items():  # the workspace may have written a settings file
            patch.setenv(key, value)
        yield Workspace(root, run, row)


def _config(ws: Workspace, name: str, batch: int, **extra: Any) -> dict[str, Any]:
    data = {**ws.run, "name": name, "batch": {"size": batch},
            "schedule": {"max_steps": STEPS, "val_every": STEPS, "save_every": STEPS, "log_every": 1, "keep_last": 1}}
    for key, value in extra.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return data


def _torchrun(root: Path, runs: list[dict[str, Any]], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Train `runs` one after another under two gloo ranks (`tests.ranks_train`: one start of the ranks for all)."""
    paths = []
    for data in runs:
        path = root / "runs_cfg" / f"{data['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        paths.append(str(path))
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "tests.ranks_train", *paths],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=_env(root),
    )


def _lines(root: Path, run: str, split: str) -> dict[int, dict[str, float]]:
    lines = (root / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return {m["step"]: m for m in map(json.loads, lines) if m["split"] == split}


def _status(root: Path, run: str) -> dict[str, Any]:
    return json.loads((root / "runs" / run / "status.json").read_text())


def assert_same_curve(got: dict[int, dict[str, float]], want: dict[int, dict[str, float]]) -> None:
    """Assert two runs logged the same train metrics (CURVE, those logged) at the same steps, within float tolerance."""
    assert sorted(got) == sorted(want)
    for step in want:
        names = [n for n in CURVE if n in want[step]]
        assert "loss" in names and all(n in got[step] for n in names), (step, got[step])
        for name in names:
            assert got[step][name] == pytest.approx(want[step][name], rel=1e-4, abs=1e-6), (step, name, got[step], want[step])


def test_two_ranks_train_as_one_process_on_the_doubled_batch(family_ws: Workspace) -> None:
    ws, row = family_ws, family_ws.row
    modes = {"full": {}, "lora": {"adapter": LORA}}
    started = time.monotonic()
    alone = {mode: train(run_config_from_dict(_config(ws, f"{mode}-one", 2 * row.batch, **extra), f"{mode}-one.yaml"),
                         None, load_settings()) for mode, extra in modes.items()}
    single_s = time.monotonic() - started
    modes["full"].update(row.under_ranks)  # the one-process runs are done: what only two ranks add
    proc = _torchrun(ws.root, [_config(ws, f"{mode}-two", row.batch, **extra) for mode, extra in modes.items()])
    print(f"{row.name}: one process {single_s:.1f}s for both runs, two ranks {time.monotonic() - started - single_s:.1f}s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for mode, one in alone.items():
        check_same_training(ws, mode, one)


def check_same_training(ws: Workspace, mode: str, one: Any) -> None:
    """Assert the two-rank run `<mode>-two` trained as the one-process run `one` (`<mode>-one`) did."""
    status = _status(ws.root, f"{mode}-two")
    assert status["state"] == "finished" and status["step"] == STEPS and status["world_size"] == 2
    hashes = status["rank_weights_sha256"]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    sha = status["base_rows_sha256"]
    assert sha["start"] is not None and sha["start"] == sha["now"] == one.base_rows_sha256["start"]
    assert (status["adapter"] is not None) == (mode == "lora")

    assert_same_curve(_lines(ws.root, f"{mode}-two", "train"), _lines(ws.root, f"{mode}-one", "train"))
    val_two, val_one = _lines(ws.root, f"{mode}-two", "val"), _lines(ws.root, f"{mode}-one", "val")
    assert sorted(val_two) == sorted(val_one)
    for step in val_one:
        for name, value in val_one[step].items():
            if name.endswith("loss"):
                assert val_two[step][name] == pytest.approx(value, rel=1e-5), (step, name)
    two_ranks = load_checkpoint(ws.root / "runs" / f"{mode}-two" / "checkpoints" / f"step_{STEPS:07d}.pt")
    alone = load_checkpoint(Path(one.last_checkpoint))
    assert (two_ranks.extra["world_size"], alone.extra["world_size"]) == (2, 1)
    assert two_ranks.extra["data_position"] == alone.extra["data_position"]  # the same global batches, the same position
    if "speech_rate" in alone.state_dict:  # a statistic of the global batch (own TTS, progress alignment), not of a rank's
        assert float(two_ranks.state_dict["speech_rate"]) == pytest.approx(float(alone.state_dict["speech_rate"]), rel=1e-6)
    if mode == "full" and ws.row.under_ranks.get("schedule", {}).get("eval_every"):  # rank 0 evaluated the last checkpoint
        evals = _lines(ws.root, f"{mode}-two", "eval")
        assert list(evals) == [STEPS] and (ws.root / "runs" / f"{mode}-two" / "checkpoints" / "eval.json").is_file()
    if "replay" in ws.run["data"]:
        assert status["replay"]["per_batch"] == 1 and one.info["replay"]["per_batch"] == 2  # 1 of 4 per rank, 2 of 8


@pytest.fixture
def lm_ws(workspace: Path) -> Workspace:
    from tests.trainer_helpers import lm_config, lm_workspace

    lm_workspace(workspace)
    run = yaml.safe_load(lm_config(workspace, "template").read_text())
    run.pop("name")
    return Workspace(workspace, run, FAMILIES[0])


def _stopped_under_two_ranks(ws: Workspace, data: dict[str, Any]) -> int:
    """Start `data` under two ranks, touch its STOP file once it logged step 2, wait; return the step it stopped at."""
    path = ws.root / "runs_cfg" / f"{data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = ws.root / "runs" / data["name"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "core", "train", "--config", str(path), "--json"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(ws.root),
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (run_dir / "metrics.jsonl").is_file() and len(_lines(ws.root, data["name"], "train")) >= 2:
                (run_dir / "STOP").touch()
                break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "\n".join(line for line in err.splitlines() if "rror" in line or "what()" in line)[-6000:]
    status = _status(ws.root, data["name"])
    assert status["state"] == "stopped" and status["world_size"] == 2, status
    assert status["rank_weights_sha256"][0] == status["rank_weights_sha256"][1]
    return int(status["step"])


def test_a_run_stopped_under_two_ranks_resumes_under_one(lm_ws: Workspace) -> None:
    ws = lm_ws
    schedule = {"max_steps": 400, "val_every": 400, "save_every": 400, "log_every": 1}
    stop = _stopped_under_two_ranks(ws, {**ws.run, "name": "paused", "batch": {"size": 4}, "schedule": schedule})
    assert 2 <= stop < 400
    checkpoint = ws.root / "runs" / "paused" / "checkpoints" / f"step_{stop:07d}.pt"
    assert load_checkpoint(checkpoint).extra["data_position"]["global_batch"] == 8

    # one process with the doubled batch: the same global batches, so it continues as one uninterrupted process
    settings = load_settings()
    doubled = {**ws.run, "name": "paused", "batch": {"size": 8}, "schedule": schedule}
    resumed = train(run_config_from_dict(doubled, "paused.yaml"), None, settings, resume="auto", max_steps=stop + 2)
    assert resumed.state == "finished" and resumed.step == stop + 2 and resumed.info["world_size"] == 1
    straight = train(run_config_from_dict({**doubled, "name": "straight"}, "straight.yaml"), None, settings,
                     max_steps=stop + 2)
    assert_same_curve(_lines(ws.root, "paused", "train"), _lines(ws.root, "straight", "train"))
    final = {n: load_checkpoint(Path(r.last_checkpoint)).state_dict for n, r in (("resumed", resumed), ("straight", straight))}
    for key, value in final["straight"].items():
        assert torch.allclose(final["resumed"][key], value, atol=1e-5), key

    # the same batch.size under one process: a global batch of 4, not 8 — the epoch goes on at the same share
    same = {**ws.run, "name": "same-batch", "batch": {"size": 4}, "schedule": schedule}
    result = train(run_config_from_dict(same, "same-batch.yaml"), None, settings, resume=str(checkpoint), max_steps=stop + 1)
    assert result.state == "finished" and result.step == stop + 1
    log = (ws.root / "runs" / "same-batch" / "log.txt").read_text()
    assert "the checkpoint's global batch was 8 samples (2 ranks), this run's is 4 (1 rank)" in log, log
