"""Full-size rehearsal on the CPU: each published family at its published shape through the commands a user runs.

Chatterbox: the multilingual T3 (`Llama_520M`, 2,454 text rows) with the full S3Gen and VoiceEncoder;
IndexTTS2: the GPT at the published config.yaml (1280 × 24 and its conformer encoders) with the
full-size w2v-BERT 2.0, MaskGCT semantic codec, CAMPPlus, s2mel and BigVGAN (v2, 22 kHz, 80 bands,
256×). Each is random-initialised in its published file layout (names, keys, shapes, fp32) inside a
fresh workspace, then taken through the CLI, one process per stage:

1. `dataset sample` — 4 Amharic espeak clips, 2 voices (batch 1, short clips);
2. the tokenizer extension — `tokenizer merge` (Chatterbox's tokenizer.json, `[am]` tag) or `tokenizer extend`
   (IndexTTS2's bpe.model);
3. `embeddings extend` — the published checkpoint resized to it;
4. `train`, 2 steps, batch 1: the full fine-tune (it builds the feature cache first), then LoRA (reuses it);
5. `export` of both (LoRA: `--merge`);
6. a strict load of each export into the published class (`T3(T3Config(text_tokens_dict_size=V))`,
   `UnifiedVoice(**config.yaml gpt)`);
7. `synthesize` — one sentence from the full fine-tune's export with the folder's speech models.

Each stage: seconds, and peak RSS (`wait4`'s ru_maxrss) less the idle baseline (a process that imports
the same libraries and does nothing); the `train` stages beside the doctor's memory plan for that run on
the CPU (`memory.batch`, computed in its own process: `--plan`). glibc returns freed blocks of 64 KiB and
more to the system (MALLOC_MMAP_THRESHOLD_=65536) so RSS follows the live tensors, as the CUDA
allocator's peak does; `--glibc-defaults` keeps glibc's thresholds (it then keeps freed heap memory).

Needs up to about 14 GB of free memory (the IndexTTS2 full fine-tune) and 25 GB of disk per family; before
each stage it waits, up to `--wait` minutes, until MemAvailable covers what the stage needs.

    .venv/bin/python bench/fullsize.py --json --output fullsize.json            # both families, one at a time
    .venv/bin/python bench/fullsize.py --family chatterbox --keep /tmp/cb       # keep the workspace
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

FIXTURES = REPO_ROOT / "tests" / "fixtures"
GIB = 1024**3
TEXT = "ሰላም ለዓለም።"
MAX_NEW_TOKENS = 50  # a random model never stops by itself: 2 s of Chatterbox speech, 1 s of IndexTTS2 codes
#: nvidia/bigvgan_v2_22khz_80band_256x's generator hyperparameters (its config.json), which the published class reads
BIGVGAN = {
    "resblock": "1", "num_mels": 80, "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5]] * 3,
    "activation": "snakebeta", "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False,
    "sampling_rate": 22050, "hop_size": 256, "n_fft": 1024, "win_size": 1024, "fmin": 0, "fmax": None,
}
PUBLISHED_IMPORTS = {
    "chatterbox": "import chatterbox.models.t3, chatterbox.models.s3gen, chatterbox.models.voice_encoder",
    "indextts": "import indextts.gpt.model_v2, indextts.s2mel.modules.commons, indextts.utils.maskgct_utils, transformers",
}


# ---------------------------------------------------------------- the published folders, random-initialised


def write_chatterbox_folder(folder: Path) -> None:
    """Write the multilingual release's files at full size: t3_mtl23ls_v2.safetensors, s3gen.pt, ve.pt and the tokenizer."""
    import torch
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.voice_encoder import VoiceEncoder
    from safetensors.torch import save_file

    from core.families.chatterbox.t3 import MULTILINGUAL_ROWS, ChatterboxConfig, build_t3

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    t3 = build_t3(ChatterboxConfig(text_tokens_dict_size=MULTILINGUAL_ROWS, n_layers=30, hidden_size=1024, intermediate_size=4096))
    save_file({k: v.contiguous() for k, v in t3.state_dict().items()}, str(folder / "t3_mtl23ls_v2.safetensors"))
    del t3
    torch.save(S3Gen().state_dict(), folder / "s3gen.pt")
    torch.save(VoiceEncoder().state_dict(), folder / "ve.pt")
    shutil.copyfile(FIXTURES / "chatterbox" / "tokenizer_mtl_2454.json", folder / "grapheme_mtl_merged_expanded_v1.json")


def write_indextts_folder(folder: Path) -> None:
    """Write IndexTTS-2's files at full size: config.yaml, bpe.model, gpt.pth, wav2vec2bert_stats.pt, w2v-bert-2.0/,
    semantic_codec/model.safetensors, s2mel.pth, campplus_cn_common.bin and bigvgan/."""
    import torch
    import yaml
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.s2mel.modules.bigvgan.bigvgan import BigVGAN, load_hparams_from_json
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from indextts.s2mel.modules.commons import MyModel
    from indextts.utils.maskgct_utils import build_semantic_codec
    from munch import DefaultMunch
    from omegaconf import OmegaConf
    from safetensors.torch import save_model
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURES / "indextts2" / "config.yaml", folder / "config.yaml")
    shutil.copyfile(FIXTURES / "indextts2" / "bpe.model", folder / "bpe.model")
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    torch.save(UnifiedVoice(**config["gpt"]).state_dict(), folder / "gpt.pth")
    torch.save({"mean": torch.randn(1024) * 0.1, "var": torch.rand(1024) + 0.5}, folder / "wav2vec2bert_stats.pt")
    Wav2Vec2BertModel(Wav2Vec2BertConfig()).eval().save_pretrained(folder / "w2v-bert-2.0")  # the defaults are w2v-bert-2.0's
    SeamlessM4TFeatureExtractor().save_pretrained(folder / "w2v-bert-2.0")
    (folder / "semantic_codec").mkdir(exist_ok=True)
    save_model(build_semantic_codec(OmegaConf.create(config["semantic_codec"])), str(folder / "semantic_codec" / "model.safetensors"))
    s2mel = MyModel(DefaultMunch.fromDict(config["s2mel"]), use_gpt_latent=True)
    torch.save({"net": {k: m.state_dict() for k, m in s2mel.models.items()}}, folder / "s2mel.pth")
    torch.save(CAMPPlus(feat_dim=80, embedding_size=192).state_dict(), folder / "campplus_cn_common.bin")
    (folder / "bigvgan").mkdir(exist_ok=True)
    (folder / "bigvgan" / "config.json").write_text(json.dumps(BIGVGAN), encoding="utf-8")
    vocoder = BigVGAN(load_hparams_from_json(folder / "bigvgan" / "config.json"))
    torch.save({"generator": vocoder.state_dict()}, folder / "bigvgan" / "bigvgan_generator.pt")


def folder_report(folder: Path) -> dict[str, float]:
    """Return {file: MiB} of the folder's files."""
    return {str(p.relative_to(folder)): round(p.stat().st_size / 2**20, 1) for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- stages


def available() -> int:
    """Return MemAvailable in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def wait_for_memory(need: int, minutes: float, log: list[str]) -> None:
    """Return once MemAvailable covers `need` bytes; poll each 30 s up to `minutes`, then raise RuntimeError."""
    deadline = time.monotonic() + minutes * 60
    while available() < need:
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {minutes} min for {need / GIB:.1f} GiB of free memory; {available() / GIB:.1f} GiB available")
        log.append(f"{time.strftime('%H:%M:%S')} waiting: {available() / GIB:.1f} GiB available, {need / GIB:.1f} GiB needed")
        time.sleep(30)


class Runner:
    """Runs the stages of one family as processes, each measured: seconds and peak RSS (ru_maxrss of that child)."""

    def __init__(self, root: Path, env: dict[str, str], wait_minutes: float) -> None:
        self.root, self.env, self.wait = root, env, wait_minutes
        self.stages: list[dict[str, Any]] = []
        self.log: list[str] = []

    def run(self, name: str, argv: list[str], need: int = 4 * GIB, baseline: int = 0, plan: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one stage (`argv` after the Python executable); raise RuntimeError when it fails."""
        wait_for_memory(need, self.wait, self.log)
        out, err = (self.root / f"{name.replace(' ', '_')}.{kind}" for kind in ("out", "err"))
        start = time.perf_counter()
        with open(out, "w") as stdout, open(err, "w") as stderr:
            proc = subprocess.Popen([sys.executable, *argv], cwd=REPO_ROOT, env=self.env, stdout=stdout, stderr=stderr)
            _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"stage {name} failed (exit {code}): {err.read_text()[-3000:]}")
        peak = usage.ru_maxrss * 1024
        stage = {"stage": name, "seconds": round(seconds, 1), "peak_rss_gib": round(peak / GIB, 2),
                 "peak_gib": round((peak - baseline) / GIB, 2) if baseline else None}
        if plan is not None:
            stage.update(plan_gib=round(plan["peak"] / GIB, 2), plan_parts_gib={k: round(v / GIB, 3) for k, v in plan["parts"].items() if v},
                         measured_over_plan=round((peak - baseline) / plan["peak"], 3))
        self.stages.append(stage)
        self.log.append(f"{time.strftime('%H:%M:%S')} {name}: {stage}")
        print(json.dumps(stage), flush=True)
        return stage

    def idle_baseline(self, family: str) -> int:
        """Return the peak RSS of a process that imports what the stages import and does nothing."""
        code = f"import torch, core.cli, core.recipe, core.checks.doctor, core.families.{family}.family; {PUBLISHED_IMPORTS[family]}"
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, _, usage = os.wait4(proc.pid, 0)
        return usage.ru_maxrss * 1024


def run_config(root: Path, family: str, name: str, lora: bool, tokenizer: str, base: str) -> Path:
    """Write a 2-step, batch-1 run config of `family` (LoRA or full fine-tune) and return its path."""
    import yaml

    config: dict[str, Any] = {
        "name": name, "family": family, "model_dir": f"models/{family}", "tokenizer": tokenizer, "base_checkpoint": base,
        "data": {"manifest": "datasets/am/manifest.jsonl", "val_ratio": 0.0, "prompts_per_target": 1},
        "batch": {"size": 1}, "precision": "fp32", "compile": False,
        "optim": {"lr": 1.0e-5, "warmup_steps": 0},
        "schedule": {"max_steps": 2, "val_every": 2, "save_every": 2, "keep_last": 1, "log_every": 1},
    }
    if lora:
        config["adapter"] = {"kind": "lora"}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def plan_of_run(config: Path, env: dict[str, str]) -> dict[str, Any]:
    """Return the doctor's memory plan of a run config on the CPU (`--plan`, in its own process)."""
    proc = subprocess.run([sys.executable, __file__, "--plan", str(config)], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"plan of {config}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_plan(config: Path) -> None:
    """Print the memory plan `memory.batch` makes for the run config on the CPU, as JSON (bytes)."""
    from core.checks.doctor import doctor_context_from_run_config
    from core.checks.memory import RunMemory
    from core.config import load_settings
    from core.training.run_config import load_run_config

    settings = load_settings()
    ctx = doctor_context_from_run_config(load_run_config(config, settings), config, settings)
    ctx.device = "cpu"
    memory = RunMemory.of(ctx)
    plan = memory.plan(memory.run.batch.size)
    print(json.dumps({**plan.to_dict(), "lengths": [memory.lengths.text, memory.lengths.speech, memory.lengths.source]}))


STRICT_LOAD = {
    "chatterbox": """
import sys, json, torch
from pathlib import Path
from safetensors.torch import load_file
from chatterbox.models.t3 import T3
from chatterbox.models.t3.modules.t3_config import T3Config
from core.families.chatterbox.t3 import llama_config_name, ChatterboxConfig, backbone_shape
path = Path(sys.argv[1])
state = load_file(str(path))
hp = T3Config(text_tokens_dict_size=state["text_emb.weight"].shape[0])
assert hp.llama_config_name == llama_config_name(ChatterboxConfig(text_tokens_dict_size=hp.text_tokens_dict_size, **backbone_shape(state, str(path))))
T3(hp).load_state_dict(state, strict=True)
print(json.dumps({"rows": hp.text_tokens_dict_size, "tensors": len(state)}))
""",
    "indextts": """
import sys, json, torch, yaml
from pathlib import Path
from indextts.gpt.model_v2 import UnifiedVoice
folder = Path(sys.argv[1]).parent
config = yaml.safe_load((folder / "config.yaml").read_text())
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
state = state.get("model", state)
UnifiedVoice(**config["gpt"]).load_state_dict(state, strict=True)
print(json.dumps({"rows": state["text_embedding.weight"].shape[0], "number_text_tokens": config["gpt"]["number_text_tokens"]}))
""",
}


def rehearse(family: str, root: Path, wait_minutes: float, glibc_defaults: bool) -> dict[str, Any]:
    """Run every stage of `family` in the workspace `root`; return the stages and the log."""
    import yaml

    from core.data.sample_text import AMHARIC_SENTENCES
    from core.training.memory import HEADROOM

    workspace = root / "workspace"
    folder = workspace / "models" / family
    settings = root / "settings.yaml"
    settings.write_text(yaml.safe_dump({"families": {family: {"model_dir": str(folder)}}}), encoding="utf-8")
    env = {**os.environ, "LINGUAFORGE_WORKSPACE": str(workspace), "LINGUAFORGE_SETTINGS": str(settings),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    if not glibc_defaults:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    runner = Runner(root, env, wait_minutes)
    baseline = runner.idle_baseline(family)
    runner.log.append(f"idle baseline {baseline / GIB:.2f} GiB")
    cli = ["-m", "core"]
    runner.run("published folder", [__file__, "--write", family, str(folder)], need=(6 if family == "chatterbox" else 9) * GIB)
    corpus = root / "am.txt"
    corpus.write_text("\n".join(AMHARIC_SENTENCES) + "\n", encoding="utf-8")
    runner.run("dataset sample", [*cli, "dataset", "sample", "--output", str(workspace / "datasets" / "am"), "--languages", "am",
                                  "--per-language", "4"])
    if family == "chatterbox":
        base_tokenizer, tokenizer = folder / "grapheme_mtl_merged_expanded_v1.json", workspace / "tokenizers" / "am.json"
        runner.run("tokenizer merge", [*cli, "tokenizer", "merge", "--base", str(base_tokenizer), "--corpus", str(corpus),
                                       "--vocab-size", "400", "--language-tag", "am", "--output", str(tokenizer)])
        published, extended = folder / "t3_mtl23ls_v2.safetensors", workspace / "checkpoints" / "t3_am.safetensors"
    else:
        base_tokenizer, tokenizer = folder / "bpe.model", workspace / "tokenizers" / "am.model"
        runner.run("tokenizer extend", [*cli, "tokenizer", "extend", "--base", str(base_tokenizer), "--corpus", str(corpus),
                                        "--target-size", "12600", "--output", str(tokenizer)])
        published, extended = folder / "gpt.pth", workspace / "checkpoints" / "gpt_am.pt"
    runner.run("embeddings extend", [*cli, "embeddings", "extend", "--family", family, "--checkpoint", str(published),
                                     "--base-tokenizer", str(base_tokenizer), "--tokenizer", str(tokenizer), "--output", str(extended)],
               need=(6 if family == "chatterbox" else 9) * GIB)
    exports = {}
    for mode in ("full", "lora"):
        config = run_config(workspace, family, f"{family}-{mode}", mode == "lora", str(tokenizer.relative_to(workspace)),
                            str(extended.relative_to(workspace)))
        plan = plan_of_run(config, env)
        runner.log.append(f"plan {mode}: {json.dumps(plan)}")
        need = int(max(plan["peak"] / HEADROOM, plan["peak"] + 2 * GIB))  # the doctor refuses a plan over 80 % of MemAvailable
        runner.run(f"train {mode}", [*cli, "train", "--config", str(config)], need=need, baseline=baseline, plan=plan)
        checkpoint = next((workspace / "runs" / f"{family}-{mode}" / "checkpoints").glob("step_*.pt"))
        exports[mode] = workspace / "exports" / mode
        runner.run(f"export {mode}", [*cli, "export", "--checkpoint", str(checkpoint), "--output", str(exports[mode]), "--name", "am",
                                      *(["--merge"] if mode == "lora" else [])], need=(8 if family == "chatterbox" else 12) * GIB)
        exported = exports[mode] / ("t3_am.safetensors" if family == "chatterbox" else "gpt_am.pth")  # the family's native file
        runner.run(f"strict load {mode}", ["-c", STRICT_LOAD[family], str(exported)], need=(6 if family == "chatterbox" else 9) * GIB)
        if mode == "full":
            shutil.rmtree(workspace / "runs" / f"{family}-{mode}" / "checkpoints", ignore_errors=True)  # 6-8 GB with the Adam moments
    reference = sorted((workspace / "datasets" / "am" / "audio").glob("*.wav"))[0]
    speech = exports["full"] / ("t3_am.safetensors" if family == "chatterbox" else "gpt_am.pth")
    runner.run("synthesize", [*cli, "synthesize", "--checkpoint", str(speech), "--family", family, "--model-dir", str(folder),
                              "--tokenizer", str(tokenizer), "--text", TEXT, "--language", "am", "--reference", str(reference),
                              "--output", str(root / "spoken.wav"), "--max-new-tokens", str(MAX_NEW_TOKENS), "--device", "cpu"],
               need=(6 if family == "chatterbox" else 9) * GIB)
    import soundfile

    wav, rate = soundfile.read(root / "spoken.wav")
    return {"family": family, "baseline_gib": round(baseline / GIB, 2), "stages": runner.stages, "log": runner.log,
            "spoken": {"seconds": round(len(wav) / rate, 2), "sample_rate": rate}, "folder_mib": folder_report(folder),
            "allocator": "glibc defaults" if glibc_defaults else "MALLOC_MMAP_THRESHOLD_=65536"}


def main() -> None:
    """Parse options, rehearse each family, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=["chatterbox", "indextts"], help="only this family (repeatable)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary folder, removed)")
    parser.add_argument("--wait", type=float, default=60.0, help="minutes to wait for free memory before a stage (default 60)")
    parser.add_argument("--glibc-defaults", action="store_true", help="measure with glibc's own malloc thresholds")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--output", type=Path, help="also write the JSON report here")
    parser.add_argument("--write", nargs=2, metavar=("FAMILY", "FOLDER"), help=argparse.SUPPRESS)  # a stage: the published folder
    parser.add_argument("--plan", type=Path, help=argparse.SUPPRESS)  # the memory plan of a run config, in its own process
    args = parser.parse_args()
    if args.write:
        (write_chatterbox_folder if args.write[0] == "chatterbox" else write_indextts_folder)(Path(args.write[1]))
        return
    if args.plan:
        print_plan(args.plan)
        return
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                                         f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB",
                              "torch": torch.__version__, "commit": commit, "families": []}
    for family in args.family or ["chatterbox", "indextts"]:
        root = (args.keep / family) if args.keep else Path(tempfile.mkdtemp(prefix=f"lf-fullsize-{family}-"))
        root.mkdir(parents=True, exist_ok=True)
        try:
            report["families"].append(rehearse(family, root, args.wait, args.glibc_defaults))
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if args.output:
            args.output.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report, indent=2) if args.json else "\n".join(
        f"{f['family']} {s['stage']}: {s['seconds']} s, peak {s['peak_rss_gib']} GiB RSS"
        + (f" ({s['peak_gib']} GiB over the idle baseline; plan {s['plan_gib']} GiB, measured/plan {s['measured_over_plan']})"
           if s.get("plan_gib") else "") for f in report["families"] for s in f["stages"]))


if __name__ == "__main__":
    main()
