"""A run config's `model:` keys are checked by the run's plan, from the family's own list (`model_keys`):
`doctor --config` and `train` refuse a key the family does not take with the same one line before any
work, the Training form's loader drops what the family does not take, and the form's words say which
task and which setting apply."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.config import load_settings
from core.errors import InputError
from core.families.registry import get_model_family
from core.training.plan import plan_run
from core.training.run_config import run_config_from_dict
from core.training.run_form import for_family

CHATTERBOX_RUN = {  # what the Training form sent for a Chatterbox run over a loaded LinguaForge config
    "name": "cb", "family": "chatterbox", "task": "tts", "tokenizer": "tokenizers/am.json",
    "data": {"manifest": "datasets/am/manifest.jsonl"}, "model": {"preset": "tiny", "max_speech_tokens": 600},
}


def _refusal(run) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.code == 2 and len(lines) == 1 and "Traceback" not in run.stderr, (run.code, run.stderr)
    return lines[0]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_doctor_and_train_refuse_a_model_key_the_family_does_not_take_with_the_same_line(workspace: Path, cli) -> None:
    config = workspace / "runs" / "cb" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump(CHATTERBOX_RUN), encoding="utf-8")
    doctor = _refusal(cli("doctor", "--config", config))
    assert doctor == (f"error: {config}.model.max_speech_tokens: does not apply to family chatterbox, which takes only "
                      "model.preset, model.text_tokens_dict_size and model.dropout (its shape comes from its checkpoint, "
                      "its vocabulary from the tokenizer). Remove max_speech_tokens from the config's model: section.")
    assert _refusal(cli("train", "--config", config)) == doctor
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.yaml", "status.json"]  # no model, cache or log

    config.write_text(yaml.safe_dump({**CHATTERBOX_RUN, "model": {"preset": "tiny", "text_tokens_dict_size": 3120}}))
    kept = cli("doctor", "--config", config)  # a key the family takes goes on to the checks
    assert "max_speech_tokens" not in kept.stderr + kept.stdout and "chatterbox" in kept.stdout, kept.stdout


@pytest.mark.parametrize("family, bad, kept", [
    ("chatterbox", "n_layers", "text_tokens_dict_size"),
    ("indextts", "max_speech_tokens", "number_text_tokens"),
])
def test_the_plan_checks_the_familys_own_list(workspace: Path, family: str, bad: str, kept: str) -> None:
    settings = load_settings()
    config = run_config_from_dict({**CHATTERBOX_RUN, "family": family, "model": {"preset": "tiny", kept: 5, bad: 2}}, "x.yaml")
    with pytest.raises(InputError, match=rf"^x\.yaml\.model\.{bad}: does not apply to family {family}, which takes only "
                                         rf"model\.preset, model\.{kept} and model\.dropout .* Remove {bad} from"):
        plan_run(config, settings)
    assert plan_run(run_config_from_dict({**CHATTERBOX_RUN, "family": family, "model": {kept: 5}}, "x.yaml"),
                    settings).family.name == family
    assert get_model_family(family).model_keys == ("preset", kept, "dropout")


def test_the_forms_family_switch_drops_only_what_the_family_does_not_take() -> None:
    data = {"name": "am", "model": {"preset": "tiny", "max_speech_tokens": 600, "text_tokens_dict_size": 3120}}
    assert for_family(data, "chatterbox") == (
        {"name": "am", "model": {"preset": "tiny", "text_tokens_dict_size": 3120}}, ["max_speech_tokens"])
    assert for_family(data, "indextts")[1] == ["max_speech_tokens", "text_tokens_dict_size"]
    assert for_family(data, "linguaforge") == (data, [])


def test_the_form_names_what_applies_in_plain_words() -> None:
    from gradio_app.tabs.training import field_error

    message, fix = field_error("form.task: family chatterbox trains task tts only, not 'lm'.", "chatterbox")
    assert message == "“Task”: family chatterbox trains task tts only, not 'lm'."
    assert fix == "Set “Task” to tts (speech)."
    assert field_error("form.task: 'x' is not one of tts, lm.", "linguaforge")[1] == \
        "Set “Task” to tts (speech) or lm (a text-only model)."
    message, fix = field_error("form.model.max_speech_tokens: does not apply to family chatterbox, which takes only "
                               "model.preset and model.text_tokens_dict_size. Remove max_speech_tokens.", "chatterbox")
    assert message.startswith("“model.max_speech_tokens” (a setting of the loaded config the form does not show): "
                              "does not apply to family chatterbox")
    assert "form." not in message and "Load it again" in fix and "Model family" in fix


@pytest.mark.slow
def test_model_dropout_sets_every_dropout_of_the_published_models_and_is_checked() -> None:
    import numpy as np
    import torch

    from core.families.chatterbox.layout import collate
    from core.families.chatterbox.t3 import ChatterboxConfig, build_t3
    from core.families.indextts.gpt import IndexTTSModelConfig
    from core.families.indextts.training import collate_indextts, training_losses
    from tests.chatterbox_helpers import REDUCED
    from tests.indextts_helpers import small_config

    family = get_model_family("chatterbox")
    with pytest.raises(InputError, match=r"^x\.yaml\.model\.dropout: 1\.5 must be a number in \[0, 1\)"):
        family.training_dropout({"dropout": 1.5}, "x.yaml")
    assert family.training_dropout({}, "x.yaml") is None and family.training_dropout({"dropout": 0}, "x.yaml") == 0.0
    g = torch.Generator().manual_seed(0)
    t3 = build_t3(ChatterboxConfig(text_tokens_dict_size=300, **REDUCED, dropout=0.0))
    samples = [{"text_ids": torch.randint(1, 250, (n,), generator=g), "codes": torch.randint(0, 6561, (2 * n,), generator=g),
                "prompt": torch.randint(0, 6561, (150,), generator=g), "speaker_emb": torch.randn(256, generator=g)}
               for n in (4, 6)]
    config = small_config()
    gpt = get_model_family("indextts").build_model(IndexTTSModelConfig(dict(config["gpt"]), config, 0.0), 12000)
    dim = config["gpt"]["model_dim"]
    clips = [{"text_ids": np.arange(3, 3 + n), "codes": np.arange(10, 10 + 2 * n),
              "condition": np.ones((32, dim), "float32"), "emo_vec": np.ones(dim, "float32")} for n in (4, 6)]
    for model, batch, losses in ((t3, collate(samples), lambda m, b: m(batch=b)), (gpt, collate_indextts(clips), training_losses)):
        model.train()  # a training forward with every dropout at 0 gives the same numbers twice
        first, second = losses(model, batch), losses(model, batch)
        assert float(first["mel_loss"]) == float(second["mel_loss"]) and float(first["text_loss"]) == float(second["text_loss"])
        rates = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
        assert rates and not any(rates)
    published = build_t3(ChatterboxConfig(text_tokens_dict_size=300, **REDUCED))
    assert any(m.p > 0 for m in published.modules() if isinstance(m, torch.nn.Dropout))  # unset: the published rates
