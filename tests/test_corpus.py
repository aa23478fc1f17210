"""`corpus collect`: a manifest's text, normalised, one line per row."""

from __future__ import annotations

import json

import pytest

from core.tokenizers.corpus import collect_corpus
from core.errors import InputError


def _manifest(path, rows):
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_collect_normalises_and_filters_language(tmp_path, cli):
    manifest = _manifest(tmp_path / "manifest.jsonl", [
        {"audio": "a.wav", "text": "  ሰላም   ነው ።እንዴት ነህ?", "language": "am"},
        {"audio": "b.wav", "text": "Hello there.", "language": "en"},
        {"audio": "c.wav", "text": "ቡና፣ ሻይ ፣ወተት ::", "language": "am"},
        {"audio": "d.wav", "text": "   ", "language": "am"},
        {"audio": "e.wav", "text": "cafe\u0301 ውሃ"},
    ])
    out = tmp_path / "corpus.txt"
    run = cli("corpus", "collect", "--manifest", manifest, "--language", "am", "--output", out, "--json")
    assert run.code == 0, run.stderr
    expected = ["ሰላም ነው። እንዴት ነህ?", "ቡና፣ ሻይ፣ ወተት።", "caf\u00e9 ውሃ"]
    assert out.read_text(encoding="utf-8").splitlines() == expected
    assert run.json() == {"output": str(out), "lines_written": 3, "rows_read": 5, "skipped_language": 1,
                          "skipped_empty": 1, "characters": sum(map(len, expected))}


def test_collect_bad_manifests(tmp_path):
    out = tmp_path / "corpus.txt"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(InputError, match="broken.jsonl line 2: not valid JSON"):
        collect_corpus(broken, out)
    no_text = _manifest(tmp_path / "no_text.jsonl", [{"text": "ok"}, {"audio": "x.wav"}])
    with pytest.raises(InputError, match='line 2: no string "text" field'):
        collect_corpus(no_text, out)
    only_en = _manifest(tmp_path / "en.jsonl", [{"text": "hi", "language": "en"}])
    with pytest.raises(InputError, match="no rows with language 'am'"):
        collect_corpus(only_en, out, language="am")
    with pytest.raises(InputError, match="manifest not found"):
        collect_corpus(tmp_path / "missing.jsonl", out)
    assert not out.exists()


def test_collect_replaces_output_atomically(tmp_path):
    out = tmp_path / "corpus.txt"
    out.write_text("old\n", encoding="utf-8")
    manifest = _manifest(tmp_path / "m.jsonl", [{"text": "new text"}])
    collect_corpus(manifest, out)
    assert out.read_text(encoding="utf-8") == "new text\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
