"""What is *inside* a run config, a preset, a manifest or a dashboard field stays inside the roots (issue 23,
item 6), with one name rule, one inside-the-roots test and one owner of the dashboard's file lists (item 3).

Real files, the real CLI (a subprocess where it says "before any work"), a real worker running a real
`dataset.import` job, and the dashboard's own helper functions (the TensorBoard check through the real
app with --auth lives in test_ui_security.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from core.cli import main as cli_main
from core.config import Settings, load_settings
from core.confine import NAME_MAX, check_name, check_name_path
from core.errors import InputError
from core.training.run_config import PRESETS_DIR, check_config_paths, run_config_from_dict
from core.training.run_form import run_config_path
from tests.trainer_helpers import lm_config, lm_workspace

SECRET = "secret line 7d1f: never in the workspace"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace holding a text file, a wav and a 'model folder' that must stay unread."""
    folder = tmp_path / "outside"
    (folder / "model").mkdir(parents=True)
    (folder / "secret.txt").write_text(f"{SECRET}\nsecond secret line\n", encoding="utf-8")
    (folder / "model" / "secret-weights.safetensors").write_bytes(b"x")
    _tone(folder / "secret.wav")
    return folder


def _tone(path: Path, seconds: float = 1.0, rate: int = 16000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * 220 * t)).astype("float32"), rate)
    return path


# ------------------------------------------------------------------ run configs (CLI)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_train_config_with_an_outside_eval_file_exits_2_before_any_work(workspace: Path, outside: Path, cli) -> None:
    """The issue's case: a workspace config with `eval: {sentences: /outside/secret.txt}` — refused in one
    line naming the key, nothing of the run written (a real `python -m core train` process)."""
    lm_workspace(workspace)
    config = lm_config(workspace, "leak", eval={"sentences": str(outside / "secret.txt"), "count": 2})
    run = cli("train", "--config", config)
    assert run.code == 2, run.stderr
    assert "leak.yaml.eval.sentences" in run.stderr and "outside the allowed folders" in run.stderr
    assert "data_roots" in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert not (workspace / "runs" / "leak").exists()
    assert SECRET not in "".join(p.read_text(errors="ignore") for p in workspace.rglob("*") if p.is_file())


@pytest.mark.parametrize("key,value", [
    ("tokenizer", "{out}/secret.txt"),
    ("base_checkpoint", "../outside/model/secret-weights.safetensors"),
    ("codec", "{out}/model/secret-weights.safetensors"),
    ("data", {"corpus": ["corpus/en.txt", "{out}/secret.txt"]}),
    ("data", {"manifest": "{out}/secret.txt"}),
    ("eval", {"references": "{out}/model"}),
    ("model_dir", "{out}/model"),
    ("tokenizer", "tokenizers/link-out.json"),  # a symlink in the workspace leading out
])
def test_every_path_key_of_a_run_config_is_confined(workspace: Path, outside: Path, key: str, value: object,
                                                    capsys: pytest.CaptureFixture) -> None:
    lm_workspace(workspace)
    (workspace / "tokenizers" / "link-out.json").symlink_to(outside / "secret.txt")
    text = json.dumps(value).replace("{out}", str(outside))
    config = lm_config(workspace, "keyed", **{key: json.loads(text)})
    for command in (["train", "--config", str(config)], ["doctor", "--config", str(config)]):
        assert cli_main(command) == 2
        err = capsys.readouterr().err
        assert "outside the allowed folders" in err and "Traceback" not in err, err
        named = {"data": "data.corpus[1]" if "corpus" in text else "data.manifest", "eval": "eval.references"}
        assert f"keyed.yaml.{named.get(key, key)}: " in err, err
    assert not (workspace / "runs" / "keyed").exists()


def test_a_run_config_names_only_asr_hooks_the_settings_declare(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    """`eval.asr: command:…` in a run config (which the dashboard can load from an upload) runs nothing: the
    config is refused in one line before any work; a hook declared in the settings file is accepted by name."""
    lm_workspace(workspace)
    marker = workspace / "ran"
    config = lm_config(workspace, "hooked", eval={"asr": f"command:touch {marker} {{wav}}"})
    assert cli_main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "hooked.yaml.eval.asr 'command:touch" in err and "not a declared hook" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not marker.exists() and not (workspace / "runs" / "hooked").exists()
    declared = run_config_from_dict({"name": "ok", "eval": {"asr": "mine"}}, "ok.yaml")
    settings = Settings(workspace, {"eval": {"asr_hooks": {"mine": "command:cat {wav}"}}})
    check_config_paths(declared, settings)
    with pytest.raises(InputError, match="ok.yaml.eval.asr 'mine': not a declared hook"):
        check_config_paths(declared, Settings(workspace, {}))


def test_a_preset_is_a_name_of_config_presets_never_a_path(tmp_path: Path) -> None:
    (tmp_path / "evil.yaml").write_text("name: from-outside\n", encoding="utf-8")
    relative = os.path.relpath(tmp_path / "evil", PRESETS_DIR)
    for preset in (relative, str(tmp_path / "evil")):
        with pytest.raises(InputError, match="does not exist; known presets: .*tiny"):
            run_config_from_dict({"preset": preset})
    assert run_config_from_dict({"preset": "tiny-lm"}).task == "lm"


def test_model_dir_may_be_a_settings_model_folder_or_a_data_root(tmp_path: Path, outside: Path) -> None:
    """The settings define the roots: a model folder named there (or a data root) is allowed in a run config."""
    workspace = tmp_path / "ws"
    config = run_config_from_dict({"name": "m", "family": "chatterbox", "model_dir": str(outside / "model")}, "m.yaml")
    with pytest.raises(InputError, match=r"m.yaml.model_dir: .*outside the allowed folders.*families.<family>.model_dir"):
        check_config_paths(config, Settings(workspace, {}))
    check_config_paths(config, Settings(workspace, {"families": {"chatterbox": {"model_dir": str(outside / "model")}}}))
    check_config_paths(config, Settings(workspace, {"data_roots": [str(outside)]}))
    eval_out = run_config_from_dict({"name": "m", "eval": {"sentences": str(outside / "model" / "x.txt")}}, "m.yaml")
    with pytest.raises(InputError, match="m.yaml.eval.sentences"):  # a model folder holds models, not data
        check_config_paths(eval_out, Settings(workspace, {"families": {"chatterbox": {"model_dir": str(outside / "model")}}}))
    keywords = run_config_from_dict({"name": "m", "eval": {"references": "espeak"}}, "m.yaml")
    check_config_paths(keywords, Settings(workspace, {}))


def test_a_model_folder_job_parameter_follows_the_same_rule(tmp_path: Path, outside: Path) -> None:
    """`synthesize --model-dir` as a job parameter (the Inference tab's model folder field): a settings model
    folder passes, like in a run config; any other folder outside the roots is refused."""
    from core.cli.catalogue import cli_catalogue
    from jobs.param_paths import check_job_params

    types = cli_catalogue().path_options("synthesize")
    settings = Settings(tmp_path / "ws", {"families": {"indextts": {"model_dir": str(outside / "model")}}})
    check_job_params(settings, "synthesize", {"model_dir": str(outside / "model")}, types)
    with pytest.raises(InputError, match=r"parameter model_dir=.*outside the allowed folders"):
        check_job_params(settings, "synthesize", {"model_dir": str(outside)}, types)
    with pytest.raises(InputError, match=r"parameter reference=.*outside the allowed folders"):  # a model folder holds models
        check_job_params(settings, "synthesize", {"reference": str(outside / "model" / "a.wav")}, types)


# ------------------------------------------------------------------ the dashboard's loaders and fields


def _ctx(workspace: Path):
    from gradio_app.common import UIContext

    return UIContext(settings=load_settings(), runner=None)  # type: ignore[arg-type]


def test_training_load_accepts_only_its_listed_choices(workspace: Path, outside: Path) -> None:
    """An uploaded YAML (inside the workspace, but not a listed config) is refused; a listed preset that
    names an outside file is refused naming the key; a listed clean preset loads."""
    from gradio_app.tabs.training import load_config_source, preset_choices

    ctx = _ctx(workspace)
    lm_workspace(workspace)
    leak = {"preset": "tiny-lm", "name": "leak", "eval": {"sentences": str(outside / "secret.txt")}}
    (workspace / "uploads" / "x").mkdir(parents=True)
    (workspace / "uploads" / "x" / "evil.yaml").write_text(yaml.safe_dump(leak), encoding="utf-8")
    (workspace / "presets" / "team").mkdir(parents=True)
    (workspace / "presets" / "team" / "evil.yaml").write_text(yaml.safe_dump(leak), encoding="utf-8")
    lm_config(workspace, "clean").rename(workspace / "presets" / "clean.yaml")

    choices = preset_choices(ctx)
    assert "presets/clean.yaml" in choices and "presets/team/evil.yaml" in choices  # any depth
    assert "uploads/x/evil.yaml" not in choices
    for value in ("uploads/x/evil.yaml", str(outside / "secret.txt"), "../outside/secret.txt", "preset:../../etc/x"):
        with pytest.raises(InputError, match="not one of the listed presets"):
            load_config_source(ctx, value)
    with pytest.raises(InputError, match=r"presets/team/evil.yaml.eval.sentences: .*outside the allowed folders"):
        load_config_source(ctx, "presets/team/evil.yaml")
    assert load_config_source(ctx, "presets/clean.yaml")["name"] == "clean"
    assert load_config_source(ctx, "preset:tiny")["model"]["preset"] == "tiny"


def test_preflight_checks_the_model_folder_and_paths_only_the_loaded_base_holds(workspace: Path, outside: Path) -> None:
    """`model_dir: /outside/model` fails the config row without naming what is in that folder; so does an
    `eval.sentences` carried by the loaded base config that the form does not show."""
    from core.training.run_config import resolve_preset_chain
    from core.training.run_form import FORM_KEYS
    from gradio_app.tabs.training import form_values, preflight

    ctx = _ctx(workspace)
    base = resolve_preset_chain({"preset": "tiny", "name": "probe", "family": "chatterbox"})
    values = dict(zip(FORM_KEYS, form_values(base, ctx.settings)))
    for folder in (str(outside / "model"), "/root", "../outside/model"):
        values["model_dir"] = folder
        rows, ok, summary, _ = preflight(ctx, base, list(values.values()))
        assert not ok and [row[:2] for row in rows] == [["run settings", "FAIL"]], rows  # the config check, in words
        assert "“Published model folder”" in rows[0][2] and "outside the allowed folders" in rows[0][2]
        assert "secret-weights" not in json.dumps(rows)
    values["model_dir"] = ""
    leaky = {**base, "eval": {"sentences": str(outside / "secret.txt")}}
    rows, ok, _, _ = preflight(ctx, leaky, list(values.values()))
    assert not ok and rows[0][0] == "run settings" and "eval.sentences" in rows[0][2], rows


def test_dataset_compare_and_quickstart_loaders_accept_only_listed_values(workspace: Path, outside: Path) -> None:
    from gradio_app.tabs.compare import comparison, eval_folders
    from gradio_app.tabs.dataset import dataset_choices, dataset_view
    from gradio_app.tabs.quickstart import preset_choices, preset_param

    ctx = _ctx(workspace)
    nested = workspace / "datasets" / "team" / "am"
    nested.mkdir(parents=True)
    (nested / "manifest.jsonl").write_text(json.dumps({"id": "a", "audio": "a.wav", "text": "t", "duration": 1.0}) + "\n")
    (workspace / "datasets" / "notlisted").mkdir()  # a folder without a manifest
    assert [name for _, name in dataset_choices(ctx)] == ["team/am"]
    assert "1 kept" in dataset_view(ctx, "team/am")[0]
    for value in ("notlisted", "team", "../../outside", "team/am/.."):
        with pytest.raises(InputError):
            dataset_view(ctx, value)

    evaluated = workspace / "runs" / "r1" / "checkpoints"
    evaluated.mkdir(parents=True)
    (evaluated / "eval.json").write_text(json.dumps({"checkpoints": {}}), encoding="utf-8")
    (outside / "eval.json").write_text(json.dumps({"checkpoints": {}}), encoding="utf-8")
    assert eval_folders(ctx) == ["runs/r1"]
    assert comparison(ctx, "runs/r1") == ([], [])
    for value in ("runs", str(outside), "../outside"):
        with pytest.raises(InputError, match="not one of the listed runs"):
            comparison(ctx, value)

    (workspace / "quickstart" / "mine").mkdir(parents=True)
    (workspace / "quickstart" / "mine" / "q.yaml").write_text("journey: tts\n", encoding="utf-8")
    (workspace / "elsewhere.yaml").write_text("journey: tts\n", encoding="utf-8")
    assert preset_choices(ctx.settings) == ["quick", "full", "quickstart/mine/q.yaml"]
    assert preset_param(ctx.settings, "quick") == "quick"
    assert preset_param(ctx.settings, "quickstart/mine/q.yaml") == str(workspace.resolve() / "quickstart/mine/q.yaml")
    for value in ("elsewhere.yaml", str(outside / "secret.txt")):
        with pytest.raises(InputError, match="not one of the listed presets"):
            preset_param(ctx.settings, value)


# ------------------------------------------------------------------ one owner of the file lists


def test_workspace_file_lists_go_any_depth_and_never_lead_out(workspace: Path, outside: Path) -> None:
    from core import workspace_files as files

    for relative in ("tokenizers/a.model", "tokenizers/qs-1/en_am.model", "tokenizers/qs-1/deep/x.json",
                     "checkpoints/a.safetensors", "checkpoints/qs-1/am.safetensors", "runs/r/checkpoints/step_1.pt",
                     "runs/r/checkpoints/eval.json", "codecs/sub/c.pt", "datasets/s/manifest.jsonl",
                     "datasets/qs-1/sample/manifest.jsonl", "presets/p.yaml", "runs/r/config.yaml", "quickstart/q.yaml",
                     "runs/r/notes.pt", "tokenizers/.hidden.model", "tokenizers/.cache/y.model",
                     "tokenizers/qs-1/en_am.report.json", "checkpoints/qs-1/am.codec.pt", "datasets/qs-1/sample/am.jsonl",
                     "datasets/qs-1/sample/rejects.jsonl"):
        (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
        (workspace / relative).write_bytes(b"x")
    (workspace / "tokenizers" / "out.model").symlink_to(outside / "secret.txt")       # a file leading out
    (outside / "more").mkdir()
    (outside / "more" / "x.model").write_bytes(b"x")
    (workspace / "tokenizers" / "linked").symlink_to(outside / "more", target_is_directory=True)  # a folder leading out
    settings = load_settings()
    assert files.find_files(settings, files.TOKENIZERS) == ["tokenizers/a.model", "tokenizers/qs-1/deep/x.json", "tokenizers/qs-1/en_am.model"]
    assert files.find_files(settings, files.SENTENCEPIECE_TOKENIZERS) == ["tokenizers/a.model", "tokenizers/qs-1/en_am.model"]
    assert files.find_files(settings, files.HF_TOKENIZERS) == ["tokenizers/qs-1/deep/x.json"]
    assert files.find_files(settings, files.CHECKPOINTS) == ["checkpoints/a.safetensors", "checkpoints/qs-1/am.safetensors",
                                                "runs/r/checkpoints/step_1.pt"]
    assert files.find_files(settings, files.CODECS) == ["codecs/sub/c.pt"]
    assert files.dataset_names(settings) == ["qs-1/sample", "s"]
    assert files.find_files(settings, files.TRAINING_MANIFESTS) == ["datasets/qs-1/sample/am.jsonl", "datasets/qs-1/sample/manifest.jsonl",
                                                       "datasets/s/manifest.jsonl"]
    assert files.find_files(settings, files.EVALUATIONS) == ["runs/r/checkpoints/eval.json"]
    assert files.find_files(settings, files.PRESETS, files.RUN_CONFIGS) == ["presets/p.yaml", "runs/r/config.yaml"]
    assert files.quickstart_preset_files(settings) == ["quickstart/q.yaml"]
    data_root = Settings(settings.workspace, {"data_roots": [str(outside)]})
    assert "tokenizers/out.model" in files.find_files(data_root, files.TOKENIZERS)  # a symlink into a data root is fine


# ------------------------------------------------------------------ one name rule


def test_one_name_rule_with_one_limit_everywhere(workspace: Path) -> None:
    longest, too_long = "a" * NAME_MAX, "a" * (NAME_MAX + 1)
    assert check_name(longest, "run name") == longest
    assert run_config_path(longest) == f"runs/{longest}/config.yaml"
    assert run_config_from_dict({"name": longest}).name == longest
    assert check_name_path(f"{longest}/{longest}", "dataset") == f"{longest}/{longest}"
    for refuse in (lambda: check_name(too_long, "run name"), lambda: run_config_path(too_long),
                   lambda: run_config_from_dict({"name": too_long}), lambda: check_name_path(f"a/{too_long}", "dataset"),
                   lambda: check_name_path("a/../b", "dataset"), lambda: check_name_path("a//b", "dataset")):
        with pytest.raises(InputError, match=f"not a name.*at most {NAME_MAX}"):
            refuse()
    code = cli_main(["jobs", "submit", "quickstart.lm", "--param", f"name={too_long}"])
    assert code == 2


# ------------------------------------------------------------------ imports stay inside their roots


@pytest.fixture
def jobs_env(tmp_path: Path):
    """A workspace with a real SQLite queue (its worker started by the test), stopped afterwards."""
    from tests.test_jobs_support import make_jobs_env

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        yield from make_jobs_env(workspace, tmp_path)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_dataset_import_job_always_confines_its_audio(jobs_env, outside: Path) -> None:
    """`jobs submit dataset.import` asking for no confinement (as a script could): the real worker runs it
    confined; the manifest row reaching outside is rejected and its audio is not copied."""
    workspace = jobs_env.workspace
    (workspace / "incoming").mkdir()
    _tone(workspace / "incoming" / "inside.wav")
    rows = [{"id": "inside", "audio": "inside.wav", "text": "hello there", "speaker": "s", "language": "en"},
            {"id": "out", "audio": str(outside / "secret.wav"), "text": "hello there", "speaker": "s", "language": "en"}]
    (workspace / "incoming" / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    runner = jobs_env.runner
    job_id = runner.submit("dataset.import", {"format": "manifest", "input": "incoming/manifest.jsonl",
                                              "output": "datasets/imported", "confine_to_roots": False})
    record = runner.get_job(job_id)
    assert record["params"]["confine_to_roots"] is True and "--confine-to-roots" in record["argv"]
    jobs_env.start_worker()
    job = runner.wait(job_id, 300)
    assert job["status"] == "succeeded", runner.read_log(job_id)
    dataset = workspace / "datasets" / "imported"
    assert [json.loads(line)["id"] for line in (dataset / "manifest.jsonl").read_text().splitlines()] == ["inside"]
    rejects = [json.loads(line) for line in (dataset / "rejects.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejects] == ["out"] and "outside the allowed folders" in rejects[0]["reason"]
    assert sorted(p.name for p in (dataset / "audio").iterdir()) == ["inside.wav"]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_dataset_import_job_refuses_an_hf_folder_whose_state_names_an_outside_arrow(jobs_env, outside: Path) -> None:
    """The third audit's finding 1: an HF save_to_disk folder in the workspace whose state.json names its arrow
    file outside (absolute, or `../`) is refused by the real worker's job in one line; nothing of the outside
    table lands in the workspace."""
    import io

    from datasets import Dataset

    audio = io.BytesIO()
    _tone(outside / "clip.wav")
    audio.write((outside / "clip.wav").read_bytes())
    Dataset.from_dict({"audio": [{"bytes": audio.getvalue(), "path": "secret.wav"}], "text": [SECRET]}).save_to_disk(
        str(outside / "hf"))
    workspace = jobs_env.workspace
    runner = jobs_env.runner
    jobs = []
    for name, filename in (("absolute", str(outside / "hf" / "data-00000-of-00001.arrow")),
                           ("climbing", "../../../outside/hf/data-00000-of-00001.arrow")):
        folder = workspace / "incoming" / name
        folder.mkdir(parents=True)
        (folder / "dataset_info.json").write_bytes((outside / "hf" / "dataset_info.json").read_bytes())
        (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": filename}]}), encoding="utf-8")
        jobs.append(runner.submit("dataset.import", {"format": "hf", "input": f"incoming/{name}",
                                                     "output": f"datasets/{name}"}))
    jobs_env.start_worker()
    for job_id in jobs:
        job = runner.wait(job_id, 300)
        assert job["status"] == "failed" and "_data_files[0].filename" in job["error"], job
        assert "leads outside the folder" in job["error"] and "\n" not in job["error"].strip()
    assert not (workspace / "datasets").exists()
    assert SECRET not in "".join(p.read_text(errors="ignore") for p in workspace.rglob("*") if p.is_file())


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_indextts_processed_paths_stay_inside_the_input_folder(tmp_path: Path, outside: Path, indextts_bpe: Path) -> None:
    """A community manifest whose feature paths climb out (`../`, absolute, a symlink) has those clips rejected
    with the reason; only the clip inside is imported."""
    from core.families.indextts.gpt import IndexTextNormalizer
    from core.families.indextts.community_import import import_processed
    from core.tokenizers.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(indextts_bpe)
    folder = tmp_path / "processed"
    lines = []
    for clip in ("in", "climb", "absolute", "linked"):
        text = f"hello {clip}"
        arrays = {"codes": np.array([1, 2, 3, 4], dtype=np.int64), "condition": np.zeros((32, 8), dtype=np.float32),
                  "emo_vec": np.zeros(8, dtype=np.float32),
                  "text_ids": np.array(IndexTextNormalizer().text_ids(text, tokenizer), dtype=np.int32)}
        base = outside if clip in ("climb", "absolute") else folder
        paths = {}
        for key, value in arrays.items():
            (base / key).mkdir(parents=True, exist_ok=True)
            np.save(base / key / f"{clip}.npy", value)
            paths[f"{key}_path"] = {"climb": f"../outside/{key}/{clip}.npy", "absolute": str(outside / key / f"{clip}.npy")
                                    }.get(clip, f"{key}/{clip}.npy")
        lines.append(json.dumps({"id": clip, "text": text, "speaker": "s", "language": "en", **paths}))
    (folder / "codes" / "linked.npy").rename(outside / "linked-codes.npy")
    (folder / "codes" / "linked.npy").symlink_to(outside / "linked-codes.npy")
    (folder / "train_manifest.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = import_processed(folder, tokenizer, tmp_path / "cache")
    assert result.clips == 1
    reasons = {r.line: r.reason for r in result.rejects}
    assert sorted(reasons) == [2, 3, 4]
    assert all(reason.startswith("codes_path ") and "leads outside the folder" in reason for reason in reasons.values())
    assert str((outside / "linked-codes.npy").resolve()) in reasons[4]
