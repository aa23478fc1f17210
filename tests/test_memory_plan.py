"""The memory plan (core.training.memory) and the doctor's `memory.batch` check for model-family runs.

Parameters are counted on the meta device and must equal the real model's; the plan's peak must lie
within ±25 % of the peak RSS a real training step reaches on the CPU (a reduced T3 and IndexTTS2 GPT
at full width, bench/families.py --measure); the doctor refuses a Chatterbox run that does not fit a
named device size and passes one that does, naming the numbers and what would fit; activation
checkpointing through the family hook keeps the step's numbers and keeps less.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from core.cli import main as cli_main
from core.families.registry import get_model_family
from core.training.adapter import inject_lora
from core.training.memory import GIB, StepShape, count_parameters, plan_memory
from core.training.run_config import AdapterConfig
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.filterwarnings("ignore")

NEW = 256  # new text rows (bench/families.py grows the published vocabulary by as many)
CHATTERBOX = {"text_tokens_dict_size": 2454 + NEW, "n_layers": 2, "hidden_size": 1024, "intermediate_size": 512,
              "max_text_tokens": 254, "max_speech_tokens": 508, "speech_cond_prompt_len": 150}


def _real_counts(model: torch.nn.Module) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    return trainable, frozen + sum(b.numel() * b.element_size() for b in model.buffers())


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
@pytest.mark.parametrize("mode", ["base-rows", "all-but-new-rows", "lora"])
def test_parameters_counted_on_the_meta_device_equal_the_real_model(mode: str) -> None:
    family = get_model_family("chatterbox")
    adapter = AdapterConfig(kind="lora", rank=8) if mode == "lora" else None
    counted = count_parameters(family, CHATTERBOX, 2454, "base-rows" if mode == "lora" else mode, adapter)
    model = family.build_model(CHATTERBOX, 2454)
    if adapter is not None:
        inject_lora(model, family, adapter, "test")
    else:
        family.apply_freeze(model, mode)
    trainable, frozen = _real_counts(model)
    assert (counted.trainable, counted.trainable_bytes, counted.frozen_bytes) == (trainable, 4 * trainable, frozen)
    assert counted.split_rows and counted.elements == trainable + frozen // 4
    if mode == "all-but-new-rows":
        assert trainable == NEW * 1024 * 2                     # only the new rows of the embedding and the head
    if mode == "lora":
        lora = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)
        assert lora == 2 * 8 * (4 * (1024 + 1024) + 2 * (1024 + 512) + (512 + 1024))   # rank 8 on q,k,v,o, gate, up, down
        assert trainable == lora + NEW * 1024 * 2


def test_published_shapes_are_planned_without_weights() -> None:
    """The published T3 (Llama 520M) and IndexTTS2 GPT (config.yaml) are counted and planned on the meta device:
    536M tensors for T3 (FIELD_NOTES), and full fine-tuning costs 16 bytes per trainable weight before activations."""
    from bench.families import model_config

    t3 = model_config("chatterbox", "full")
    count = count_parameters(get_model_family("chatterbox"), t3, 2454, "base-rows")
    assert 535e6 < count.elements < 538e6
    step = StepShape(batch=8, text_tokens=62, speech_tokens=298, half=True, checkpointing=False, device="cuda")
    full = plan_memory(get_model_family("chatterbox"), t3, step, frozen_rows=2454, freeze_mode="base-rows")
    assert full.parts["optimizer state"] == 2 * full.parts["trainable weights"] == 8 * count.trainable
    lora = plan_memory(get_model_family("chatterbox"), t3, step, frozen_rows=2454, freeze_mode="base-rows",
                       adapter=AdapterConfig(kind="lora"))
    assert lora.parts["activations"] == full.parts["activations"]
    weights = {name: p.parts["trainable weights"] + p.parts["frozen weights"] for name, p in (("full", full), ("lora", lora))}
    adapters = weights["lora"] - weights["full"]  # the LoRA matrices: the base weights stay, frozen
    assert full.peak - lora.peak == full.parts["optimizer state"] - lora.parts["optimizer state"] - adapters > 3.8e9
    recomputed = plan_memory(get_model_family("chatterbox"), t3, StepShape(8, 62, 298, True, True, "cuda"),
                             frozen_rows=2454, freeze_mode="base-rows")
    assert recomputed.parts["activations"] < full.parts["activations"] / 5
    gpt = model_config("indextts", "full")
    step = StepShape(8, 64, 500, True, False, "cuda")
    plan = plan_memory(get_model_family("indextts"), gpt, step, frozen_rows=12000, freeze_mode="base-rows")
    assert plan.step.checkpointing            # the published config.yaml leaves gpt.checkpointing at UnifiedVoice's default, on
    assert plan.parts["frozen weights"] > 1.3e9  # the conditioning encoders (cached features) stay on the device, frozen
    eager = dict(gpt, kwargs={**gpt["kwargs"], "checkpointing": False})
    kept = plan_memory(get_model_family("indextts"), eager, step, frozen_rows=12000, freeze_mode="base-rows")
    assert kept.parts["activations"] > 5 * plan.parts["activations"] and plan.peak < kept.peak


@pytest.mark.slow
@pytest.mark.parametrize("family, lora", [("chatterbox", False), ("indextts", True), ("chatterbox-turbo", False)])
def test_plan_within_25_percent_of_the_measured_cpu_peak(family: str, lora: bool) -> None:
    """A reduced model (2 layers at full width), batch 2, fp32, two training steps in a fresh process: peak RSS
    less the idle baseline, glibc returning freed blocks to the system (bench/families.py --measure)."""
    from bench.families import LENGTHS, Case

    case = Case(family, "reduced", lora, 2, *LENGTHS[family], False)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run([sys.executable, "bench/families.py", "--measure", json.dumps(case._asdict())], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["measured"] > 200 * 1024**2, result
    assert abs(result["measured"] / result["plan"] - 1) <= 0.25, result


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ["chatterbox", "indextts"])
@pytest.mark.parametrize("lora", [False, True])
def test_plan_within_25_percent_of_the_cuda_allocator_peak(family: str, lora: bool) -> None:
    """On CUDA: the family step of a reduced model (2 layers at full width), batch 8, bf16 autocast, against the
    allocator's peak less what was allocated before the model was built (bench/families.py's row)."""
    from bench.families import LENGTHS, Case, run_case

    row = run_case(Case(family, "reduced", lora, 8, *LENGTHS[family], True, False, "cuda"), torch.device("cuda"), 1, 2, None)
    assert row["peak_memory_gib"] > 0.1 and abs(row["plan_error"]) <= 0.25, row


def _backbone(kind: str, layers: int) -> torch.nn.Module:
    """Return the backbone a block kind names, at width 256 (MLP 512 where the class takes it, 4 heads), training mode."""
    if kind == "llama":
        from transformers import LlamaConfig, LlamaModel

        return LlamaModel(LlamaConfig(vocab_size=8, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                      num_key_value_heads=4, num_hidden_layers=layers, attn_implementation="sdpa")).train()
    if kind == "gpt2":
        from transformers import GPT2Config, GPT2Model

        return GPT2Model(GPT2Config(vocab_size=8, n_embd=256, n_inner=512, n_head=4, n_layer=layers)).train()
    from models.gpt import GPT, GPTConfig

    return GPT(GPTConfig(d_model=256, n_layers=layers, n_heads=4)).train()


def _kept_bytes(model: torch.nn.Module, call: Any) -> int:
    """Return the bytes autograd keeps for the backward pass of `call()`, each storage once, the model's own tensors left out."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        call()
    return sum(kept.values())


@pytest.mark.parametrize("kind", ["llama", "gpt2", "linguaforge"])
@pytest.mark.parametrize("half", [False, True])
def test_each_block_kind_keeps_what_the_plan_says(kind: str, half: bool) -> None:
    """What autograd keeps per layer of the installed block classes (2 layers less 1, batch 2 × 48 positions, on the
    CPU, fp32 or bf16 autocast) is the plan's `BLOCKS` figure, plus the 16-bit copy of each multiplied weight and,
    for GPT-2's attention dropout on the CPU, the unfused scores."""
    from core.training.memory import BLOCKS, SCORE_BYTES

    batch, positions, d, f, h = 2, 48, 256, 512 if kind != "linguaforge" else 1024, 4
    x = torch.randn(batch, positions, d, requires_grad=True)
    kept = {}
    for layers in (1, 2):
        torch.manual_seed(0)
        model = _backbone(kind, layers)
        if kind == "linguaforge":
            call = lambda: model(x)  # noqa: E731
        else:
            mask = torch.ones(batch, positions, dtype=torch.long)
            call = lambda: model(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state  # noqa: E731
        with torch.autocast("cpu", dtype=torch.bfloat16) if half else torch.autocast("cpu", enabled=False):
            kept[layers] = _kept_bytes(model, call)
    cost = BLOCKS[kind]
    expected = batch * positions * (cost.half if half else cost.fp32)(d, f, h)
    expected += 2 * cost.matmul_params(d, f) if half else 0
    expected += batch * SCORE_BYTES * h * positions**2 if kind == "gpt2" else 0
    assert kept[2] - kept[1] == pytest.approx(expected, rel=0.02)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_activation_checkpointing_through_the_family_keeps_the_step_and_keeps_less() -> None:
    """`activation_checkpointing: true` reaches T3's Llama backbone (the trainer calls the family hook): the loss and
    gradients are those of the plain step, and autograd keeps only each layer's input."""
    from bench.families import LENGTHS, Case, family_forward, make_batch

    family = get_model_family("chatterbox")
    batch = make_batch("chatterbox", CHATTERBOX, Case("chatterbox", "reduced", False, 2, *LENGTHS["chatterbox"], False))
    forward = family_forward("chatterbox")
    results = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = family.build_model(CHATTERBOX, 2454).train()
        if checkpointing:
            assert family.enable_activation_checkpointing(model)
        kept: list[int] = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
            loss = forward(model, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, sum(kept)))
    (plain_loss, plain_grads, plain_kept), (loss, grads, kept) = results
    assert torch.allclose(loss, plain_loss) and grads.keys() == plain_grads.keys() and len(grads) > 20
    assert all(torch.allclose(grads[n], g, atol=1e-6) for n, g in plain_grads.items())
    assert kept < 0.6 * plain_kept    # two layers: the weights, embeddings and logits are kept either way


# ------------------------------------------------------------------ the doctor on a Chatterbox run


@pytest.fixture(scope="module")
def ws(module_tmp: Path) -> Any:
    """A workspace with the reduced Chatterbox folder, 2 espeak clips per language, the Amharic tokenizer and T3
    extended to it, and a run config of batch 4."""
    from tests.chatterbox_helpers import extend_to_amharic, make_chatterbox_folder
    from tests.data_helpers import make_espeak_dataset

    root = module_tmp / "workspace"
    root.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
        model_dir = make_chatterbox_folder(root / "models" / "chatterbox")
        make_espeak_dataset(root / "datasets" / "espeak", per_language=2)
        extend_to_amharic(root, model_dir)
        config = {"name": "cb", "family": "chatterbox", "model_dir": "models/chatterbox", "tokenizer": "tokenizers/am.json",
                  "base_checkpoint": "checkpoints/t3_am.safetensors", "data": {"manifest": "datasets/espeak/manifest.jsonl"},
                  "batch": {"size": 4, "accumulate": 2}, "precision": "bf16"}
        (root / "cb.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        yield root


def _doctor(ws: Path, capsys: pytest.CaptureFixture, *options: str) -> tuple[int, dict[str, Any], str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
        code = cli_main(["doctor", "--config", str(ws / "cb.yaml"), "--json", *options])
    out = capsys.readouterr()
    report = json.loads(out.out) if out.out.strip() else {}
    check = next((c for c in report.get("checks", []) if c["id"] == "memory.batch"), {})
    return code, check, out.err


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_doctor_refuses_a_chatterbox_run_that_does_not_fit_a_named_size_and_passes_one_that_does(
    ws: Path, capsys: pytest.CaptureFixture
) -> None:
    code, check, _ = _doctor(ws, capsys, "--device-memory", "24GiB")
    assert code == 0 and check["status"] == "pass", check
    message = check["message"]
    assert "chatterbox full fine-tune" in message and "micro-batch 4" in message and "bf16" in message
    assert "the manifest's longest clip" in message and "24.00 GiB named for cuda, 21.60 GiB usable" in message
    for part in ("trainable weights", "gradients", "optimizer state", "frozen weights", "16-bit weight copies", "activations", "logits"):
        assert part in message, part
    assert "micro-batches up to" in message and "batch.size: 8, batch.accumulate: 1" in message

    code, check, _ = _doctor(ws, capsys, "--device-memory", "400MiB")
    assert code == 2 and check["status"] == "fail", check
    assert "does not fit: 400.0 MiB named for cuda, 360.0 MiB usable" in check["message"]
    assert check["fix"].startswith("Any one of these fits: adapter: {kind: lora}") and "→ peak" in check["fix"]

    code, check, _ = _doctor(ws, capsys, "--device-memory", "300MiB")
    assert code == 2 and check["fix"].startswith("Together, activation_checkpointing: true, adapter: {kind: lora}"), check
    assert "batch.size: 2 with batch.accumulate: 4 fit → peak" in check["fix"]

    code, check, _ = _doctor(ws, capsys, "--device-memory", "40MiB")
    assert code == 2 and check["status"] == "fail" and "Even micro-batch 1 with" in check["fix"], check


def test_a_known_feature_cache_sizes_the_plan_by_its_longest_item(ws: Path, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """With the cache known (`--cache`, or the trainer's cache preflight), the lengths are its longest item's."""
    index = {"items": [{"id": "a", "n_text": 40, "n_codes": 200}, {"id": "b", "n_text": 90, "n_codes": 120},
                       {"id": "long", "n_text": 10, "n_codes": 5000}]}   # over max_speech_tokens 508: training filters it
    (tmp_path / "index.json").write_text(json.dumps(index), encoding="utf-8")
    _, check, _ = _doctor(ws, capsys, "--device-memory", "24GiB", "--cache", str(tmp_path))
    assert "(90 text + 200 speech tokens: the feature cache's longest item)" in check["message"], check


def test_a_bad_device_memory_value_is_one_line_and_exit_2(ws: Path, capsys: pytest.CaptureFixture) -> None:
    for command in (["doctor", "--config", str(ws / "cb.yaml")], ["train", "--config", str(ws / "cb.yaml")]):
        with pytest.raises(SystemExit) as exit_info:
            cli_main([*command, "--device-memory", "24 gigs"])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "'24 gigs' is not a memory size" in err and "24GiB" in err


def test_train_refuses_before_any_work_when_the_plan_does_not_fit_the_named_size(ws: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(ws))
        code = cli_main(["train", "--config", str(ws / "cb.yaml"), "--device-memory", "300MiB"])
    err = capsys.readouterr().err
    assert code == 2 and "memory.batch" in err and "does not fit" in err
    assert not (ws / "cache").exists() or not any((ws / "cache").iterdir())   # refused before the features were built



# ------------------------------------------------------------------ DDP's gradient buckets per rank


def _ddp_case(family: str, lora: bool) -> tuple[dict[str, Any], int, torch.nn.Module, Any]:
    """Return (model config, frozen rows, the real model as the run trains it on the CPU, its training loss at batch 2)."""
    from bench.families import Case, build, family_forward, make_batch, model_config

    if family == "linguaforge":  # the own tiny GPT LM, 300 text rows of which 200 frozen
        from models.registry import MODEL_SIZES, model_config as own_config

        config = own_config("lm", MODEL_SIZES["tiny"], text_rows=300).to_dict()
        model = get_model_family(family).build_model(config, 200)
        if lora:
            inject_lora(model, get_model_family(family), AdapterConfig(kind="lora", rank=4), "test")
        else:
            get_model_family(family).apply_freeze(model, "base-rows")
        ids = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(0))
        return config, 200, model, lambda module: module(ids[:, :-1], ids[:, 1:])["loss"]
    case = Case(family, "smoke", lora, 2, 8, 16, False)
    config = model_config(family, "smoke")
    batch, forward = make_batch(family, config, case), family_forward(family)
    return config, 2454, build(case, config, torch.device("cpu")), lambda module: forward(module, batch)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
@pytest.mark.parametrize("family", ["linguaforge", "chatterbox"])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_ddp_buckets_are_the_trainable_gradients_the_trainers_ddp_allocates(family: str, lora: bool) -> None:
    """Under several ranks each rank's plan holds DDP's buckets: one gradient per trainable weight of the real model
    (LoRA: the adapters and new rows only), the gradients themselves (views into the buckets, no second copy); none for
    one process. The trainer's own DDP wrapper (`data_parallel`, one gloo rank in this process) allocates exactly that:
    after two steps the gradients' storages are the buckets, and the frozen weights have none."""
    import torch.distributed as dist

    from core.training.trainer import data_parallel

    config, frozen, model, loss_of = _ddp_case(family, lora)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grad_bytes = sum(p.numel() * p.element_size() for _, p in trainable)
    adapter = AdapterConfig(kind="lora", rank=4 if family == "linguaforge" else 16) if lora else None
    step = StepShape(2, 8, 16, False, False, "cpu")
    one, two = (plan_memory(get_model_family(family), config, step, frozen_rows=frozen, freeze_mode="base-rows",
                            adapter=adapter, ranks=ranks) for ranks in (1, 2))
    assert two.parts["DDP gradient buckets"] == one.parts["gradients"] == grad_bytes > 0
    assert one.parts["DDP gradient buckets"] == 0 == two.parts["gradients"]
    assert "DDP gradient buckets" in two.describe() and "DDP" not in one.describe()
    backward = one.parts["activations"] + one.parts["logits"]   # one process frees activations as gradients grow
    assert two.peak - one.peak == min(backward, grad_bytes)      # under DDP the buckets are held all step
    if lora:  # only the adapters' gradients and the new text rows' (embedding and head; frozen rows are buffers)
        rows = {id(p) for m in get_model_family(family).text_row_modules(model) for p in m.parameters()}
        assert all(".lora_" in n or id(p) in rows for n, p in trainable), [n for n, p in trainable]
        adapters = sum(p.numel() for n, p in trainable if ".lora_" in n)
        assert adapters > 0 and grad_bytes < one.parts["frozen weights"] / 4

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = data_parallel(model, torch.device("cpu"))
        for _ in range(2):  # the second step runs on the buckets DDP rebuilt in the first step's gradient order
            model.zero_grad(set_to_none=True)
            loss_of(ddp).backward()
        storages = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes() for _, p in trainable}
    finally:
        dist.destroy_process_group()
    assert sum(storages.values()) == two.parts["DDP gradient buckets"]
    assert len(storages) < len(trainable)                           # views into flat buckets, not one tensor each
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


def test_the_doctor_plans_each_rank_with_ddps_buckets_under_nproc(ws: Path, capsys: pytest.CaptureFixture) -> None:
    """`doctor --nproc 2` (a run under torchrun, two ranks): each rank holds DDP's buckets all step, the size of the
    one-process plan's gradients; the run accumulates (batch 4 × 2), so its no_sync micro-batch makes its gradients
    beside them; fewer micro-batches fit."""
    import re

    _, alone, _ = _doctor(ws, capsys, "--device-memory", "24GiB")
    code, ranks, _ = _doctor(ws, capsys, "--device-memory", "24GiB", "--nproc", "2")
    assert code == 0 and ranks["status"] == "pass", ranks
    gradients = re.search(r"\(trainable weights [^,]+, gradients ([0-9.]+ [MG]iB)", alone["message"]).group(1)
    assert f"DDP gradient buckets {gradients}" in ranks["message"] and "DDP" not in alone["message"]
    assert f", gradients {gradients}" in ranks["message"]
    assert "each of 2 ranks (DDP: the unsynchronised micro-batches' gradients beside its buckets)" in ranks["message"]
    fit = {name: int(re.search(r"micro-batches up to (\d+) fit", check["message"]).group(1)) for name, check in
           (("alone", alone), ("ranks", ranks))}
    assert fit["ranks"] <= fit["alone"]
