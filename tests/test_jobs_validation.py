"""Job parameters are validated by the real CLI parser, with the CLI's messages, before enqueueing."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.cli.catalogue import cli_catalogue
from core.cli.jobs import parse_params
from core.config import load_settings
from core.errors import InputError
from core.paths import PathType
from jobs.param_paths import check_job_params
from jobs.queue import build_huey
from jobs.runner import JobRunner
from jobs.slots import GpuSlots
from jobs.supervise import child_env, command_line
from jobs.tasks import execute, make_context
from tests.fixture_paths import INDEXTTS_BPE as FIXTURE_BPE
from tests.test_jobs_support import put_bpe
from tests.trainer_helpers import lm_config


def test_unknown_kind_lists_the_available_kinds(workspace: Path) -> None:
    with pytest.raises(InputError) as err:
        JobRunner(catalogue=cli_catalogue()).submit("no.such", {})
    assert "unknown job kind 'no.such'" in str(err.value)
    assert "doctor" in str(err.value)


def test_runner_commands_are_not_job_kinds(workspace: Path) -> None:
    for kind in ("worker", "jobs.submit"):
        with pytest.raises(InputError, match="unknown job kind"):
            cli_catalogue().build_argv(kind, {})


def test_unknown_parameter_names_the_known_ones(workspace: Path) -> None:
    with pytest.raises(InputError) as err:
        JobRunner(catalogue=cli_catalogue()).submit("doctor", {"tokeniser": "x.model"})
    assert "unknown parameter(s) tokeniser" in str(err.value)
    assert "tokenizer" in str(err.value)


def test_parser_error_comes_back_with_the_cli_message(workspace: Path) -> None:
    with pytest.raises(InputError) as err:
        JobRunner(catalogue=cli_catalogue()).submit("doctor", {"family": "bogus"})
    assert "invalid choice: 'bogus'" in str(err.value)
    assert JobRunner(catalogue=cli_catalogue()).list_jobs() == []


def test_params_become_the_commands_argv(workspace: Path) -> None:
    argv = cli_catalogue().build_argv("doctor", {"tokenizer": str(FIXTURE_BPE), "freeze_until": 12000})
    assert argv == ["doctor", "--tokenizer", str(FIXTURE_BPE), "--freeze-until", "12000", "--json"]
    assert cli_catalogue().build_argv("checkpoint.inspect", {"path": "a.pt"}) == ["checkpoint", "inspect", "a.pt", "--json"]


def test_submit_records_a_queued_job(workspace: Path) -> None:
    runner = JobRunner(catalogue=cli_catalogue())
    job_id = runner.submit("doctor", {"tokenizer": put_bpe(workspace)})
    job = runner.get_job(job_id)
    assert job["status"] == "queued"
    assert job["argv"][0] == "doctor"
    assert job["log_path"].endswith(f"logs/jobs/{job_id}.log")
    assert [j["id"] for j in runner.list_jobs()] == [job_id]
    assert len(runner.huey.pending()) == 1


def test_cli_submit_rejects_bad_params_with_exit_2(cli) -> None:
    run = cli("jobs", "submit", "doctor", "--param", "family=bogus", "--json")
    assert run.code == 2
    assert "invalid choice: 'bogus'" in run.json()["error"]


def test_cli_params_parse_to_a_mapping() -> None:
    params = parse_params(["vocab-size=8000", "corpus=a.txt", "corpus=b.txt", "note=x=y"])
    assert params == {"vocab_size": "8000", "corpus": ["a.txt", "b.txt"], "note": "x=y"}
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_params(["novalue"])


def test_bad_queue_url_is_an_input_error(tmp_path: Path, workspace: Path) -> None:
    override = tmp_path / "s.yaml"
    override.write_text("queue: {url: 'amqp://x'}\n")
    with pytest.raises(InputError, match="queue.url"):
        build_huey(load_settings(override))


def test_several_gpus_run_train_under_torchrun(workspace: Path) -> None:
    with pytest.raises(InputError, match="for `train` only"):
        JobRunner(catalogue=cli_catalogue()).submit("doctor", {"tokenizer": put_bpe(workspace)}, nproc=2)
    assert command_line(["train", "--config", "c.yaml"], nproc=2)[1:8] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "core"
    ]
    assert command_line(["doctor"])[1:] == ["-m", "core", "doctor"]


def test_a_job_takes_one_gpu_slot_per_process_and_sees_only_their_devices(workspace: Path) -> None:
    slots = GpuSlots(4, "2,3,5,7")  # the worker's own CUDA_VISIBLE_DEVICES
    assert slots.take(2) == ["2", "3"] and slots.take(3) is None and slots.take(2) == ["5", "7"]
    slots.give_back(["2", "3"])
    assert slots.take(1) == ["2"] and slots.take(2) is None
    assert GpuSlots(2).devices == ["0", "1"]
    assert child_env(workspace, devices=["5", "7"])["CUDA_VISIBLE_DEVICES"] == "5,7"
    # a job needing more slots than its worker has fails at once, naming the setting (no endless retry)
    runner = JobRunner(catalogue=cli_catalogue())
    job_id = runner.submit("train", {"config": str(lm_config(workspace, "wide"))}, nproc=3)
    execute(make_context(load_settings()), job_id)
    job = runner.get_job(job_id)
    assert job["status"] == "failed" and job["started_at"] is None
    assert "needs 3 GPU slots (--nproc 3)" in job["error"] and "has 1 (queue.gpu_slots)" in job["error"]


def every_path_option() -> list[tuple[str, str, PathType]]:
    """Return (kind, parameter, type) for every option typed as a path in every job kind's parser."""
    catalogue = cli_catalogue()
    found = []
    for kind in catalogue.kinds():
        _, parser, _ = catalogue.command_parser(kind)
        found.extend((kind, a.dest, a.type) for a in parser._actions if isinstance(a.type, PathType))
    return found


def test_every_path_typed_option_of_every_kind_is_confined(workspace: Path) -> None:
    """No hand-kept list: each path-typed option (a new one included) is refused when it climbs out."""
    options = every_path_option()
    assert {("embeddings.extend", "write_config"), ("doctor", "target_config"), ("quickstart.tts", "preset"),
            ("train", "config"), ("checkpoint.inspect", "path")} <= {(kind, name) for kind, name, _ in options}
    runner = JobRunner(catalogue=cli_catalogue())
    for kind, name, path_type in options:
        value = "../../outside/x" + (path_type.suffixes[0] if path_type.suffixes else "")
        with pytest.raises(InputError) as err:
            runner.submit(kind, {name: value})
        assert f"parameter {name}={value}" in str(err.value) and "outside the allowed folders" in str(err.value), (kind, err.value)
        assert runner.catalogue.path_options(kind)[name] == path_type
    assert runner.list_jobs() == []


def test_path_keywords_and_bare_names_are_not_paths(workspace: Path) -> None:
    check_job_params(load_settings(), "train", {"resume": "auto"}, cli_catalogue().path_options("train"))
    check_job_params(load_settings(), "quickstart.tts", {"preset": "reduced"}, cli_catalogue().path_options("quickstart.tts"))
    with pytest.raises(InputError, match="parameter resume=../../x.pt"):
        check_job_params(load_settings(), "train", {"resume": "../../x.pt"}, cli_catalogue().path_options("train"))
