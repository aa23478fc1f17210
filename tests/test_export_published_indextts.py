"""An IndexTTS2 export speaks through the published `IndexTTS2` class, offline, with the training's text front end.

The model folder is the reduced random-initialised one of the family tests (tests/indextts_helpers.py:
`build_speech_folder`, a 1-layer GPT at the published width 1280, small s2mel and BigVGAN) plus what
the published class reads beyond LinguaForge's speaker (`add_published_inference_files`: a tiny
Qwen emotion model, the emotion matrices, and a 17-layer w2v-BERT because the published `get_emb`
reads hidden state 17). The checkpoint is the folder's GPT extended to an Amharic tokenizer, with
the metadata a training run records. The export's `speak_indextts2.py` runs the published class in
its own process with an empty Hugging Face home, so every model comes from the export's `hf_hub/`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import yaml

from core.checkpoint import load_checkpoint, save_checkpoint
from core.config import load_settings
from core.families.registry import get_model_family

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

TEXT = "ሰላም ለዓለም። እንዴት ነህ?"
MAX_CODES = 12


@pytest.fixture(scope="module")
def exported(module_tmp: Path) -> dict:
    """Export an Amharic-extended checkpoint of the reduced speech folder; return the paths and the settings."""
    from core.families.indextts.gpt import IndexTTSModelConfig, gpt_kwargs_from_state_dict, read_indextts_config
    from core.tokenizers.tokenizer import load_tokenizer
    from core.training.embeddings import extend_checkpoint
    from tests.indextts_helpers import add_published_inference_files, amharic_tokenizer, build_model_folder, build_speech_folder

    base = build_model_folder(module_tmp / "base")
    folder = build_speech_folder(base, module_tmp / "IndexTTS-2")
    w2v = add_published_inference_files(folder, module_tmp / "w2v-bert-2.0-17-layers")
    tokenizer = amharic_tokenizer(folder / "bpe.model", [TEXT], module_tmp / "am.model")
    extend_checkpoint(folder / "gpt.pth", folder / "bpe.model", tokenizer, module_tmp / "extended.pt", family="indextts", init="mean")
    extended = load_checkpoint(module_tmp / "extended.pt")
    config = read_indextts_config(folder / "config.yaml")
    model_config = IndexTTSModelConfig(gpt_kwargs_from_state_dict(extended.state_dict, config, load_tokenizer(tokenizer).size), config)
    checkpoint = save_checkpoint(module_tmp / "gpt_am.pt", extended.state_dict, {**extended.meta, "model_config": model_config.to_dict()},
                                 extra={"tokenizer_path": str(tokenizer)})
    settings = load_settings()
    settings.data["families"] = {"indextts": {"model_dir": str(folder), "w2v_bert": str(w2v)}}
    written = get_model_family("indextts").export(checkpoint, module_tmp / "export", "am", settings)
    return {"folder": folder, "base": base, "export": module_tmp / "export", "written": written, "tokenizer": tokenizer, "w2v": w2v}


def test_export_folder_names_the_new_files_and_carries_the_published_ones(exported: dict) -> None:
    export, folder = exported["export"], exported["folder"]
    names = [p.name for p in exported["written"]]
    assert names[:4] == ["gpt_am.pth", "config.yaml", "am.model", "linguaforge.json"] and names[-1] == "speak_indextts2.py"
    cfg = yaml.safe_load((export / "config.yaml").read_text(encoding="utf-8"))
    assert cfg["gpt_checkpoint"] == "gpt_am.pth" and cfg["dataset"]["bpe_model"] == "am.model"
    assert cfg["linguaforge"] == {"text_normalizer": "none"}
    for name in ("s2mel.pth", "wav2vec2bert_stats.pt", "feat1.pt", "feat2.pt", "qwen0.6bemo4-merge/model.safetensors"):
        assert os.path.samefile(export / name, folder / name), name                   # hard links, no copies
    snapshots = {p.parent.parent.parent.name for p in (export / "hf_hub").glob("models--*/snapshots/*/*")}
    assert snapshots == {"models--facebook--w2v-bert-2.0", "models--amphion--MaskGCT", "models--funasr--campplus",
                         "models--nvidia--bigvgan_v2_22khz_80band_256x"}
    hub_w2v = next((export / "hf_hub" / "models--facebook--w2v-bert-2.0" / "snapshots").iterdir())
    assert os.path.samefile(hub_w2v / "model.safetensors", exported["w2v"] / "model.safetensors")   # the settings override wins
    notes = json.loads((export / "linguaforge.json").read_text(encoding="utf-8"))["published_inference"]
    assert notes["missing_for_published_inference"] == [] and notes["text_normalizer"] == "none"


def test_a_training_only_folder_exports_and_names_what_the_published_class_would_miss(exported: dict, tmp_path: Path) -> None:
    from core.families.indextts.export import carry_from_settings
    from core.families.indextts.gpt import read_indextts_config

    config = read_indextts_config(exported["base"] / "config.yaml")
    written, missing = carry_from_settings({"model_dir": str(exported["base"])}, config, tmp_path)
    assert {p.name for p in written} == {"wav2vec2bert_stats.pt", "models--facebook--w2v-bert-2.0", "models--amphion--MaskGCT",
                                         "speak_indextts2.py"}
    assert [line.split(":")[0] for line in missing] == ["s2mel_checkpoint", "emo_matrix", "spk_matrix", "qwen_emo_path",
                                                         "funasr/campplus", "nvidia/bigvgan_v2_22khz_80band_256x"]
    assert "campplus_cn_common.bin" in missing[4] and "families.indextts.campplus" in missing[4]
    assert carry_from_settings({}, config, tmp_path / "none") == ([], [
        "families.indextts.model_dir is not set: the export carries none of the published IndexTTS-2 folder's files "
        "(s2mel, CAMPPlus, BigVGAN, w2v-BERT, semantic codec, emotion files)"])


def test_published_tokenizer_in_the_shim_gives_the_training_ids(exported: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The published front end would send Amharic to NeMo's Chinese normaliser; the shim's gives LinguaForge's ids."""
    from indextts.utils.front import TextNormalizer

    from core.families.indextts.gpt import IndexTextNormalizer
    from core.tokenizers.tokenizer import load_tokenizer

    monkeypatch.setenv("HF_HUB_CACHE", "restored-after-the-test")   # the shim sets these on import
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = importlib.util.spec_from_file_location("speak_indextts2", exported["export"] / "speak_indextts2.py")
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    assert TextNormalizer().use_chinese(TEXT)                                   # the published default for this text
    assert shim.training_normalizer_language(exported["export"]) is None
    published = shim.training_tokenizer(exported["export"])
    ids = published.encode(TEXT)
    assert ids == IndexTextNormalizer().text_ids(TEXT, load_tokenizer(exported["tokenizer"]))
    assert min(published.encode("ሰላም ለዓለም")) >= 12000                         # Ethiopic letters: the new pieces, as trained


def test_published_indextts2_speaks_from_the_export_offline(exported: dict, tmp_path: Path) -> None:
    from tests.data_helpers import make_espeak_dataset

    reference = sorted(make_espeak_dataset(tmp_path / "voices", per_language=1, languages=("am",)).parent.glob("audio/*.wav"))[0]
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty-hf-home")}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, str(exported["export"] / "speak_indextts2.py"), "--reference", str(reference), "--text", TEXT,
                           "--output", str(tmp_path / "out.wav"), "--device", "cpu", "--greedy", "--max-mel-tokens", str(MAX_CODES)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "empty-hf-home").exists() or not any((tmp_path / "empty-hf-home").rglob("*.safetensors"))
    wav, rate = soundfile.read(tmp_path / "out.wav")
    assert rate == 22050 and np.isfinite(wav).all() and np.abs(wav).max() > 0
    assert 0 < len(wav) <= int(MAX_CODES * 1.72) * 256 and len(wav) % 256 == 0    # ≤ 12 codes → mel frames × BigVGAN hop 256
