"""The Training tab's form ↔ run config mapping, as pure functions (no Gradio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import load_settings
from core.errors import InputError
from core.training.run_config import load_run_config, resolve_preset_chain, save_run_config
from core.training.run_form import FORM_KEYS, config_from_form, dict_to_form, form_to_dict, run_config_path


def _form(**changes: object) -> list[object]:
    values = dict(zip(FORM_KEYS, dict_to_form(resolve_preset_chain({"preset": "tiny", "name": "am"}))))
    values.update(changes)
    return [values[key] for key in FORM_KEYS]


def test_form_round_trips_a_preset_and_lays_values_over_the_base(workspace: Path) -> None:
    base = resolve_preset_chain({"preset": "tiny", "name": "am"})
    values = dict(zip(FORM_KEYS, dict_to_form(base)))
    assert values["name"] == "am" and values["task"] == "tts" and values["model_preset"] == "tiny"
    config = config_from_form(base, _form(batch_size=4, max_steps=30, corpus=" a.txt, b.txt ,"), load_settings())
    assert (config.batch.size, config.schedule.max_steps, config.data.corpus) == (4, 30, ["a.txt", "b.txt"])
    assert config.optim.weight_decay == base["optim"]["weight_decay"]  # keys the form lacks come from the base
    assert dict_to_form(config.to_dict()) == _form(batch_size=4, max_steps=30, corpus="a.txt, b.txt")


def test_config_from_form_names_the_field_at_fault(workspace: Path, tmp_path: Path) -> None:
    settings = load_settings()
    with pytest.raises(InputError, match=r"batch.size: 2.5 is not a whole number"):
        config_from_form({}, _form(batch_size=2.5), settings)
    with pytest.raises(InputError, match="could not convert string to float"):
        config_from_form({}, _form(lr="fast"), settings)
    with pytest.raises(InputError, match="outside the allowed folders"):
        config_from_form({}, _form(tokenizer=str(tmp_path / "elsewhere.model")), settings)
    with pytest.raises(InputError, match=r"form.precision: 'fp8' is not one of"):
        config_from_form({}, _form(precision="fp8"), settings)
    with pytest.raises(InputError, match="name 'a b'"):
        config_from_form({}, _form(name="a b"), settings)


def test_saved_config_loads_back_equal(workspace: Path) -> None:
    config = config_from_form({}, _form(name="am-2"), load_settings())
    path = save_run_config(config, workspace / run_config_path(config.name))
    assert path == workspace / "runs" / "am-2" / "config.yaml"
    assert load_run_config(path).to_dict() == config.to_dict()
    assert form_to_dict({}, _form())["name"] == "am"


def test_a_published_family_drops_the_model_settings_a_loaded_config_brings() -> None:
    from core.training.run_form import for_family

    data = {"name": "am", "model": {"preset": "tiny", "max_speech_tokens": 600, "n_layer": 2}}
    assert for_family(data, "chatterbox") == ({"name": "am", "model": {"preset": "tiny"}}, ["max_speech_tokens", "n_layer"])
    assert for_family(data, "linguaforge") == (data, [])


def test_the_form_sets_a_lora_adapter_and_names_a_bad_rank(workspace: Path) -> None:
    settings = load_settings()
    config = config_from_form({}, _form(adapter_kind="lora", adapter_rank=8, adapter_alpha=16), settings)
    assert (config.adapter.kind, config.adapter.rank, config.adapter.alpha) == ("lora", 8, 16.0)
    assert dict(zip(FORM_KEYS, dict_to_form(config.to_dict())))["adapter_rank"] == 8
    assert config_from_form({}, _form(), settings).adapter.kind == "none"  # the default trains every weight
    with pytest.raises(InputError, match=r"adapter.rank: 0 must be a positive integer"):
        config_from_form({}, _form(adapter_kind="lora", adapter_rank=0), settings)
    with pytest.raises(InputError, match=r"adapter.rank: 2.5 is not a whole number"):
        config_from_form({}, _form(adapter_kind="lora", adapter_rank=2.5), settings)


def test_as_large_as_fits_makes_the_batch_auto_with_size_times_accumulate_per_step(workspace: Path) -> None:
    settings = load_settings()
    config = config_from_form({}, _form(batch_size=8, accumulate=4, batch_auto=True), settings)
    assert config.batch.auto and (config.batch.effective, config.batch.accumulate) == (32, 1)
    assert dict_to_form(config.to_dict()) == _form(batch_size=32, accumulate=1, batch_auto=True)
    unticked = config_from_form(config.to_dict(), _form(batch_size=8, accumulate=4), settings)  # a loaded auto config, unticked
    assert (unticked.batch.size, unticked.batch.accumulate, unticked.batch.effective) == (8, 4, None)
