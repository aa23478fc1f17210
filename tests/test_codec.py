"""The speech codec on real espeak speech: shapes, quality figures, save/load and damaged files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from core.audio import read_audio
from core.data.codec_training import evaluate_codec, train_codec
from core.speech.codec import CodecConfig, SpeechCodec, load_codec
from core.speech.codec_eval import mcd, mel_l1
from core.errors import InputError
from core.data.manifest import read_manifest
from tests.data_helpers import make_espeak_dataset, run_cli


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_espeak_dataset(tmp_path_factory.mktemp("espeak"), per_language=12)


@pytest.fixture(scope="module")
def codec(manifest: Path) -> SpeechCodec:
    return train_codec(manifest, codebook_size=64, iterations=40)


@pytest.fixture(scope="module")
def wav(manifest: Path) -> torch.Tensor:
    rows, _ = read_manifest(manifest)
    return read_audio(rows[0].path, 16000)[0]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_encode_decode_shapes_and_rates(codec: SpeechCodec, wav: torch.Tensor) -> None:
    assert (codec.sample_rate, codec.hop_length, codec.n_mels, codec.codebook_size) == (16000, 256, 80, 64)
    assert codec.frame_rate == 62.5
    mel = codec.mel(wav)
    codes = codec.encode(wav)
    assert mel.shape == (wav.numel() // 256 + 1, 80)
    assert codes.dtype == torch.long and codes.shape == (mel.shape[0],)
    assert int(codes.min()) >= 0 and int(codes.max()) < 64
    assert len(set(codes.tolist())) > 10, "speech uses many codes"
    out = codec.decode(codes)
    assert abs(out.numel() - wav.numel()) <= 256 and torch.isfinite(out).all()
    assert float(out.abs().max()) > 0.01
    with pytest.raises(InputError, match="0..63"):
        codec.decode(torch.tensor([0, 64]))


def test_quantize_picks_the_nearest_code_and_the_first_of_equal_ones(codec: SpeechCodec, wav: torch.Tensor) -> None:
    mel = codec.mel(wav)
    codes = codec.quantize(mel)
    distances = torch.cdist(mel.double(), codec.codebook.double())
    chosen = distances.gather(1, codes[:, None]).squeeze(1)
    assert torch.allclose(chosen, distances.min(dim=1).values, rtol=1e-5, atol=1e-6)
    float32_distances = torch.addmm((codec.codebook**2).sum(dim=1), mel, codec.codebook.T, alpha=-2.0)
    assert torch.equal(codes, float32_distances.argmin(dim=1))  # torch's own argmin over the same distances
    codebook = torch.randn(8, 80, generator=torch.Generator().manual_seed(0))
    codebook[5] = codebook[2]  # a repeated code: its first index wins
    twin = SpeechCodec(CodecConfig(codebook_size=8), codebook)
    frames = torch.stack([codebook[2], codebook[7] + 0.01, codebook[5]])
    codes = twin.quantize(frames)
    assert codes.dtype == torch.long and codes.tolist() == [2, 7, 2]


def test_codebook_beats_the_mean_frame_and_grows_better_with_k(manifest: Path, codec: SpeechCodec, wav: torch.Tensor) -> None:
    mel = codec.mel(wav)
    mean_frame_l1 = mel_l1(mel, mel.mean(0, keepdim=True).expand_as(mel))
    k64 = mel_l1(mel, codec.codes_to_mel(codec.encode(wav)))
    k8 = train_codec(manifest, codebook_size=8, iterations=40)
    k8_l1 = mel_l1(mel, k8.codes_to_mel(k8.encode(wav)))
    assert k64 < k8_l1 < mean_frame_l1
    assert k64 < 0.6 * mean_frame_l1
    assert codec.meta["train_frames"] > 2000 and codec.meta["dead_codes"] == 0
    assert codec.meta["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


def test_eval_reports_codebook_roundtrip_and_vocoder_figures(manifest: Path, codec: SpeechCodec) -> None:
    report = evaluate_codec(codec, manifest, val_ratio=0.2, max_clips=1)
    assert report["clips"] == 1 and report["split"] == "val"
    assert 0 < report["quant_l1"] < report["roundtrip_l1"]
    assert report["vocoder_l1"] < report["roundtrip_l1"]
    assert 0 < report["vocoder_mcd"] < min(report["quant_mcd"], report["roundtrip_mcd"])
    assert 1 < report["perplexity"] <= report["codes_used"] <= 64
    assert report["fingerprint"] == codec.fingerprint


def test_mcd_is_zero_for_identical_and_grows_with_noise(codec: SpeechCodec, wav: torch.Tensor) -> None:
    mel = codec.mel(wav)
    assert mcd(mel, mel) == 0.0
    small = mcd(mel, mel + 0.1 * torch.randn_like(mel))
    large = mcd(mel, mel + 1.0 * torch.randn_like(mel))
    assert 0 < small < large


def test_save_load_roundtrip_and_damaged_files(codec: SpeechCodec, wav: torch.Tensor, tmp_path: Path) -> None:
    path = codec.save(tmp_path / "codec.pt")
    loaded = load_codec(path)
    assert loaded.fingerprint == codec.fingerprint and len(codec.fingerprint) == 64
    assert torch.equal(loaded.encode(wav), codec.encode(wav))
    assert loaded.meta["train_clips"] == codec.meta["train_clips"]
    payload = torch.load(path, weights_only=True)
    payload["codebook"] = payload["codebook"] + 0.01
    torch.save(payload, tmp_path / "tampered.pt")
    with pytest.raises(InputError, match="fingerprint"):
        load_codec(tmp_path / "tampered.pt")
    (tmp_path / "truncated.pt").write_bytes(path.read_bytes()[:200])
    with pytest.raises(InputError, match="not a readable codec file"):
        load_codec(tmp_path / "truncated.pt")
    with pytest.raises(InputError, match="not found"):
        load_codec(tmp_path / "missing.pt")


def test_too_few_frames_is_an_input_error(manifest: Path) -> None:
    with pytest.raises(InputError, match="smaller --codebook-size"):
        train_codec(manifest, codebook_size=100_000, iterations=1)


def test_codec_train_cli_writes_a_loadable_codec(manifest: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli_codec.pt"
    run = run_cli("codec", "train", "--manifest", manifest, "--codebook-size", "32", "--iterations", "20",
              "--output", out, "--json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["fingerprint"] == load_codec(out).fingerprint
    assert data["train_clips"] == 23 and data["frame_rate"] == 62.5


def test_codec_encode_decode_cli(manifest: Path, codec: SpeechCodec, tmp_path: Path) -> None:
    path = codec.save(tmp_path / "codec.pt")
    audio = read_manifest(manifest)[0][0].path
    enc = run_cli("codec", "encode", "--codec", path, "--input", audio, "--output", tmp_path / "codes", "--json")
    assert enc.code == 0, enc.stderr
    codes = np.load(enc.json()["output"])
    assert enc.json()["output"].endswith("codes.npy") and codes.dtype == np.int32 and codes.size == enc.json()["frames"]
    dec = run_cli("codec", "decode", "--codec", path, "--codes", tmp_path / "codes.npy", "--output", tmp_path / "out.wav", "--json")
    assert dec.code == 0, dec.stderr
    info = sf.info(str(tmp_path / "out.wav"))
    assert info.samplerate == 16000 and abs(info.frames - codes.size * 256) <= 256
    np.save(tmp_path / "bad.npy", np.array([0, 999], dtype=np.int32))
    bad = run_cli("codec", "decode", "--codec", path, "--codes", tmp_path / "bad.npy", "--output", tmp_path / "x.wav")
    assert bad.code == 2 and "0..63" in bad.stderr and not (tmp_path / "x.wav").exists()
