"""Regional compilation (core.training.compile): the repeated transformer block of every family is found and
compiled in place, a compiled block gives the eager loss and gradients, and `compile: auto` is off on the CPU."""

from __future__ import annotations

import pytest
import torch

from core.families.registry import get_model_family
from core.training.compile import compile_blocks, compile_by_default, transformer_blocks, uncompile_blocks

torch.set_num_threads(1)


def _named(model: torch.nn.Module, target: torch.nn.Module) -> str:
    return next(name for name, module in model.named_modules() if module is target)


@pytest.mark.parametrize("family, blocks", [("chatterbox", "tfmr.layers"), ("chatterbox-turbo", "tfmr.h"), ("indextts", "gpt.h")])
def test_each_familys_repeated_block_is_found(family: str, blocks: str) -> None:
    from bench.families import base_rows, model_config

    config = model_config(family, "reduced")
    with torch.device("meta"):
        model = get_model_family(family).build_model(config, base_rows(family))
    found = transformer_blocks(model)
    assert found is not None and _named(model, found) == blocks and len(found) == 2


def test_compile_auto_is_off_on_the_cpu_and_on_cuda_only_where_measured_faster() -> None:
    assert not compile_by_default("linguaforge", "cpu") and compile_by_default("linguaforge", "cuda")
    assert not any(compile_by_default(f, "cuda") for f in ("chatterbox", "chatterbox-turbo", "indextts"))  # unmeasured


@pytest.mark.slow
def test_a_compiled_block_gives_the_eager_loss_and_gradients() -> None:
    """The own GPT's 3 blocks compiled in place (`aot_eager`: dynamo's graph and AOTAutograd's backward without
    inductor's C++ build, which takes minutes on this CPU): the same loss and gradients as eager, over two batch
    shapes, and the eager forward back after `uncompile_blocks`."""
    from models.registry import build_model, model_config

    config = model_config("lm", {"d_model": 32, "n_layers": 3, "n_heads": 4, "max_text_tokens": 32}, text_rows=40, bos_id=1, eos_id=2)
    torch.manual_seed(0)
    eager = build_model("lm", config, 10)
    compiled = build_model("lm", config, 10)
    compiled.load_state_dict(eager.state_dict())
    assert compile_blocks(compiled, "aot_eager") == 3
    assert _named(compiled, transformer_blocks(compiled)) == "gpt.blocks"
    g = torch.Generator().manual_seed(1)
    for shape in ((4, 16), (3, 11)):
        ids, targets = torch.randint(0, 40, shape, generator=g), torch.randint(0, 40, shape, generator=g)
        for model in (eager, compiled):
            model.zero_grad(set_to_none=True)
        want, got = eager(ids, targets)["loss"], compiled(ids, targets)["loss"]
        want.backward(), got.backward()
        assert torch.allclose(want, got, atol=1e-6)
        grads = dict(eager.named_parameters())
        assert all(torch.allclose(p.grad, grads[n].grad, atol=1e-6) for n, p in compiled.named_parameters())
    uncompile_blocks(compiled)
    assert all(getattr(block, "_compiled_call_impl", None) is None for block in compiled.gpt.blocks)
