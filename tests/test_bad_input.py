"""Malformed input across every CLI command group: exit 2, one `error:` line naming the value, no
traceback, and every input file byte-identical afterwards (nothing written beside them).

Each case runs `core.cli.main` in-process (argparse errors included), so the table stays fast.
The exit-code contract it checks is the one docs/getting-started.md states.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import soundfile as sf

from core.cli import main as cli_main
from tests.fixture_paths import CHATTERBOX_TOKENIZER, INDEXTTS_BPE

NON_UTF8 = os.fsdecode(b"caf\xe9")  # what the shell hands over for a Latin-1 byte: a surrogate escape


def _tone(path: Path, values: np.ndarray | None = None, rate: int = 16000) -> None:
    t = np.arange(rate) / rate
    data = (0.3 * np.sin(2 * np.pi * 220 * t)).astype("float32") if values is None else values
    sf.write(str(path), data, rate, subtype="FLOAT")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder of good and hostile input files, and a workspace beside it (LINGUAFORGE_WORKSPACE)."""
    root = tmp_path_factory.mktemp("bad-input")
    folder = root / "in"
    folder.mkdir()
    workspace = root / "workspace"
    workspace.mkdir()
    from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES

    (folder / "corpus.txt").write_text("\n".join(ENGLISH_SENTENCES + AMHARIC_SENTENCES) * 3 + "\n", encoding="utf-8")
    (folder / "latin1.txt").write_bytes(b"caf\xe9 au lait\n" * 20)
    shutil.copyfile(INDEXTTS_BPE, folder / "bpe.model")
    shutil.copyfile(CHATTERBOX_TOKENIZER, folder / "tokenizer.json")
    (folder / "text.pt").write_text("hello world\n", encoding="utf-8")
    (folder / "short.pt").write_bytes(bytes(range(25)))
    (folder / "random.pt").write_bytes(np.random.default_rng(0).bytes(1000))
    (folder / "huge.safetensors").write_bytes(struct.pack("<Q", 10**12) + b'{"a":1}')
    (folder / "random.jsonl").write_bytes(np.random.default_rng(1).bytes(10_000))
    (folder / "bad.parquet").write_bytes(np.random.default_rng(3).bytes(2_000))
    (folder / "random.yaml").write_bytes(np.random.default_rng(2).bytes(500))
    (folder / "escape.yaml").write_text("name: ../../outside/x\ntask: lm\n", encoding="utf-8")
    _tone(folder / "tone.wav")
    nan = np.zeros(16000, dtype="float32")
    nan[100] = np.nan
    _tone(folder / "nan.wav", nan)
    clips = folder / "clips"
    clips.mkdir()
    _tone(clips / "nan.wav", nan)
    (clips / "nan.txt").write_text("hello there", encoding="utf-8")
    inf = np.full(16000, 0.1, dtype="float32")
    inf[5] = np.inf
    _tone(clips / "inf.wav", inf)
    (clips / "inf.txt").write_text("hello there", encoding="utf-8")
    rows = [{"id": f"c{i}", "audio": str(folder / "tone.wav"), "text": "hello there", "speaker": "s", "language": "en"}
            for i in range(3)]
    (folder / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _third_audit_inputs(folder, root)
    shutil.copyfile(folder / "nul.yaml", workspace / "nul.yaml")  # a job's config must lie in the workspace
    previous = os.environ.get("LINGUAFORGE_WORKSPACE")
    os.environ["LINGUAFORGE_WORKSPACE"] = str(workspace)
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("LINGUAFORGE_WORKSPACE", None)
        else:
            os.environ["LINGUAFORGE_WORKSPACE"] = previous


def _wav_bytes() -> bytes:
    import io

    buffer = io.BytesIO()
    t = np.arange(16000) / 16000
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 220 * t)).astype("float32"), 16000, format="WAV")
    return buffer.getvalue()


def _rewrite_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")


def _third_audit_inputs(folder: Path, root: Path) -> None:
    """The third audit's hostile files: HF folders whose metadata leads out or is malformed, NUL bytes in the
    paths rows name, a run config with a NUL path, forged adapter records, a split manifest, an existing output."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset

    saved = Dataset.from_dict({"audio": [{"bytes": _wav_bytes(), "path": "secret.wav"}], "text": ["secret words"]})
    saved.save_to_disk(str(root / "outside-hf"))  # beside the inputs: an arrow table no import may read
    arrow = root / "outside-hf" / "data-00000-of-00001.arrow"
    for name, filename in (("hf-absolute", str(arrow)), ("hf-climb", "../../outside-hf/data-00000-of-00001.arrow")):
        target = folder / name
        target.mkdir()
        shutil.copyfile(root / "outside-hf" / "dataset_info.json", target / "dataset_info.json")
        (target / "state.json").write_text(json.dumps({"_data_files": [{"filename": filename}]}), encoding="utf-8")
    for name, state in (("hf-state-brace", "{"), ("hf-state-empty", "{}"), ("hf-state-list", "[1, 2]")):
        shutil.copytree(root / "outside-hf", folder / name)
        (folder / name / "state.json").write_text(state, encoding="utf-8")
    shutil.copytree(root / "outside-hf", folder / "hf-no-info")
    (folder / "hf-no-info" / "dataset_info.json").unlink()
    shutil.copytree(root / "outside-hf", folder / "hf-unknown-feature")
    _rewrite_json(folder / "hf-unknown-feature" / "dataset_info.json",
                  lambda info: {**info, "features": {**info["features"], "text": {"_type": "NoSuchFeature"}}})
    for name, listing in (("hf-dict-bad", '{"splits": '), ("hf-dict-missing-split", '{"splits": ["train", "test"]}'),
                          ("hf-dict-outside-split", '{"splits": ["../../outside-hf"]}')):
        (folder / name).mkdir()
        shutil.copytree(root / "outside-hf", folder / name / "train")
        (folder / name / "dataset_dict.json").write_text(listing, encoding="utf-8")
    for name, value in (("bytes-str", "not bytes"), ("bytes-int", 7)):
        pq.write_table(pa.table({"audio": [{"bytes": value, "path": "a.wav"}], "text": ["hello there"]}), folder / f"{name}.parquet")
    pq.write_table(pa.table({"audio": ["a\x00.wav"], "text": ["hello there"]}), folder / "nul-path.parquet")
    # NUL bytes in the paths rows name
    row = {"id": "n", "audio": "tone\x00.wav", "text": "hello there", "speaker": "s", "language": "en"}
    (folder / "nul.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    (folder / "cv-nul" / "clips").mkdir(parents=True)
    (folder / "cv-nul" / "validated.tsv").write_text("client_id\tpath\tsentence\nc1\tx\x00.mp3\thello there\n", encoding="utf-8")
    (folder / "lj-nul" / "wavs").mkdir(parents=True)
    (folder / "lj-nul" / "metadata.csv").write_text("a\x00b|hello there\n", encoding="utf-8")
    (folder / "nul.yaml").write_text('name: nul\ntask: lm\ntokenizer: "tok\\0.model"\n', encoding="utf-8")
    # forged adapter records in checkpoint metadata
    meta = {"family": "linguaforge", "task": "lm", "model_config": {}}
    for name, adapter in (("adapter-text", "x"), ("adapter-list", [1, 2]), ("adapter-no-base", {"kind": "lora", "rank": 4}),
                          ("adapter-nul-base", {"kind": "lora", "rank": 4, "alpha": 8, "dropout": 0.0, "targets": ["q"],
                                                "modules": {"q": "linear"}, "base_checkpoint": "base\x00.pt",
                                                "base_sha256": "0" * 64, "frozen_rows": 0})):
        torch.save({"model": {"w": torch.zeros(2)}, "linguaforge": {**meta, "adapter": adapter}}, folder / f"{name}.pt")
    (folder / "split").mkdir()
    rows = [{"id": f"c{i}", "audio": str(folder / "tone.wav"), "text": "hello there", "speaker": f"s{i % 4}",
             "language": "en"} for i in range(12)]
    (folder / "split" / "manifest.train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "existing.safetensors").write_bytes(b"the user's file")


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


# (id, argv with {in} for the inputs folder, a fragment the one error line must contain)
CASES: list[tuple[str, list[str], str]] = [
    # checkpoint
    ("ckpt-text", ["checkpoint", "inspect", "{in}/text.pt"], "text.pt: not a readable PyTorch checkpoint"),
    ("ckpt-25-bytes", ["checkpoint", "inspect", "{in}/short.pt"], "short.pt: not a readable PyTorch checkpoint"),
    ("ckpt-random", ["checkpoint", "inspect", "{in}/random.pt"], "random.pt: not a readable PyTorch checkpoint"),
    ("ckpt-huge-header", ["checkpoint", "inspect", "{in}/huge.safetensors"], "claims 1000000000000 bytes"),
    ("ckpt-missing", ["checkpoint", "inspect", "{in}/missing.pt"], "missing.pt: checkpoint file not found"),
    ("ckpt-folder", ["checkpoint", "inspect", "{in}/clips"], "clips"),
    # tokenizer
    ("tok-train-vocab-0", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--vocab-size", "0",
                           "--output", "{in}/o.model"], "--vocab-size: 0 is too small"),
    ("tok-train-vocab-neg", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--vocab-size", "-5",
                             "--output", "{in}/o.model"], "--vocab-size: -5 is too small"),
    ("tok-train-overwrites-corpus", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--vocab-size", "60",
                                     "--output", "{in}/corpus.txt"], "would overwrite the input --corpus"),
    ("tok-train-output-folder", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--vocab-size", "60",
                                 "--output", "{in}/clips"], "clips"),
    ("tok-train-output-under-file", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--vocab-size", "60",
                                     "--output", "{in}/corpus.txt/x.model"], "corpus.txt/x.model"),
    ("tok-train-hf-output-folder", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--kind", "hf-bpe",
                                    "--vocab-size", "300", "--output", "{in}/clips"], "clips"),
    ("tok-train-corpus-missing", ["tokenizer", "train", "--corpus", "{in}/nope.txt", "--vocab-size", "60",
                                  "--output", "{in}/o.model"], "nope.txt"),
    ("tok-train-corpus-latin1", ["tokenizer", "train", "--corpus", "{in}/latin1.txt", "--vocab-size", "60",
                                 "--output", "{in}/o.model"], "latin1.txt"),
    ("tok-train-hf-too-small", ["tokenizer", "train", "--corpus", "{in}/corpus.txt", "--kind", "hf-bpe",
                                "--vocab-size", "100", "--output", "{in}/o.json"], "--vocab-size 100"),
    ("tok-extend-target-below-base", ["tokenizer", "extend", "--base", "{in}/bpe.model", "--corpus", "{in}/corpus.txt",
                                      "--target-size", "100", "--output", "{in}/o.model"], "100"),
    ("tok-extend-overwrites-base", ["tokenizer", "extend", "--base", "{in}/bpe.model", "--corpus", "{in}/corpus.txt",
                                    "--target-size", "12100", "--output", "{in}/bpe.model"], "would overwrite the input --base"),
    ("tok-merge-vocab-0", ["tokenizer", "merge", "--base", "{in}/tokenizer.json", "--corpus", "{in}/corpus.txt",
                           "--vocab-size", "0", "--output", "{in}/o.json"], "--vocab-size: 0 is too small"),
    ("tok-inspect-base-neg", ["tokenizer", "inspect", "--tokenizer", "{in}/bpe.model", "--base-size", "-1"],
     "--base-size: -1 is too small"),
    ("tok-inspect-base-too-big", ["tokenizer", "inspect", "--tokenizer", "{in}/bpe.model", "--base-size", "99999"],
     "--base-size 99999"),
    ("tok-encode-non-utf8", ["tokenizer", "encode", "--tokenizer", "{in}/bpe.model", "--text", NON_UTF8],
     "--text: not valid UTF-8"),
    ("tok-encode-text-file", ["tokenizer", "encode", "--tokenizer", "{in}/corpus.txt", "--text", "hi"], "corpus.txt"),
    ("tok-sweep-sizes", ["tokenizer", "sweep", "--corpus", "{in}/corpus.txt", "--sizes", "0,-1"], "--sizes"),
    # codec
    ("codec-hop-0", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                     "--hop-length", "0"], "--hop-length: 0 is too small"),
    ("codec-hop-whole-frame", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                               "--hop-length", "1024"], "--hop-length 1024: choose 1 to 512"),
    ("sample-recombined-negative", ["dataset", "sample", "--output", "{in}/s", "--recombined", "-1"],
     "--recombined: -1 is too small"),
    ("codec-n-mels-0", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                        "--n-mels", "0"], "--n-mels: 0 is too small"),
    ("codec-iterations-0", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                            "--iterations", "0"], "--iterations: 0 is too small"),
    ("codec-codebook-1", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                          "--codebook-size", "1"], "--codebook-size: 1 is too small"),
    ("codec-cuda", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                    "--device", "cuda"], "no CUDA GPU"),
    ("codec-val-ratio", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                         "--val-ratio", "1.5"], "--val-ratio: 1.5 is out of range"),
    ("codec-eval-max-clips-0", ["codec", "eval", "--codec", "{in}/c.pt", "--manifest", "{in}/manifest.jsonl",
                                "--max-clips", "0"], "--max-clips: 0 is too small"),
    ("codec-train-random-manifest", ["codec", "train", "--manifest", "{in}/random.jsonl", "--output", "{in}/c.pt"],
     "random.jsonl"),
    ("codec-encode-bad-codec", ["codec", "encode", "--codec", "{in}/short.pt", "--input", "{in}/tone.wav",
                                "--output", "{in}/codes.npy"], "short.pt"),
    ("codec-decode-bad-codes", ["codec", "decode", "--codec", "{in}/short.pt", "--codes", "{in}/random.pt",
                                "--output", "{in}/o.wav"], "short.pt"),
    # dataset
    ("ds-output-is-file", ["dataset", "import", "--format", "manifest", "--input", "{in}/manifest.jsonl",
                           "--output", "{in}/corpus.txt"], "corpus.txt"),
    ("ds-random-manifest", ["dataset", "import", "--format", "manifest", "--input", "{in}/random.jsonl",
                            "--output", "{in}/ds"], "random.jsonl"),
    ("ds-padding-neg", ["dataset", "import", "--format", "srt", "--input", "{in}/clips", "--output", "{in}/ds",
                        "--padding", "-1", "--language", "en"], "--padding: -1 is out of range"),
    ("ds-min-duration-neg", ["dataset", "import", "--format", "manifest", "--input", "{in}/manifest.jsonl",
                             "--output", "{in}/ds", "--min-duration", "-1"], "--min-duration: -1 is out of range"),
    ("ds-workers-0", ["dataset", "import", "--format", "manifest", "--input", "{in}/manifest.jsonl",
                      "--output", "{in}/ds", "--workers", "0"], "--workers: 0 is too small"),
    ("ds-nan-inf-strict", ["dataset", "import", "--format", "folder", "--input", "{in}/clips", "--output", "{in}/ds",
                           "--language", "en", "--strict"], "not finite"),
    ("ds-input-missing", ["dataset", "import", "--format", "manifest", "--input", "{in}/nope.jsonl",
                          "--output", "{in}/ds"], "nope.jsonl"),
    ("ds-folder-no-language", ["dataset", "import", "--format", "folder", "--input", "{in}/clips",
                               "--output", "{in}/ds"], "--language"),
    ("ds-sample-per-language-0", ["dataset", "sample", "--output", "{in}/ds", "--per-language", "0"],
     "--per-language: 0 is too small"),
    ("ds-split-val-ratio", ["dataset", "split", "--manifest", "{in}/manifest.jsonl", "--val-ratio", "2"],
     "--val-ratio: 2 is out of range"),
    ("ds-format", ["dataset", "import", "--format", "csv", "--input", "{in}/manifest.jsonl", "--output", "{in}/ds"],
     "invalid choice: 'csv'"),
    ("ds-cv-no-tsv", ["dataset", "import", "--format", "commonvoice", "--input", "{in}/clips", "--output", "{in}/ds"],
     "validated.tsv: not found"),
    ("ds-cv-tsv-path", ["dataset", "import", "--format", "commonvoice", "--input", "{in}/clips", "--output", "{in}/ds",
                        "--tsv", "../manifest.jsonl"], "--tsv '../manifest.jsonl': name a table of the release folder"),
    ("ds-cv-not-a-cv-tsv", ["dataset", "import", "--format", "commonvoice", "--input", "{in}/manifest.jsonl",
                            "--output", "{in}/ds"], "client_id, path, sentence missing"),
    ("ds-hf-no-table", ["dataset", "import", "--format", "hf", "--input", "{in}/clips", "--output", "{in}/ds"],
     "neither a datasets.save_to_disk folder nor parquet/arrow files"),
    ("ds-hf-bad-parquet", ["dataset", "import", "--format", "hf", "--input", "{in}/bad.parquet", "--output", "{in}/ds"],
     "bad.parquet: not a readable parquet table"),
    ("ds-skip-filter-unknown", ["dataset", "import", "--format", "manifest", "--input", "{in}/manifest.jsonl",
                                "--output", "{in}/ds", "--filter", "--skip-filter", "loudness"], "filter 'loudness': unknown"),
    ("ds-filter-near-duplicate", ["dataset", "filter", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/ds",
                                  "--near-duplicate", "0.9"], "--near-duplicate: 0.9 is out of range"),
    ("ds-filter-rate-factor", ["dataset", "filter", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/ds",
                               "--rate-factor", "1"], "--rate-factor: 1 is out of range"),
    ("ds-filter-durations", ["dataset", "filter", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/ds",
                             "--filter-min-duration", "5", "--filter-max-duration", "2"], "min duration 5.0 must be below"),
    ("ds-split-write-by-clip", ["dataset", "split", "--manifest", "{in}/manifest.jsonl", "--write"],
     "--write needs --by speaker"),
    # corpus
    ("corpus-random-manifest", ["corpus", "collect", "--manifest", "{in}/random.jsonl", "--output", "{in}/o.txt"],
     "random.jsonl"),
    ("corpus-overwrites-manifest", ["corpus", "collect", "--manifest", "{in}/manifest.jsonl",
                                    "--output", "{in}/manifest.jsonl"], "would overwrite the input --manifest"),
    # embeddings
    ("emb-text-checkpoint", ["embeddings", "extend", "--checkpoint", "{in}/text.pt", "--base-tokenizer", "{in}/bpe.model",
                             "--tokenizer", "{in}/bpe.model", "--output", "{in}/o.safetensors"], "text.pt"),
    ("emb-overwrites-checkpoint", ["embeddings", "extend", "--checkpoint", "{in}/random.pt", "--base-tokenizer",
                                   "{in}/bpe.model", "--tokenizer", "{in}/bpe.model", "--output", "{in}/random.pt"],
     "would overwrite the input --checkpoint"),
    # doctor
    ("doctor-text-tokenizer", ["doctor", "--tokenizer", "{in}/text.pt"], "text.pt"),
    ("doctor-bad-checkpoint", ["doctor", "--tokenizer", "{in}/bpe.model", "--checkpoint", "{in}/short.pt"], "short.pt"),
    ("doctor-freeze-neg", ["doctor", "--tokenizer", "{in}/bpe.model", "--freeze-until", "-1"],
     "--freeze-until: -1 is too small"),
    # synthesize / generate
    ("synth-non-utf8", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", NON_UTF8, "--output", "{in}/o.wav"],
     "--text: not valid UTF-8"),
    ("synth-top-k-neg", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                         "--top-k", "-1"], "--top-k: -1 is too small"),
    ("synth-temperature-neg", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                               "--temperature", "-1"], "--temperature: -1 is out of range"),
    ("synth-bad-checkpoint", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav"],
     "short.pt"),
    ("synth-nan-reference", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                             "--reference", "{in}/nan.wav"], "nan.wav"),
    ("synth-text-too-long", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "ab. " * 6000,
                             "--output", "{in}/o.wav"], "--text: 24000 characters"),
    ("synth-max-new-0", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                         "--max-new-tokens", "0"], "--max-new-tokens: 0 is too small"),
    ("gen-max-new-0", ["generate", "--checkpoint", "{in}/short.pt", "--prompt", "hi", "--max-new-tokens", "0"],
     "--max-new-tokens: 0 is too small"),
    ("gen-text-checkpoint", ["generate", "--checkpoint", "{in}/text.pt", "--prompt", "hi"], "text.pt"),
    ("gen-top-p", ["generate", "--checkpoint", "{in}/text.pt", "--prompt", "hi", "--top-p", "0"],
     "--top-p: 0 is out of range"),
    # serve
    ("serve-outside-roots", ["serve", "--checkpoint", "{in}/short.pt", "--voices", "{in}/clips"],
     "outside the allowed folders"),
    ("serve-port-0", ["serve", "--checkpoint", "{in}/short.pt", "--voices", "{in}/clips", "--port", "0"],
     "--port: 0 is too small"),
    ("serve-queue-limit-0", ["serve", "--checkpoint", "{in}/short.pt", "--voices", "{in}/clips", "--queue-limit", "0"],
     "--queue-limit: 0 is too small"),
    # eval
    ("eval-text-checkpoint", ["eval", "tts", "--checkpoint", "{in}/text.pt", "--sentences", "{in}/corpus.txt"],
     "text.pt"),
    ("eval-sentences-missing", ["eval", "tts", "--checkpoint", "{in}/short.pt", "--sentences", "{in}/nope.txt"], "nope"),
    ("eval-asr-unknown", ["eval", "tts", "--checkpoint", "{in}/text.pt", "--sentences", "{in}/corpus.txt",
                          "--asr", "whisper"], "eval.asr 'whisper'"),
    # cache / pairs / preprocess / prune
    ("cache-root-file", ["cache", "list", "--root", "{in}/corpus.txt"], "corpus.txt"),
    ("pairs-per-target-0", ["pairs", "build", "--cache", "{in}/clips", "--per-target", "0"],
     "--per-target: 0 is too small"),
    ("pairs-cache-missing", ["pairs", "build", "--cache", "{in}/nope"], "nope"),
    ("pre-workers-0", ["preprocess", "--manifest", "{in}/manifest.jsonl", "--tokenizer", "{in}/bpe.model",
                       "--codec", "{in}/short.pt", "--workers", "0"], "--workers: 0 is too small"),
    ("pre-bad-codec", ["preprocess", "--manifest", "{in}/manifest.jsonl", "--tokenizer", "{in}/bpe.model",
                       "--codec", "{in}/short.pt", "--output", "{in}/cache"], "short.pt"),
    ("prune-random", ["prune", "--checkpoint", "{in}/random.pt", "--output", "{in}/o.safetensors"], "random.pt"),
    ("prune-overwrites", ["prune", "--checkpoint", "{in}/random.pt", "--output", "{in}/random.pt"],
     "would overwrite the input --checkpoint"),
    # train
    ("train-max-steps-neg", ["train", "--config", "{in}/escape.yaml", "--max-steps", "-3"],
     "--max-steps: -3 is too small"),
    ("train-config-missing", ["train", "--config", "{in}/nope.yaml"], "nope.yaml"),
    ("train-config-random", ["train", "--config", "{in}/random.yaml"], "random.yaml"),
    ("validate-config-missing", ["validate", "--config", "{in}/nope.yaml"], "nope.yaml"),
    ("validate-config-random", ["validate", "--config", "{in}/random.yaml"], "random.yaml"),
    ("train-config-escape", ["train", "--config", "{in}/escape.yaml"], "not a name"),
    ("validate-config-missing", ["validate", "--config", "{in}/nope.yaml"], "nope.yaml"),
    ("validate-config-random", ["validate", "--config", "{in}/random.yaml"], "random.yaml"),
    # export
    ("export-text-checkpoint", ["export", "--checkpoint", "{in}/text.pt", "--output", "{in}/exported"], "text.pt"),
    ("export-output-is-file", ["export", "--checkpoint", "{in}/random.pt", "--output", "{in}/corpus.txt"],
     "corpus.txt"),
    ("export-merge-random", ["export", "--checkpoint", "{in}/random.pt", "--output", "{in}/exported", "--merge"], "random.pt"),
    # jobs / worker / quickstart
    ("jobs-unknown-kind", ["jobs", "submit", "no.such"], "unknown job kind 'no.such'"),
    ("jobs-bad-param", ["jobs", "submit", "doctor", "--param", "family"], "--param 'family'"),
    ("jobs-nproc-0", ["jobs", "submit", "train", "--nproc", "0"], "--nproc: 0 is too small"),
    ("jobs-show-unknown", ["jobs", "show", "nosuchjob"], "nosuchjob"),
    ("jobs-list-limit-0", ["jobs", "list", "--limit", "0"], "--limit: 0 is too small"),
    ("jobs-logs-tail-neg", ["jobs", "logs", "x", "--tail", "-1"], "--tail: -1 is too small"),
    ("jobs-outside-param", ["jobs", "submit", "doctor", "--param", "tokenizer=../../../etc/x.model"],
     "outside the allowed folders"),
    ("worker-workers-0", ["worker", "--workers", "0"], "--workers: 0 is too small"),
    ("worker-settings-missing", ["worker", "--settings", "{in}/nope.yaml"], "nope.yaml"),
    ("quickstart-name", ["quickstart", "lm", "--name", "../escape"], "not a name"),
    # the third audit. 1: a dataset folder's own metadata names a file outside it
    ("hf-state-absolute-arrow", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-absolute", "--output", "{in}/ds",
                                 "--confine-to-roots"], "_data_files[0].filename"),
    ("hf-state-climbing-arrow", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-climb", "--output", "{in}/ds"],
     "leads outside the folder"),
    ("hf-dict-outside-split", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-dict-outside-split", "--output",
                               "{in}/ds"], "split '../../outside-hf': leads outside the folder"),
    # 2: a NUL byte in a path a row, a config or a record names
    ("nul-manifest-row", ["dataset", "import", "--format", "manifest", "--input", "{in}/nul.jsonl", "--output", "{in}/ds"],
     "holds a NUL byte"),
    ("nul-commonvoice-row", ["dataset", "import", "--format", "commonvoice", "--input", "{in}/cv-nul", "--output", "{in}/ds"],
     "holds a NUL byte"),
    ("nul-ljspeech-name", ["dataset", "import", "--format", "ljspeech", "--input", "{in}/lj-nul", "--output", "{in}/ds"],
     "holds a NUL byte"),
    ("nul-hf-path", ["dataset", "import", "--format", "hf", "--input", "{in}/nul-path.parquet", "--output", "{in}/ds"],
     "holds a NUL byte"),
    ("nul-config-train", ["train", "--config", "{in}/nul.yaml"], "nul.yaml.tokenizer: path 'tok\\x00.model': holds a NUL byte"),
    ("nul-config-validate", ["validate", "--config", "{in}/nul.yaml"], "holds a NUL byte"),
    ("nul-config-doctor", ["doctor", "--config", "{in}/nul.yaml"], "holds a NUL byte"),
    ("nul-config-job", ["jobs", "submit", "train", "--config", "{in}/../workspace/nul.yaml"], "holds a NUL byte"),
    ("nul-adapter-base", ["export", "--checkpoint", "{in}/adapter-nul-base.pt", "--output", "{in}/exported", "--merge"],
     "holds a NUL byte"),
    ("nul-cli-path", ["checkpoint", "inspect", "{in}/x\x00.pt"], "holds a NUL byte"),
    # 4: malformed HF folders and parquet cells
    ("hf-state-brace", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-state-brace", "--output", "{in}/ds"],
     "state.json: not valid JSON"),
    ("hf-state-empty", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-state-empty", "--output", "{in}/ds"],
     "state.json: no `_data_files` list"),
    ("hf-state-list", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-state-list", "--output", "{in}/ds"],
     "state.json: expected a JSON object, found list"),
    ("hf-no-dataset-info", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-no-info", "--output", "{in}/ds"],
     "dataset_info.json: missing"),
    ("hf-unknown-feature", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-unknown-feature", "--output",
                            "{in}/ds"], "not a readable datasets.save_to_disk folder"),
    ("hf-dict-bad", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-dict-bad", "--output", "{in}/ds"],
     "dataset_dict.json: not valid JSON"),
    ("hf-dict-missing-split", ["dataset", "import", "--format", "hf", "--input", "{in}/hf-dict-missing-split", "--output",
                               "{in}/ds"], "test/state.json: missing"),
    ("hf-bytes-string", ["dataset", "import", "--format", "hf", "--input", "{in}/bytes-str.parquet", "--output", "{in}/ds"],
     "its `bytes` is str"),
    ("hf-bytes-int", ["dataset", "import", "--format", "hf", "--input", "{in}/bytes-int.parquet", "--output", "{in}/ds"],
     "its `bytes` is int"),
    # 5: every count a request can set is bounded
    ("sample-recombined-huge", ["dataset", "sample", "--output", "{in}/s", "--recombined", "100000000"],
     "--recombined: 100000000 is too large"),
    ("job-sample-recombined-huge", ["jobs", "submit", "dataset.sample", "--param", "output=datasets/s",
                                    "--param", "recombined=100000000"], "--recombined: 100000000 is too large"),
    ("codec-max-frames-huge", ["codec", "train", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/c.pt",
                               "--max-frames", "1e12"], "--max-frames: 1e12 is too large"),
    # 6: NaN and infinity are no numbers; options have ranges
    ("filter-min-snr-nan", ["dataset", "filter", "--manifest", "{in}/manifest.jsonl", "--output", "{in}/ds",
                            "--min-snr", "nan"], "--min-snr: nan is not a finite number"),
    ("synth-option-nan", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                          "--option", "cfg_weight=nan"], "cfg_weight: nan is not a finite number"),
    ("synth-option-inf", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                          "--option", "exaggeration=inf"], "exaggeration: inf is not a finite number"),
    ("synth-temperature-inf", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                               "--temperature", "inf"], "--temperature: inf is not a finite number"),
    ("job-param-nan", ["jobs", "submit", "synthesize", "--param", "checkpoint=x.pt", "--param", "text=hi",
                       "--param", "output=o.wav", "--param", "top_p=nan"], "--top-p: nan is not a finite number"),
    ("job-param-not-whole", ["jobs", "submit", "dataset.sample", "--param", "output=datasets/s",
                             "--param", "per_language=2.5"], "--per-language: 2.5 is not a whole number"),
    # 7: an output never coincides with an input, never replaces a file without --force
    ("split-write-over-input", ["dataset", "split", "--manifest", "{in}/split/manifest.train.jsonl", "--by", "speaker",
                                "--write"], "would overwrite the input --manifest"),
    ("prune-existing-output", ["prune", "--checkpoint", "{in}/random.pt", "--output", "{in}/existing.safetensors"],
     "the file exists already. Pass --force"),
    # 8: refused before any work
    ("sample-languages-twice", ["dataset", "sample", "--output", "{in}/s", "--languages", "en,en"],
     "--languages en,en: name each language once"),
    # 9: huge seeds, forged adapter records
    ("synth-seed-huge", ["synthesize", "--checkpoint", "{in}/short.pt", "--text", "hi", "--output", "{in}/o.wav",
                         "--seed", "99999999999999999999999"], "--seed: 99999999999999999999999 is too large"),
    ("eval-seed-huge", ["eval", "tts", "--checkpoint", "{in}/short.pt", "--sentences", "{in}/corpus.txt",
                        "--seed", "99999999999999999999999"], "--seed: 99999999999999999999999 is too large"),
    ("serve-seed-huge", ["serve", "--checkpoint", "{in}/short.pt", "--voices", "{in}/clips", "--seed", "-1"],
     "--seed: -1 is too small"),
    ("adapter-record-text", ["export", "--checkpoint", "{in}/adapter-text.pt", "--output", "{in}/exported", "--merge"],
     "`linguaforge.adapter` is str"),
    ("adapter-record-list", ["export", "--checkpoint", "{in}/adapter-list.pt", "--output", "{in}/exported", "--merge"],
     "`linguaforge.adapter` is list"),
    ("adapter-record-no-base", ["export", "--checkpoint", "{in}/adapter-no-base.pt", "--output", "{in}/exported"],
     "adapter record lacks alpha, dropout, targets, modules, base_checkpoint, base_sha256, frozen_rows"),
    # 10: serve beyond this machine without a token
    ("serve-public-no-token", ["serve", "--checkpoint", "{in}/short.pt", "--voices", "{in}/clips", "--host", "0.0.0.0"],
     "--host 0.0.0.0: listening beyond this machine needs a bearer token"),
    # 11: Hub names and ids, refused before anything is fetched
    ("models-pull-unknown", ["models", "pull", "chatterbox:v9"], "'chatterbox:v9': not a published release"),
    ("models-pull-bad-hf-id", ["models", "pull", "hf:../etc"], "not a Hub repository id"),
    ("models-pull-foreign-repo", ["models", "pull", "hf:someone/else"], "no family reads this repository"),
    ("models-pull-output-outside", ["models", "pull", "chatterbox", "--output", "/etc/linguaforge-model"],
     "outside the allowed folders"),
    ("import-hf-bad-id", ["dataset", "import", "--format", "hf", "--input", "hf:not an id", "--output", "{in}/hub"],
     "--input hf:not an id: not a Hub dataset id"),
    ("job-serve-public-no-token", ["jobs", "submit", "serve", "--param", "checkpoint=x.pt", "--param", "voices=voices",
                                   "--param", "host=0.0.0.0", "--param", "without_token=true"],
     "serve: parameter host=0.0.0.0: a serve job listening beyond this machine needs token_file"),
]


def _run(argv: list[str]) -> int:
    try:
        return cli_main(argv)
    except SystemExit as exc:  # argparse errors
        return int(exc.code or 0)


@pytest.mark.parametrize("case_id, argv, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(inputs: Path, capsys: pytest.CaptureFixture, case_id: str,
                                         argv: list[str], fragment: str) -> None:
    argv = [a.replace("{in}", str(inputs)) for a in argv]
    before = _snapshot(inputs)
    code = _run(argv)
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err + out, err
    assert code == 2, f"exit {code}: {err[-2000:]}"
    if argv[0] == "doctor" and not errors:  # the doctor reports a failing check in its table instead
        assert fragment in out and "FAIL" in out, out
    else:
        assert len(errors) == 1, err
        assert fragment in errors[0], errors[0]
    assert _snapshot(inputs) == before, "an input changed or a file was written beside the inputs"


def test_suite_covers_every_command_group() -> None:
    from core.cli import build_parser
    from core.cli.catalogue import _subparsers

    groups = set(_subparsers(build_parser()))
    covered = {case[1][0] for case in CASES}
    assert groups <= covered, f"groups without a malformed-input case: {sorted(groups - covered)}"
    assert len(CASES) >= 60
