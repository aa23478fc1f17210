"""The third audit's findings that are no single malformed command line (those are cases of test_bad_input.py):
a damaged cache index listed and cleaned, settings given by --settings and by LINGUAFORGE_SETTINGS judged the
same, a resume checkpoint of another family refused, the speaker options' ranges per family, the HF import's
metadata check, and the shared number type."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from core.cli import main as cli_main
from core.errors import InputError
from core.numbers import NumberRange
from tests.trainer_helpers import lm_config, lm_workspace


def _one_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ 9: a damaged cache index


def test_a_cache_index_without_its_fields_is_listed_as_damaged_and_cleaned(workspace: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    root = workspace / "caches"
    damaged, intact_files = root / ("a" * 64), root / ("b" * 64)
    damaged.mkdir(parents=True)
    (damaged / "index.json").write_text(json.dumps({"format": "linguaforge-cache-1"}), encoding="utf-8")
    intact_files.mkdir()
    (intact_files / "item.npz").write_bytes(b"x")  # a build that never finished: no index
    assert cli_main(["cache", "list", "--root", str(root), "--json"]) == 0
    records = {r["fingerprint"]: r for r in json.loads(capsys.readouterr().out)["caches"]}
    assert records["a" * 64]["unused"] and "damaged cache index (`created` missing" in records["a" * 64]["reasons"][0]
    assert records["b" * 64]["reasons"] == ["incomplete build (no index.json)"]
    assert cli_main(["cache", "clean", "--root", str(root), "--unused"]) == 0
    assert "removed 2 cache(s)" in capsys.readouterr().out and not any(root.iterdir())


# ------------------------------------------------------------------ 11: --settings and LINGUAFORGE_SETTINGS


def test_settings_by_option_and_by_environment_accept_the_same_job(workspace: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A run config whose corpus lies in a data root the settings file names: `jobs submit train --settings S`
    accepts it exactly as `LINGUAFORGE_SETTINGS=S jobs submit train` does (the runner loads the config with
    its own settings), and without S both refuse it."""
    lm_workspace(workspace)
    data_root = tmp_path / "corpora"
    data_root.mkdir()
    shutil.copyfile(workspace / "corpus" / "en.txt", data_root / "en.txt")
    config = lm_config(workspace, "rooted", data={"corpus": [str(data_root / "en.txt")]})
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({"data_roots": [str(data_root)]}), encoding="utf-8")

    assert cli_main(["jobs", "submit", "train", "--config", str(config), "--settings", str(settings), "--json"]) == 0
    by_option = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("LINGUAFORGE_SETTINGS", str(settings))
    assert cli_main(["jobs", "submit", "train", "--config", str(config), "--json"]) == 0
    by_environment = json.loads(capsys.readouterr().out)
    assert by_option["job"]["run_dir"] == by_environment["job"]["run_dir"]
    assert by_option["job"]["run_dir"].endswith("runs/rooted")
    monkeypatch.delenv("LINGUAFORGE_SETTINGS")
    assert cli_main(["jobs", "submit", "train", "--config", str(config)]) == 2
    assert "rooted.yaml.data.corpus[0]" in _one_error(capsys)


# ------------------------------------------------------------------ 12: a resume checkpoint's family


def test_a_resume_checkpoint_of_another_family_is_refused_before_training(workspace: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    lm_workspace(workspace)
    config = lm_config(workspace, "own")
    foreign = workspace / "checkpoints" / "t3.pt"
    foreign.parent.mkdir(parents=True)
    torch.save({"model": {"tfmr.w": torch.zeros(2)}, "linguaforge": {"family": "chatterbox", "task": "tts"}}, foreign)
    assert cli_main(["train", "--config", str(config), "--resume", str(foreign)]) == 2
    err = capsys.readouterr()
    assert "is a checkpoint of a family chatterbox run; this run's family is linguaforge" in err.err + err.out
    assert "Traceback" not in err.err and not (workspace / "runs" / "own" / "checkpoints").exists()

    from core.checkpoint import load_checkpoint
    from core.training.state import check_resume_source

    loaded = load_checkpoint(foreign)
    with pytest.raises(InputError, match="task tts run; this run's task is lm"):
        check_resume_source(loaded, "chatterbox", "lm")
    check_resume_source(loaded, "chatterbox", "tts")


# ------------------------------------------------------------------ 6: one number type, ranges per speaker option


@pytest.mark.parametrize("family, option, refused, accepted", [
    ("chatterbox", "cfg_weight", [math.nan, math.inf, -0.1, 11], [0, 0.5, 10]),
    ("chatterbox", "top_p", [math.nan, 0, 5], [0.01, 1]),
    ("chatterbox", "min_p", [-1, 2, math.nan], [0, 0.05, 1]),
    ("chatterbox", "repetition_penalty", [0, math.nan, -1], [0.5, 1.2]),
    ("chatterbox", "exaggeration", [math.inf, -1, 2.5], [0, 0.5, 2]),
    ("chatterbox", "cfm_steps", [math.nan, math.inf, -3, 0, 0.4, 1e9], [1, 10, 3.0]),
    ("indextts", "diffusion_steps", [0, 2.5, 1e9, math.nan], [1, 25]),
    ("indextts", "max_mel_tokens", [0, -5, 1e12, math.inf], [1, 1500]),
])
def test_speaker_options_hold_their_family_range(family: str, option: str, refused: list[float],
                                                  accepted: list[float]) -> None:
    """`synthesize --option`, `serve --option` and a run config's `eval.synthesis` go through one check: finite,
    in the option's range, whole where the speaker counts steps."""
    from core.families.registry import get_model_family

    speaker = get_model_family(family)
    for value in refused:
        with pytest.raises(InputError, match=f"--option {option}: .*(not a finite|too small|too large|out of range|"
                                             "not a whole)"):
            speaker.check_speech_options({option: value})
    for value in accepted:
        checked = speaker.check_speech_options({option: value})[option]
        assert checked == value and (not speaker.speech_options[option].integer or isinstance(checked, int))


def test_eval_synthesis_options_are_checked_with_the_run_plan(workspace: Path) -> None:
    from core.config import load_settings
    from core.training.plan import plan_run
    from core.training.run_config import run_config_from_dict

    settings = load_settings()
    base = {"name": "cb", "family": "chatterbox", "task": "tts", "tokenizer": "tokenizers/x.json"}
    for synthesis, fragment in (({"cfm_steps": 0.4}, "eval.synthesis cfm_steps: 0.4 is not a whole number"),
                                ({"temperature": math.nan}, "eval.synthesis temperature: nan is not a finite"),
                                ({"max_seconds": math.inf}, "eval.synthesis.max_seconds: inf is not a finite"),
                                ({"top_k": 3}, "eval.synthesis top_k: not an option of a chatterbox speaker")):
        config = run_config_from_dict({**base, "eval": {"synthesis": synthesis}}, "cb.yaml")
        with pytest.raises(InputError, match=fragment.replace(".", r"\.")):
            plan_run(config, settings)


def test_one_number_type_takes_text_and_numbers_alike() -> None:
    whole = NumberRange(1, 10, integer=True)
    assert whole.check("3", "n") == 3 and whole.check(3.0, "n") == 3 and whole.check(" 7 ", "n") == 7
    for value in ("3.5", True, None, "nan", "1e400", "11", "0", [], "9" * 5000):
        with pytest.raises(InputError, match="^n: "):
            whole.check(value, "n")
    share = NumberRange(0.0, 1.0, high_open=True)
    assert share.check("0.25", "s") == 0.25
    for value in (1, -0.0001, math.nan, "-inf"):
        with pytest.raises(InputError, match="^s: .*give a number in \\[0, 1\\)"):
            share.check(value, "s")


# ------------------------------------------------------------------ 1 and 4: an HF folder's own metadata


def test_an_hf_state_naming_its_arrow_inside_the_folder_imports(tmp_path: Path) -> None:
    """The check refuses only what leads out: a save_to_disk folder as `datasets` writes it imports, and
    so does one whose state.json names its arrow file by a `./` path or a sub-folder."""
    import io

    import numpy as np
    import soundfile as sf
    from datasets import Dataset

    from core.data.importing import import_dataset

    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 220 * np.arange(16000) / 16000)).astype("float32"), 16000, format="WAV")
    folder = tmp_path / "hf"
    Dataset.from_dict({"audio": [{"bytes": buffer.getvalue(), "path": "a.wav"}], "text": ["hello there"]}).save_to_disk(str(folder))
    assert import_dataset("hf", folder, tmp_path / "out", 16000, confine_to=[tmp_path]).kept == 1
    (folder / "shards").mkdir()
    (folder / "data-00000-of-00001.arrow").rename(folder / "shards" / "part.arrow")
    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    state["_data_files"] = [{"filename": "./shards/part.arrow"}]
    (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")
    assert import_dataset("hf", folder, tmp_path / "out2", 16000, confine_to=[tmp_path]).kept == 1
    (folder / "shards" / "part.arrow").rename(tmp_path / "part.arrow")
    (folder / "shards" / "part.arrow").symlink_to(tmp_path / "part.arrow")  # a symlink leading out is out
    with pytest.raises(InputError, match=r"_data_files\[0\]\.filename './shards/part.arrow': leads outside the folder"):
        import_dataset("hf", folder, tmp_path / "out3", 16000)
    assert not (tmp_path / "out3").exists()


# ------------------------------------------------------------------ one damaged file never stops an import


def test_a_damaged_recording_rejects_its_subtitles_and_the_other_pairs_import(tmp_path: Path) -> None:
    import numpy as np
    import soundfile as sf

    from core.data.importers import ImportOptions
    from core.data.importing import import_dataset

    folder = tmp_path / "talks"
    folder.mkdir()
    t = np.arange(32000) / 16000
    sf.write(str(folder / "good.wav"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype("float32"), 16000)
    (folder / "bad.wav").write_bytes(np.random.default_rng(0).bytes(600))
    for stem in ("good", "bad"):
        (folder / f"{stem}.srt").write_text("1\n00:00:00,000 --> 00:00:01,200\nhello there\n", encoding="utf-8")
    summary = import_dataset("srt", folder, tmp_path / "out", 16000, ImportOptions(language="en"), duration_range=(0.5, 5))
    assert summary.kept == 1 and [r.source for r in summary.rejects] == [str(folder / "bad.srt")]
    assert summary.rejects[0].reason.startswith(f"recording {folder / 'bad.wav'}: unreadable audio")
