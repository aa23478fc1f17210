"""`batch: {size: auto}` (core.training.auto_batch): the largest micro-batch the memory plan fits, per family
and device size, the accumulation that reaches the requested samples per step, and the run config's rules.

The plans are of the published shapes (counted on the `meta` device, no weights), so each case takes
a second or two; the own model's plan sizes a clip from its codec's frame rate, not the position limits.
"""

from __future__ import annotations

import pytest

from bench.families import base_rows, model_config
from core.errors import InputError
from core.families.registry import get_model_family
from core.training.auto_batch import Lengths, StepPlanner, choose_batch
from core.training.memory import GIB, NAMED_HEADROOM
from core.training.run_config import run_config_from_dict
from models.registry import MODEL_SIZES, model_config as own_config

pytestmark = pytest.mark.filterwarnings("ignore")

EFFECTIVE = 720  # many divisors: the chosen micro-batch is the largest divisor that fits


def _own_tts() -> dict:
    shape = dict(MODEL_SIZES["base"], d_model=1280, n_layers=24, n_heads=20)
    return own_config("tts", shape, text_rows=800, codebook_size=64, n_mels=80, start_text=1, stop_text=2).to_dict()


def _planner(family: str) -> StepPlanner:
    if family == "linguaforge":
        config, frozen, lengths = _own_tts(), 200, Lengths(60, 160, "test")
    else:
        config, frozen, lengths = model_config(family, "full"), base_rows(family), Lengths(62, 298, "test")
    return StepPlanner(get_model_family(family), config, frozen, "base-rows", None, 0, lengths, "cuda", True, False)


@pytest.mark.parametrize("family", ["linguaforge", "chatterbox", "chatterbox-turbo", "indextts"])
@pytest.mark.parametrize("device_gib", [16, 48])
def test_the_auto_batch_is_the_largest_the_plan_fits(family: str, device_gib: int) -> None:
    planner = _planner(family)
    budget = int(device_gib * GIB * NAMED_HEADROOM)
    choice = choose_batch(planner.plan, budget, f"{device_gib} GiB", EFFECTIVE)
    assert choice.largest >= 1 and choice.accumulate > 1  # 720 samples are more than one micro-batch may take
    # planned accumulating: the next size up does not fit
    assert planner.plan(choice.largest, accumulate=2).peak <= budget < planner.plan(choice.largest + 1, accumulate=2).peak
    assert EFFECTIVE % choice.size == 0 and choice.size * choice.accumulate == EFFECTIVE
    assert choice.size == max(d for d in range(1, choice.largest + 1) if EFFECTIVE % d == 0)
    assert choice.peak == planner.plan(choice.size, accumulate=choice.accumulate).peak
    assert choice.headroom == budget - choice.peak >= 0
    assert f"micro-batch {choice.size} × accumulate {choice.accumulate} = {EFFECTIVE}" in choice.describe()


def test_a_larger_device_fits_a_larger_micro_batch_and_a_small_one_none() -> None:
    planner = _planner("chatterbox")
    small, large = (choose_batch(planner.plan, int(g * GIB * NAMED_HEADROOM), "", 4096) for g in (24, 80))
    assert large.largest > 2 * small.largest
    with pytest.raises(InputError, match="not even a micro-batch of 1 fits"):
        choose_batch(planner.plan, int(4 * GIB), "4 GiB named", 16)


def test_the_requested_batch_caps_the_micro_batch() -> None:
    planner = _planner("linguaforge")
    choice = choose_batch(planner.plan, int(80 * GIB * NAMED_HEADROOM), "80 GiB", 12)
    assert (choice.size, choice.accumulate, choice.largest) == (12, 1, 12)


def test_an_accumulating_step_holds_one_micro_batchs_gradients_with_the_next_ones_activations() -> None:
    """With accumulation the first micro-batch's gradients stay while the next one's activations are built: the peak
    is their sum, not the larger; under DDP the no_sync micro-batches make them beside the buckets. So a micro-batch
    that fits alone can be too large to accumulate, and the auto batch takes a smaller one."""
    planner = _planner("chatterbox")
    alone, accumulating = planner.plan(8), planner.plan(8, accumulate=4)
    backward, gradients = alone.parts["activations"] + alone.parts["logits"], alone.parts["gradients"]
    assert accumulating.peak - alone.peak == min(backward, gradients) > 0
    assert planner.plan(8, accumulate=2).peak == accumulating.peak  # two micro-batches or four: the same overlap
    ranks = StepPlanner(**{**planner.__dict__, "ranks": 2})
    assert ranks.plan(8).parts["gradients"] == 0 < ranks.plan(8, accumulate=4).parts["gradients"] == gradients
    assert ranks.plan(8, accumulate=4).parts["DDP gradient buckets"] == gradients
    budget = alone.peak  # micro-batch 8 fits alone, but not accumulating to 16
    choice = choose_batch(planner.plan, budget, "test", 16)
    assert choice.accumulate > 1 and choice.size < 8 and choice.peak <= budget
    assert choice.peak == planner.plan(choice.size, accumulate=choice.accumulate).peak
    assert choose_batch(planner.plan, planner.plan(16).peak, "test", 16).size == 16  # all 16 at once fit: no accumulation


def test_the_own_models_plan_at_its_data_not_its_position_limits() -> None:
    """d1280 × 24 at batch 32: the plan at the position limits (1,208 positions) is several times the one at the
    espeak sample's clips, which the H200 measured at 19.5 GiB (docs/benchmarks.md, run 5, fp32)."""
    config = _own_tts()
    family = get_model_family("linguaforge")
    at_limits = StepPlanner(family, config, 200, "base-rows", None, 0, Lengths(400, 800, "limits"), "cuda", False, False)
    at_data = StepPlanner(family, config, 200, "base-rows", None, 0, Lengths(60, 160, "data"), "cuda", False, False)
    assert at_limits.plan(32).peak > 62.7 * GIB > 2.5 * at_data.plan(32).peak


def test_the_run_config_takes_size_auto_with_effective_and_refuses_the_rest() -> None:
    config = run_config_from_dict({"name": "a", "tokenizer": "t.model", "batch": {"size": "auto", "effective": 64}}, "run")
    assert config.batch.auto and config.batch.effective == 64
    assert config.to_dict()["batch"] == {"size": "auto", "accumulate": 1, "effective": 64}
    assert "effective" not in run_config_from_dict({"name": "a", "tokenizer": "t.model"}, "run").to_dict()["batch"]
    for batch, message in (({"size": "big"}, "batch.size: 'big' must be a positive integer or `auto`"),
                           ({"size": 0}, "batch.size: 0 must be a positive integer or `auto`"),
                           ({"size": 8, "effective": 32}, "batch.effective: applies to batch.size auto"),
                           ({"size": "auto", "accumulate": 4}, "batch.accumulate: 4 is chosen by batch.size auto"),
                           ({"size": "auto", "effective": 0}, "batch.effective: 0 must be a positive integer")):
        with pytest.raises(InputError, match=message.replace("(", r"\(")):
            run_config_from_dict({"name": "a", "tokenizer": "t.model", "batch": batch}, "run")


def test_a_run_with_size_auto_takes_the_choice_records_it_and_trains_as_the_explicit_split(workspace, capsys) -> None:
    """An lm run with `batch: {size: auto, effective: 8}` on a device named so small that 3 samples fit (planned
    accumulating): it trains micro-batches of 2 × 4 accumulations (the largest divisor of 8 that fits), prints and
    records the choice, and its weights equal those of the same run written as `batch: {size: 2, accumulate: 4}`."""
    from core.config import load_settings
    from core.recipe import prepare_trainer
    from core.training.run_config import load_run_config
    from core.training.trainer import weights_sha256
    from tests.trainer_helpers import lm_config, lm_workspace

    lm_workspace(workspace)
    auto = lm_config(workspace, "auto", batch={"size": "auto", "effective": 8}, schedule={"max_steps": 2, "val_every": 2,
                                                                                           "save_every": 2, "log_every": 1})
    probe = prepare_trainer(load_run_config(auto), auto, load_settings(), device_memory=64 * GIB)
    assert (probe.batch.size, probe.batch.accumulate) == (8, 1)    # everything fits: no accumulation
    planner = probe.batch_planner(None)
    assert planner.lengths.text == max(probe.data.train.lengths) and planner.device == "cpu" and not planner.half
    named = int(planner.plan(3, accumulate=2).peak / NAMED_HEADROOM) + 1  # 3 samples fit, accumulating
    probe.log.close()
    trainer = prepare_trainer(load_run_config(auto), auto, load_settings(), device_memory=named, fresh=True)
    result = trainer.run()
    assert result.info["batch"] == {**trainer.batch_choice.to_dict(), "size": 2, "accumulate": 4, "largest": 3, "effective": 8}
    assert "batch.size auto: micro-batch 2 × accumulate 4 = 8 samples per step (micro-batches up to 3 fit)" in capsys.readouterr().err
    status = (workspace / "runs" / "auto" / "status.json").read_text()
    assert '"largest": 3' in status and '"headroom"' in status
    explicit = lm_config(workspace, "explicit", batch={"size": 2, "accumulate": 4},
                         schedule={"max_steps": 2, "val_every": 2, "save_every": 2, "log_every": 1})
    same = prepare_trainer(load_run_config(explicit), explicit, load_settings())
    same.run()
    assert weights_sha256(same.model) == weights_sha256(trainer.model)


def test_the_doctor_sizes_the_own_models_clips_at_its_codec_rate_and_names_the_auto_choice(workspace, capsys) -> None:
    """The own model has no fixed speech-token rate: the doctor's plan reads the manifest's longest clip at the
    codec's frame rate (it used the position limits, 1,208 positions at `base`), and with `size: auto` names the
    micro-batch the run will take."""
    import json

    import yaml

    from core.cli import main as cli_main
    from core.tokenizers.train import train_tokenizer
    from tests.data_helpers import make_codec, make_espeak_dataset
    from tests.trainer_helpers import ENGLISH_SENTENCES

    manifest = make_espeak_dataset(workspace / "datasets" / "en", per_language=2, languages=("en",))
    (workspace / "codecs").mkdir()
    make_codec(manifest, workspace / "codecs" / "c.pt", codebook_size=16, iterations=2)
    train_tokenizer(list(ENGLISH_SENTENCES), "sentencepiece", 120, workspace / "tokenizers" / "en.model")
    longest = max(json.loads(line)["duration"] for line in manifest.read_text().splitlines())
    config = {"name": "own", "tokenizer": "tokenizers/en.model", "codec": "codecs/c.pt", "model": {"preset": "base"},
              "data": {"manifest": "datasets/en/manifest.jsonl"}, "batch": {"size": "auto", "effective": 64}}
    (workspace / "own.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    code = cli_main(["doctor", "--config", str(workspace / "own.yaml"), "--json", "--device-memory", "8GiB"])
    report = json.loads(capsys.readouterr().out)
    check = next(c for c in report["checks"] if c["id"] == "memory.batch")
    assert code == 0 and check["status"] == "pass", check
    rate = 16000 / 256  # the codec's frames per second
    assert f"the manifest's longest clip, {longest:.1f} s at {rate:g} speech tokens/s" in check["message"], check
    assert "batch.size auto: micro-batch " in check["message"] and "= 64 samples per step" in check["message"]
    assert "1208 positions" not in check["message"]
