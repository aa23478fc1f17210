"""`synthesize` and `eval tts` take the model family from the checkpoint's metadata (issue 23):
a Chatterbox checkpoint whose `linguaforge.family` says so speaks through the Chatterbox speaker
without `--family`; `--family` is needed only for a file without metadata, and one that disagrees
with the metadata is refused in one line before anything loads.

The checkpoint is real: the reduced published T3 (tests/chatterbox_helpers.py) resized by
`embeddings extend` for a tokenizer with two more pieces, which records its family. A full
synthesis needs the 529 MB S3Gen folder, so the path is shown by the Chatterbox speaker's own
refusal of a language its tokenizer has no tag for: it comes after the family loaded the T3 at
the checkpoint's size with its tokenizer (the own-model path would ask for a codec instead), and
by the voice `eval tts` loads: the Chatterbox speaker itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.checkpoint import load_checkpoint
from core.cli import main as cli_main
from core.errors import InputError
from core.inference import checkpoint_family
from core.training.embeddings import extend_checkpoint
from tests.chatterbox_helpers import make_chatterbox_folder, with_pieces


@pytest.fixture(scope="module")
def chatterbox(module_tmp: Path) -> dict[str, Path]:
    """The reduced Chatterbox folder, a tokenizer with two more pieces and the T3 extended to it."""
    folder = make_chatterbox_folder(module_tmp / "chatterbox")
    base = folder / "grapheme_mtl_merged_expanded_v1.json"
    tokenizer = with_pieces(base, ["ሰላም", "ነው"], module_tmp / "am.json")
    checkpoint = module_tmp / "t3_am.safetensors"
    extend_checkpoint(folder / "t3_mtl23ls_v2.safetensors", base, tokenizer, checkpoint, family="chatterbox", init="mean")
    return {"folder": folder, "base": base, "tokenizer": tokenizer, "checkpoint": checkpoint,
            "published": folder / "t3_mtl23ls_v2.safetensors"}


def _synthesize(paths: dict[str, Path], tmp_path: Path, *extra: str, published: bool = False) -> list[str]:
    checkpoint, tokenizer = (paths["published"], paths["base"]) if published else (paths["checkpoint"], paths["tokenizer"])
    return ["synthesize", "--checkpoint", str(checkpoint), "--tokenizer", str(tokenizer),
            "--model-dir", str(paths["folder"]), "--text", "selam", "--output", str(tmp_path / "out.wav"), *extra]


def test_the_metadata_names_the_family(chatterbox: dict[str, Path]) -> None:
    loaded = load_checkpoint(chatterbox["checkpoint"])
    assert loaded.meta["family"] == "chatterbox" and checkpoint_family(loaded) == "chatterbox"
    assert checkpoint_family(load_checkpoint(chatterbox["published"]), "chatterbox") == "chatterbox"


def test_synthesize_without_family_speaks_through_the_checkpoints_family(
    chatterbox: dict[str, Path], workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli_main(_synthesize(chatterbox, tmp_path, "--language", "xx"))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--language xx: the tokenizer {chatterbox['tokenizer']} has no [xx] tag" in err, err
    assert "codec" not in err and not (tmp_path / "out.wav").exists()


def test_a_family_that_disagrees_with_the_metadata_is_refused_before_anything_loads(
    chatterbox: dict[str, Path], workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("selam\nendet neh\n", encoding="utf-8")
    commands = {
        "synthesize": _synthesize(chatterbox, tmp_path, "--family", "indextts"),
        "eval": ["eval", "tts", "--checkpoint", str(chatterbox["checkpoint"]), "--family", "indextts",
                 "--sentences", str(sentences), "--references", "espeak", "--no-wer"],
    }
    for name, argv in commands.items():
        code = cli_main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, (name, err)
        assert f"--family indextts: {chatterbox['checkpoint']} is a chatterbox checkpoint (its metadata says so)" in err
    assert not (tmp_path / "out.wav").exists() and not (tmp_path / "eval_audio").exists()
    assert not (chatterbox["checkpoint"].parent / "eval_audio").exists()


def test_a_file_without_metadata_needs_family(
    chatterbox: dict[str, Path], workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli_main(_synthesize(chatterbox, tmp_path, published=True))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no LinguaForge metadata names its model family" in err and "--family chatterbox" in err
    code = cli_main(_synthesize(chatterbox, tmp_path, "--family", "chatterbox", "--language", "xx",
                                published=True))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "has no [xx] tag" in err, err


def test_eval_tts_loads_the_family_speaker_the_metadata_names(chatterbox: dict[str, Path], workspace: Path) -> None:
    """The voice `eval tts` speaks with: the Chatterbox speaker (T3 loaded at the checkpoint's size, 24 kHz,
    no codec ceiling) for the extended checkpoint without --family, and for the published file with it."""
    from core.config import load_settings
    from core.eval.voices import load_eval_voice

    settings = load_settings()
    for checkpoint, tokenizer, family in ((chatterbox["checkpoint"], chatterbox["tokenizer"], None),
                                          (chatterbox["published"], chatterbox["base"], "chatterbox")):
        voice = load_eval_voice(checkpoint, settings, "cpu", chatterbox["folder"], family=family, tokenizer=tokenizer)
        assert (voice.family, voice.sample_rate, voice.codec) == ("chatterbox", 24000, None)
        assert "codec" in voice.absent_rows
    with pytest.raises(InputError, match="no LinguaForge metadata names its model family"):
        load_eval_voice(chatterbox["published"], settings, "cpu", chatterbox["folder"], tokenizer=chatterbox["base"])
