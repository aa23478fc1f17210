"""Training-step throughput of the published model families beside a plain loop over the same class.

IndexTTS2 GPT: the family's step (`UnifiedVoice` with frozen base text rows and the frozen extra
row as buffers, conditioning from the cache, `indextts_forward` on the layout-v2 batch of `collate_indextts`,
0.2 text + 0.8 code CE, + AdamW over the trainable tensors) beside a plain loop (`get_logits` on
the same cached conditioning + 0.2/0.8 CE + AdamW over every parameter), random tokens, batch 8 of
64 text + 500 code tokens, bf16 autocast on CUDA. Full size: the published shape (1280 × 24,
12,000 + 256 tokens); `--smoke`: width 256, 1 layer, batch 2 on the CPU.

Chatterbox T3: the family's step (`LinguaForgeT3` — T3 with frozen base text rows as buffers, each
sample laid out by `chatterbox.layout` with an attention mask, shifted labels — + AdamW over the
trainable tensors) beside a plain loop (`T3.forward(training=True)` + shifted cross-entropy on its logits + AdamW over every parameter),
random tokens, batch 8 of 64 text + 300 speech tokens and a 150-token prompt, bf16 autocast on
CUDA. Tokens/s counts text + speech tokens. Full size (Llama_520M, 30 layers) on a GPU;
`--smoke` runs a reduced T3 (width 1024, 1 layer, batch 2) on the CPU.

    .venv/bin/python bench/families.py --json            # GPU
    .venv/bin/python bench/families.py --smoke --json    # CPU
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
# bench/tokenizers.py would shadow the `tokenizers` package that transformers imports
sys.path[:] = [str(REPO_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from core.families.chatterbox.t3 import ChatterboxConfig, build_t3, t3_forward, t3_hparams  # noqa: E402
from core.families.chatterbox.layout import collate  # noqa: E402
from core.families.contract import weighted_loss  # noqa: E402

TEXT, SPEECH, PROMPT = 64, 300, 150
BASE_ROWS = 2454
LOSS_WEIGHTS = {"text_loss": 0.2, "mel_loss": 0.8}


def batch_samples(batch: int, rows: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """Return `batch` random samples of 62 text ids (wrapped to 64) and 298 speech tokens (wrapped to 300)."""
    return [{"text_ids": torch.randint(1, rows, (TEXT - 2,), generator=generator),
             "codes": torch.randint(0, 6561, (SPEECH - 2,), generator=generator),
             "prompt": torch.randint(0, 6561, (PROMPT,), generator=generator),
             "speaker_emb": F.normalize(torch.randn(256, generator=generator), dim=0)} for _ in range(batch)]


def plain_step(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Return the loss of the published forward with shifted labels (what community trainers run)."""
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    cond = T3Cond(speaker_emb=batch["speaker_emb"], cond_prompt_speech_tokens=batch["prompt"],
                  emotion_adv=0.5 * torch.ones(batch["prompt"].size(0), 1, 1, device=batch["prompt"].device))
    out = model(t3_cond=cond, text_tokens=batch["text_ids"], text_token_lens=batch["text_lengths"],
                speech_tokens=batch["codes"], speech_token_lens=batch["code_lengths"], training=True)
    text_loss = F.cross_entropy(out.text_logits[:, :-1].float().transpose(1, 2), batch["text_ids"][:, 1:])
    speech_loss = F.cross_entropy(out.speech_logits[:, :-1].float().transpose(1, 2), batch["codes"][:, 1:])
    return 0.2 * text_loss + 0.8 * speech_loss


def measure(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Return seconds per step over `steps` timed steps after one warm-up step."""
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def device_name(device: torch.device) -> str:
    """Return the GPU's name on CUDA, else the CPU's (what the figures were measured on)."""
    return torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu"


def time_family_and_plain(
    build: Callable[[str], tuple[torch.nn.Module, Callable[[], torch.Tensor]]],
    steps: int, device: torch.device, tokens: int,
) -> dict[str, dict[str, Any]]:
    """Return, for "family" then "plain", ms/step, tokens/s, peak GiB (CUDA) and parameters of AdamW steps.

    `build(name)` returns the model (on `device`, in train mode) and its loss function; each is
    timed by `measure` (bf16 autocast on CUDA) and freed before the next is built.
    """
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    results: dict[str, dict[str, Any]] = {}
    torch.manual_seed(0)
    for name in ("family", "plain"):
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model, loss_of = build(name)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.1)

        def step() -> None:
            with autocast():
                loss = loss_of()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        seconds = measure(step, steps, device)
        results[name] = {"ms_per_step": round(seconds * 1000, 1), "tokens_per_s": round(tokens / seconds, 1),
                         "peak_gib": round(torch.cuda.max_memory_allocated() / 1024**3, 2) if device.type == "cuda" else None,
                         "parameters": sum(p.numel() for p in model.parameters())}
        del model, optimizer, params, loss_of
    results["speed_up"] = round(results["family"]["tokens_per_s"] / results["plain"]["tokens_per_s"], 2)
    return results


def bench_chatterbox(smoke: bool, steps: int, batch_size: int) -> dict[str, Any]:
    """Return tokens/s, ms/step and peak memory of the family step and the plain loop."""
    from chatterbox.models.t3 import T3

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = {"n_layers": 1, "hidden_size": 1024, "intermediate_size": 4096} if smoke else \
        {"n_layers": 30, "hidden_size": 1024, "intermediate_size": 4096}
    rows = BASE_ROWS + 256
    config = ChatterboxConfig(text_tokens_dict_size=rows, **shape)
    batch = {k: v.to(device) if torch.is_tensor(v) else v
             for k, v in collate(batch_samples(batch_size, rows, torch.Generator().manual_seed(0))).items()}
    tokens = batch_size * (TEXT + SPEECH)
    results: dict[str, Any] = {"device": device_name(device), "layers": shape["n_layers"], "batch": batch_size,
                               "tokens_per_step": tokens}

    def build(name: str) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
        if name == "family":
            model = build_t3(config, frozen_rows=BASE_ROWS).to(device).train()
            return model, lambda: weighted_loss(t3_forward(model, batch), LOSS_WEIGHTS)
        model = T3(t3_hparams(config)).to(device).train()
        return model, lambda: plain_step(model, batch)

    return {**results, **time_family_and_plain(build, steps, device, tokens)}


INDEX_TEXT, INDEX_CODES, INDEX_BASE = 64, 500, 12000


def indextts_kwargs(smoke: bool) -> dict[str, Any]:
    """Return UnifiedVoice kwargs: the published config (shared fixture) or the smoke reduction."""
    import yaml

    config = yaml.safe_load((REPO_ROOT.parent / "shared" / "fixtures" / "indextts2" / "config.yaml").read_text())["gpt"]
    config["number_text_tokens"] = INDEX_BASE + 256
    if smoke:
        small = {"output_size": 32, "linear_units": 64, "attention_heads": 2, "num_blocks": 1, "input_layer": "conv2d2", "perceiver_mult": 2}
        config.update(model_dim=256, heads=4, layers=1, condition_module=small, emo_condition_module=dict(small))
    return config


def bench_indextts(smoke: bool, steps: int, batch_size: int) -> dict[str, Any]:
    """Return tokens/s, ms/step and peak memory of the IndexTTS2 family step and the plain loop."""
    from core.families.indextts.gpt import build_unified_voice
    from core.families.indextts.layout import conditioning_prefix
    from core.families.indextts.training import build_trainable_gpt, collate_indextts, indextts_forward
    from core.families.registry import get_model_family

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kwargs = indextts_kwargs(smoke)
    dim, rows = kwargs["model_dim"], kwargs["number_text_tokens"]
    g = torch.Generator().manual_seed(0)
    batch = {
        "text_ids": torch.randint(2, rows, (batch_size, INDEX_TEXT), generator=g),
        "text_lengths": torch.full((batch_size,), INDEX_TEXT),
        "codes": torch.randint(0, 8192, (batch_size, INDEX_CODES), generator=g),
        "code_lengths": torch.full((batch_size,), INDEX_CODES),
        "condition": torch.randn(batch_size, 32, dim, generator=g),
        "emo_vec": torch.randn(batch_size, dim, generator=g),
    }
    samples = [{"text_ids": batch["text_ids"][i].numpy(), "codes": batch["codes"][i].numpy(),
                "condition": batch["condition"][i], "emo_vec": batch["emo_vec"][i]} for i in range(batch_size)]
    family_batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in collate_indextts(samples).items()}
    batch = {k: v.to(device) for k, v in batch.items()}
    tokens = batch_size * (INDEX_TEXT + INDEX_CODES)
    results: dict[str, Any] = {"device": device_name(device), "layers": kwargs["layers"], "width": dim, "batch": batch_size,
                               "tokens_per_step": tokens}

    def plain_loss(model: Any) -> torch.Tensor:
        conds = conditioning_prefix(model, batch["condition"], batch["emo_vec"])
        text = torch.nn.functional.pad(batch["text_ids"], (0, 1), value=1)
        codes = torch.nn.functional.pad(batch["codes"], (0, 1), value=8193)
        text_in, text_target = model.build_aligned_inputs_and_targets(text, 0, 1)
        code_in, code_target = model.build_aligned_inputs_and_targets(codes, 8192, 8193)
        text_emb = model.text_embedding(text_in) + model.text_pos_embedding(text_in)
        mel_emb = model.mel_embedding(code_in) + model.mel_pos_embedding(code_in)
        text_logits, mel_logits = model.get_logits(conds, text_emb, model.text_head, mel_emb, model.mel_head)
        return 0.2 * F.cross_entropy(text_logits.float(), text_target) + 0.8 * F.cross_entropy(mel_logits.float(), code_target)

    def build(name: str) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
        if name == "plain":
            model = build_unified_voice(kwargs).to(device).train()
            return model, lambda: plain_loss(model)
        model = build_trainable_gpt(kwargs, INDEX_BASE).to(device).train()
        get_model_family("indextts").apply_freeze(model, "base-rows")  # the conditioning encoders: outputs cached
        return model, lambda: weighted_loss(indextts_forward(model, family_batch), LOSS_WEIGHTS)

    return {**results, **time_family_and_plain(build, steps, device, tokens)}


def rows(device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    """Return bench/gpu.py's family rows: each family's step and its plain loop, one row each.

    `device` is informational: both benchmarks run on CUDA when present, as bench/gpu.py does.
    """
    steps, batch = (1, 2) if smoke else (10, 8)
    precision = "bf16" if device.type == "cuda" else "fp32"
    out: list[dict[str, Any]] = []
    for family, bench in (("chatterbox T3", bench_chatterbox), ("indextts2 UnifiedVoice", bench_indextts)):
        result = bench(smoke, steps, batch)
        for name in ("family", "plain"):
            row = result[name]
            out.append({"model": f"{family}, {'LinguaForge step' if name == 'family' else 'plain loop'}",
                        "precision": precision, "batch": result["batch"], "compile": False,
                        "step_ms": row["ms_per_step"], "tokens_per_s": row["tokens_per_s"],
                        "parameters": row["parameters"], "peak_memory_gib": row["peak_gib"]})
    return out


def main() -> None:
    """Parse options, run the benchmark, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="reduced T3 on the CPU (1 layer, batch 2)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 10, smoke 3)")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default 8, smoke 2)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--family", action="append", choices=["chatterbox", "indextts"], help="only this family (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    parser_steps, parser_batch = args.steps or (3 if args.smoke else 10), args.batch or (2 if args.smoke else 8)
    families = args.family or ["chatterbox", "indextts"]
    result = {}
    if "chatterbox" in families:
        result["chatterbox"] = bench_chatterbox(args.smoke, parser_steps, parser_batch)
    if "indextts" in families:
        result["indextts"] = bench_indextts(args.smoke, parser_steps, parser_batch)
    print(json.dumps(result, indent=2) if args.json else result)


if __name__ == "__main__":
    main()
