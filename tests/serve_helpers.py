"""Start the real speech server (`python -m core serve`) in a subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import soundfile as sf

from tests.browser_helpers import REPO_ROOT, free_port


@dataclass
class ServerProcess:
    """A running speech server: its process, base URL and log file."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_text(self) -> str:
        """Return what the server printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""


def write_voice(path: Path, frequency: float = 220.0, rate: int = 16000) -> Path:
    """Write one second of a sine tone as a reference clip and return its path."""
    t = np.arange(rate) / rate
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * frequency * t)).astype("float32"), rate)
    return path


@contextmanager
def running_server(workspace: Path, checkpoint: Path, voices: Path, log: Path, *options: str,
                   env: dict[str, str] | None = None, timeout: float = 120.0) -> Iterator[ServerProcess]:
    """Start `python -m core serve` for `checkpoint` with `options`; yield once /health answers; stop it
    with SIGINT after (and kill it if it does not stop within 30 s)."""
    port = free_port()
    command = [sys.executable, "-m", "core", "serve", "--checkpoint", str(checkpoint), "--voices", str(voices),
               "--port", str(port), *options]
    environment = {**os.environ, "LINGUAFORGE_WORKSPACE": str(workspace), **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}:\n{server.log_text()}")
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /health within {timeout} s:\n{server.log_text()}")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class FamilyServer:
    """What `running_server` needs to serve a reduced published family: the checkpoint, the voices folder,
    the serve options and the environment; `model` is the id clients send."""

    workspace: Path
    checkpoint: Path
    options: list[str]
    env: dict[str, str]
    model: str

    def run(self, *extra: str, timeout: float = 600.0) -> Any:
        """Return the `running_server` context of this family with `extra` options (log: workspace/serve.log)."""
        return running_server(self.workspace, self.checkpoint, self.workspace / "voices", self.workspace / "serve.log",
                              *self.options, *extra, env=self.env, timeout=timeout)


def chatterbox_server(workspace: Path, max_seconds: float, cfm_steps: int | None = 2) -> FamilyServer:
    """Build the reduced T3 extended to Amharic with the full published S3Gen (random weights) and a voice
    `anna` in `workspace`; return its server speaking Amharic greedily, at most `max_seconds` a request
    (`cfm_steps` None: S3Gen's own 10)."""
    from tests.chatterbox_helpers import extend_to_amharic, make_chatterbox_speech_folder

    model_dir = make_chatterbox_speech_folder(workspace / "models" / "chatterbox")
    extend_to_amharic(workspace, model_dir)
    return _amharic_t3_server(workspace, model_dir, max_seconds, cfm_steps)


def turbo_server(workspace: Path, max_seconds: float, cfm_steps: int | None = None) -> FamilyServer:
    """Build the reduced Turbo T3 extended to Amharic with a full `S3Gen(meanflow=True)` (random weights) and a
    voice `anna` in `workspace`; return its server speaking Amharic greedily, at most `max_seconds` a request
    (`cfm_steps` None: the meanflow S3Gen's own 2)."""
    from tests.turbo_helpers import extend_turbo_to_amharic, make_turbo_speech_folder

    model_dir = make_turbo_speech_folder(workspace / "models" / "turbo")
    extend_turbo_to_amharic(workspace, model_dir)
    return _amharic_t3_server(workspace, model_dir, max_seconds, cfm_steps)


def _amharic_t3_server(workspace: Path, model_dir: Path, max_seconds: float, cfm_steps: int | None) -> FamilyServer:
    """Return the server of `workspace`'s `checkpoints/t3_am.safetensors` with `model_dir`'s speech models and a voice
    `anna`, speaking Amharic greedily."""
    write_voice(workspace / "voices" / "anna.wav")
    options = ["--model-dir", str(model_dir), "--tokenizer", str(workspace / "tokenizers" / "am.json"), "--language", "am",
               "--temperature", "0", "--max-seconds", str(max_seconds)]
    options += ["--option", f"cfm_steps={cfm_steps}"] if cfm_steps is not None else []
    return FamilyServer(workspace, workspace / "checkpoints" / "t3_am.safetensors", options, {}, "t3_am")


def indextts_server(workspace: Path, max_seconds: float, diffusion_steps: int | None = 2,
                    audible: bool = False) -> FamilyServer:
    """Build the reduced IndexTTS2 speech folder (a 1-layer GPT at width 1280, s2mel, BigVGAN; random weights),
    its settings file and a voice `anna` in `workspace`; return the server of its published `gpt.pth`
    (`--family indextts`), greedy, at most `max_seconds` a request (`diffusion_steps` None: its own 25).
    `audible` scales BigVGAN's last layer by 1e-3: a random BigVGAN clips every sample at ±1."""
    import torch
    import yaml

    from core.config import SETTINGS_ENV
    from tests.indextts_helpers import W2V_LAYERS, build_model_folder, build_speech_folder

    folder = build_model_folder(workspace / "models" / "IndexTTS-2")
    speech = build_speech_folder(folder, workspace / "models" / "IndexTTS-2-speech")
    if audible:
        generator = speech / "bigvgan" / "bigvgan_generator.pt"
        weights = torch.load(generator, weights_only=True)
        weights["generator"]["conv_post.weight_g"] *= 1e-3
        torch.save(weights, generator)
    settings = workspace / "settings.yaml"
    settings.write_text(yaml.safe_dump({"families": {"indextts": {"model_dir": str(speech), "w2v_layer": W2V_LAYERS}}}))
    write_voice(workspace / "voices" / "anna.wav")
    options = ["--family", "indextts", "--tokenizer", str(speech / "bpe.model"), "--temperature", "0",
               "--max-seconds", str(max_seconds)]
    options += ["--option", f"diffusion_steps={diffusion_steps}"] if diffusion_steps is not None else []
    return FamilyServer(workspace, speech / "gpt.pth", options, {SETTINGS_ENV: str(settings)}, "gpt")


def csm_server(workspace: Path, max_seconds: float) -> FamilyServer:
    """Build the reduced CSM + Mimi folder with its checkpoint grown to Amharic (`tests.csm_helpers.csm_workspace`)
    in `workspace` and a voice `anna`, an Amharic espeak clip with its transcript beside it (`anna.txt`: the
    context segment's text); return its server speaking greedily, at most `max_seconds` a request."""
    from core.data.manifest import load_manifest_rows
    from tests.csm_helpers import csm_workspace

    csm_workspace(workspace, per_language=2)
    prompt = load_manifest_rows(workspace / "datasets" / "am" / "manifest.jsonl")[0]
    voice = workspace / "voices" / "anna.wav"
    voice.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(prompt.path, voice)
    voice.with_suffix(".txt").write_text(prompt.text, encoding="utf-8")
    options = ["--model-dir", str(workspace / "models" / "csm"), "--tokenizer", str(workspace / "tokenizers" / "am.json"),
               "--temperature", "0", "--max-seconds", str(max_seconds)]
    return FamilyServer(workspace, workspace / "checkpoints" / "csm_am.safetensors", options, {}, "csm_am")
