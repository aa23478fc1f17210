"""Names are names and job parameters stay inside the workspace or a data root (issue 17, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.confine import check_name, is_inside
from core.errors import InputError


@pytest.mark.parametrize("bad", ["../../../outside/x", "a/b", "..", ".hidden", "", "x" * 200, "a\\b", "-flag"])
def test_check_name_refuses_anything_but_one_segment(bad: str) -> None:
    with pytest.raises(InputError, match="not a name"):
        check_name(bad, "run name")


def test_is_inside_follows_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret").write_text("x")
    (root / "link").symlink_to(tmp_path / "secret")
    assert is_inside(root / "file", [root])
    assert not is_inside(root / "link", [root])
    assert not is_inside(root / ".." / "secret", [root])


def test_run_config_name_escaping_the_workspace_is_refused(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    config = workspace / "escape.yaml"
    config.write_text("name: ../../../outside/x\ntask: lm\n", encoding="utf-8")
    assert cli_main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "name '../../../outside/x': not a name" in err and "Traceback" not in err
    assert not (workspace.parent.parent / "outside").exists()


@pytest.mark.parametrize("value", ["../../../outside/x.model", "/etc/linguaforge-x.model", "a.model,../../b.model"])
def test_job_parameter_outside_the_roots_is_refused(workspace: Path, value: str, capsys: pytest.CaptureFixture) -> None:
    (workspace / "corpus.txt").write_text("hello world\n" * 50, encoding="utf-8")
    code = cli_main(["jobs", "submit", "tokenizer.train", "--param", "corpus=corpus.txt", "--param", "vocab_size=60",
                     "--param", "kind=sentencepiece", "--param", f"output={value}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "outside the allowed folders" in err and "parameter output=" in err
    assert cli_main(["jobs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == []


def test_job_parameter_inside_the_workspace_is_accepted(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    (workspace / "corpus.txt").write_text("hello world\n" * 50, encoding="utf-8")
    code = cli_main(["jobs", "submit", "tokenizer.train", "--param", "corpus=corpus.txt", "--param", "vocab_size=60",
                     "--param", "kind=sentencepiece", "--param", f"output={workspace / 'tokenizers' / 'x.model'}"])
    assert code == 0, capsys.readouterr().err


def test_job_name_parameter_must_be_one_segment(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    code = cli_main(["jobs", "submit", "quickstart.lm", "--param", "name=../escape"])
    assert code == 2
    assert "not a name" in capsys.readouterr().err
