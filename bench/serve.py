"""Speech server load and fault figures: N requests from C concurrent clients, with and without batching.

Starts the real server (`python -m core serve`, a subprocess on 127.0.0.1) for a TTS checkpoint of
the own model's quickstart shape (preset tiny, a 256-code codec) and sends `--requests` speech
requests from `--clients` concurrent clients, in `--rounds` rounds, once per `--max-batch` value.
Reports latency p50/p95, throughput, how many answers were not 200 (dropped), the server's RSS
before the first round and after each, and what the largest batch held. Then sends the bad
requests (oversized input, unknown voice, unknown model, malformed body), each followed by a good
one, and reports the statuses and messages. First it times, in-process, what one batch costs: the
model's generation (batched) and the codec's decode (clip by clip), per batch size. The default checkpoint is random-initialised with its
stop logit suppressed, so every sentence is exactly `--codes` codes (125 = 2 s of audio): every
request is the same work. `--workspace WS --checkpoint CKPT` serve a trained one instead (a quickstart's
final checkpoint in its workspace; the reference clip is written to WS/bench-voices/).

`--streaming` measures streamed speech instead (docs/streaming.md): per family (`--families`: the own
quickstart-shaped model — tiny preset, a 256-code codec at hop 512, 31.25 codes/s — and the reduced
Chatterbox, Chatterbox-Turbo and IndexTTS2 folders of the tests, random weights), the time to the first audio and the
total time of a `--seconds` sentence streamed (`stream_format: audio`) against the whole request; then,
on the own model, `--clients` concurrent streaming clients for `--rounds` rounds of `--requests`
(first-audio p50/p95, dropped, the server's RSS), and `--disconnects` clients that read the first
audio of a long text and leave (the engine's counters: stopped, still speaking, codes generated
against the codes the whole texts would take). `--device cuda` serves on the GPU.

    .venv/bin/python bench/serve.py --requests 50 --clients 8 --max-batch 8 1
    .venv/bin/python bench/serve.py --streaming --families linguaforge chatterbox indextts --device cuda
"""

from __future__ import annotations

import argparse
import io
import json
import math
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from tests.serve_helpers import running_server, write_voice  # noqa: E402

TEXT = "The cat sleeps by the warm fire."
BAD = [
    ("oversized input", {"model": "{model}", "input": "word " * 300, "voice": "anna"}),
    ("unknown voice", {"model": "{model}", "input": TEXT, "voice": "nobody"}),
    ("unknown model", {"model": "tts-1", "input": TEXT, "voice": "anna"}),
    ("malformed body", "{not json"),
]


def quickstart_checkpoint(workspace: Path, codes: int) -> Path:
    """Write a quickstart-shaped own TTS checkpoint (tiny preset, 256 codes) whose sentences are `codes` long."""
    from models.registry import MODEL_SIZES
    from tests.trainer_helpers import stopless_tts_checkpoint

    return stopless_tts_checkpoint(workspace, codes, 256, MODEL_SIZES["tiny"], "quickstart-tts.pt")


def batch_breakdown(workspace: Path, checkpoint: Path, voice: Path, sizes: list[int], device: str = "cpu") -> list[dict[str, Any]]:
    """Time, in this process on one thread, what one server batch of n one-sentence requests costs: the
    model's `generate_batch` (decoded together) and the codec's decode (clip by clip), per batch size n."""
    import os

    from core.config import load_settings
    from core.inference import load_for_inference, prepare_text, reference_mel

    os.environ["LINGUAFORGE_WORKSPACE"] = str(workspace)
    torch.set_num_threads(1)
    inference = load_for_inference(checkpoint, load_settings(), task="tts", device=device)
    ids = prepare_text(inference, TEXT).ids[0]
    mel = reference_mel(inference, voice)
    rows = []
    for n in sizes:
        start = time.perf_counter()
        codes = inference.model.generate_batch([ids] * n, mel, 0.8, 50, generator=torch.Generator().manual_seed(0))
        generate = time.perf_counter() - start
        start = time.perf_counter()
        for row in codes:
            inference.codec.decode(torch.tensor(row))
        decode = time.perf_counter() - start
        rows.append({"batch": n, "generate_s": round(generate, 3), "decode_s": round(decode, 3),
                     "per_request_s": round((generate + decode) / n, 3)})
    return rows


def _load_round(url: str, model: str, requests: int, clients: int) -> dict[str, Any]:
    body = {"model": model, "input": TEXT, "voice": "anna", "response_format": "wav"}
    pool = [httpx.Client(timeout=600) for _ in range(clients)]

    def one(i: int) -> tuple[int, float]:
        start = time.perf_counter()
        status = pool[i % clients].post(f"{url}/v1/audio/speech", json=body).status_code
        return status, time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as executor:
        answers = list(executor.map(one, range(requests)))
    wall = time.perf_counter() - start
    for client in pool:
        client.close()
    latencies = sorted(seconds for _, seconds in answers)
    return {"wall_s": round(wall, 2), "throughput_rps": round(requests / wall, 2),
            "p50_s": round(statistics.median(latencies), 3),
            "p95_s": round(latencies[min(len(latencies) - 1, round(0.95 * len(latencies)) - 1)], 3),
            "dropped": sum(1 for status, _ in answers if status != 200)}


def _faults(url: str, model: str) -> list[dict[str, Any]]:
    rows = []
    for name, body in BAD:
        if isinstance(body, str):
            answer = httpx.post(f"{url}/v1/audio/speech", content=body, headers={"content-type": "application/json"})
        else:
            answer = httpx.post(f"{url}/v1/audio/speech", json={**body, "model": body["model"].format(model=model)})
        after = httpx.post(f"{url}/v1/audio/speech", json={"model": model, "input": TEXT, "voice": "anna"}, timeout=600)
        rows.append({"request": name, "status": answer.status_code, "message": answer.json()["error"]["message"],
                     "next_good_request": after.status_code})
    return rows


def run(args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    """Serve the checkpoint once per --max-batch value; return the load rows and the fault rows."""
    scratch = workspace  # the server logs
    scratch.mkdir(parents=True, exist_ok=True)
    if args.checkpoint is not None:
        workspace, checkpoint = args.workspace.resolve(), args.checkpoint.resolve()
        voices = write_voice(workspace / "bench-voices" / "anna.wav").parent
    else:
        checkpoint = quickstart_checkpoint(workspace, args.codes)
        voices = write_voice(workspace / "voices" / "anna.wav").parent
    model = checkpoint.stem
    breakdown = batch_breakdown(workspace, checkpoint, voices / "anna.wav", sorted({1, *args.max_batch}), args.device)
    rows, faults = [], []
    for max_batch in args.max_batch:
        with running_server(workspace, checkpoint, voices, scratch / f"serve-{max_batch}.log", "--max-batch",
                            str(max_batch), "--queue-limit", str(max(args.requests, 1)),
                            "--max-input-chars", "1000", "--device", args.device) as server:
            process = psutil.Process(server.proc.pid)
            _load_round(server.url, model, args.clients, args.clients)  # warm-up: one request per client
            rss = [process.memory_info().rss / 2**20]
            rounds = []
            for _ in range(args.rounds):
                rounds.append(_load_round(server.url, model, args.requests, args.clients))
                rss.append(process.memory_info().rss / 2**20)
            health = httpx.get(f"{server.url}/health").json()
            if not faults:
                faults = _faults(server.url, model)
        for number, figures in enumerate(rounds, 1):
            rows.append({"max_batch": max_batch, "round": number, **figures,
                         "rss_before_mib": round(rss[number - 1]), "rss_after_mib": round(rss[number]),
                         "largest_batch": health["largest_batch"]})
    return {"requests": args.requests, "clients": args.clients, "codes_per_sentence": args.codes, **_provenance(args),
            "breakdown": breakdown, "load": rows, "faults": faults}


def _provenance(args: argparse.Namespace) -> dict[str, Any]:
    """Return the machine (the GPU's name with --device cuda) and the commit the figures come from."""
    machine = f"{platform.machine()}, {psutil.cpu_count()} cores, {platform.python_version()}"
    if args.device == "cuda":
        machine += f", {torch.cuda.get_device_name(0)}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return {"machine": machine, "device": args.device, "commit": commit.stdout.strip()}


QUICK_CODES_PER_SECOND = 16000 / 512


def streaming_checkpoint(workspace: Path, seconds: float) -> tuple[Path, int]:
    """Write the quickstart-shaped own checkpoint (tiny preset, 256 codes, hop 512) whose sentences are `seconds`
    long; return it and its codes per sentence."""
    from models.registry import MODEL_SIZES
    from tests.trainer_helpers import stopless_tts_checkpoint

    codes = math.ceil(seconds * QUICK_CODES_PER_SECOND)
    return stopless_tts_checkpoint(workspace, codes, 256, MODEL_SIZES["tiny"], "quick-stream.pt", hop_length=512), codes


def _whole_once(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    answer = client.post(f"{url}/v1/audio/speech", json=body)
    total = time.perf_counter() - start
    seconds = sf.info(io.BytesIO(answer.content)).duration if answer.status_code == 200 else None
    return {"status": answer.status_code, "total_s": total, "audio_s": seconds, "data": answer.content}


def _stream_once(client: httpx.Client, url: str, body: dict[str, Any], leave_after_first: bool = False) -> dict[str, Any]:
    """Stream one request; return its status, time to the first audio bytes and total time (reading to the end,
    or leaving at the first audio with `leave_after_first`)."""
    start = time.perf_counter()
    first, data = None, bytearray()
    try:
        with client.stream("POST", f"{url}/v1/audio/speech", json={**body, "stream_format": "audio"}) as answer:
            status = answer.status_code
            for piece in answer.iter_bytes():
                first = first if first is not None else time.perf_counter() - start
                data += piece
                if leave_after_first:
                    break
    except httpx.HTTPError:
        status = 0
    seconds = sf.info(io.BytesIO(bytes(data))).duration if status == 200 and not leave_after_first else None
    return {"status": status, "first_audio_s": first, "total_s": time.perf_counter() - start, "audio_s": seconds,
            "data": bytes(data)}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))], 3)


def family_latency(url: str, model: str, body: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Return a family's whole and streamed figures for one text (after a warm-up request): medians of `repeats`."""
    with httpx.Client(timeout=3600) as client:
        _whole_once(client, url, {"model": model, **body})
        whole = [_whole_once(client, url, {"model": model, **body}) for _ in range(repeats)]
        streamed = [_stream_once(client, url, {"model": model, **body}) for _ in range(repeats)]
    audio = whole[0]["audio_s"] or 0.0
    whole_s = statistics.median(w["total_s"] for w in whole)
    return {"audio_s": round(audio, 2), "whole_s": round(whole_s, 3), **_same_tokens(whole[0]["data"], streamed[0]["data"]),
            "first_audio_s": round(statistics.median(r["first_audio_s"] for r in streamed), 3),
            "streamed_total_s": round(statistics.median(r["total_s"] for r in streamed), 3),
            "streamed_audio_s": round(streamed[0]["audio_s"] or 0.0, 2),
            "rtf_whole": round(whole_s / audio, 3) if audio else None}


def _same_tokens(whole: bytes, streamed: bytes) -> dict[str, Any]:
    """Return how the streamed answer differs from the whole one of the same tokens (one seed, or greedy):
    MCD-DTW at 16 kHz and whether the lengths are equal."""
    import torchaudio

    from core.eval.metrics import mcd_dtw

    (a, rate), (b, _) = sf.read(io.BytesIO(whole), dtype="float32"), sf.read(io.BytesIO(streamed), dtype="float32")
    at_16k = [torchaudio.functional.resample(torch.from_numpy(x), rate, 16000) for x in (b, a)]
    return {"same_length": len(a) == len(b), "mcd_streamed_vs_whole_db": round(mcd_dtw(*at_16k), 3)}


def codec_on_speech() -> list[dict[str, Any]]:
    """Return, per hop (256, 512), the own codec's streamed-vs-whole difference on the codes of real speech:
    a 256-code codec fit on 30 espeak clips, the codes of 6 others vocoded in chunks as they come (the default
    plan) against whole — MCD-DTW (mean, max), equal lengths — beside the codec's own round trip (whole
    decode against the recording). Needs espeak-ng."""
    from core.audio import read_audio
    from core.eval.metrics import mcd_dtw
    from core.inference import CodecVocoder
    from core.speech.codec import fit_codec
    from core.speech.stream import ChunkedVocoder, ChunkPlan
    from tests.data_helpers import make_espeak_dataset

    with tempfile.TemporaryDirectory(prefix="bench-codec-") as folder:
        manifest = make_espeak_dataset(Path(folder) / "espeak", per_language=20)
        clips = sorted((manifest.parent / "audio").glob("*.wav"))
        rows = []
        for hop in (256, 512):
            codec = fit_codec(clips[:30], codebook_size=256, hop_length=hop, iterations=30)
            streamed_db, trip_db, equal = [], [], True
            for clip in clips[30:36]:
                recording = read_audio(clip, 16000)[0]
                codes = codec.encode(recording).tolist()
                whole = codec.decode(torch.tensor(codes))
                chunker = ChunkedVocoder(CodecVocoder(codec), ChunkPlan(), codec.frame_rate)
                streamed = torch.cat([c for code in codes for c in chunker.add(code)] + chunker.finish())
                equal &= streamed.numel() == whole.numel()
                streamed_db.append(mcd_dtw(streamed, whole))
                trip_db.append(mcd_dtw(whole, recording[: whole.numel()]))
            rows.append({"hop": hop, "codes_per_s": codec.frame_rate, "clips": len(streamed_db), "same_length": equal,
                         "mcd_streamed_vs_whole_mean_db": round(statistics.mean(streamed_db), 3),
                         "mcd_streamed_vs_whole_max_db": round(max(streamed_db), 3),
                         "mcd_whole_vs_recording_mean_db": round(statistics.mean(trip_db), 3)})
    return rows


def _family_server(family: str, workspace: Path, args: argparse.Namespace, seconds: float) -> tuple[Any, str, dict[str, Any]]:
    """Return (the running server's context, its model id, the request body) of `family` speaking `seconds`
    (the families' reduced folders of the tests, random weights; greedy)."""
    from core.data.sample_text import AMHARIC_SENTENCES
    from tests.serve_helpers import chatterbox_server, indextts_server, turbo_server

    common = ["--device", args.device, "--max-input-chars", "1000", "--queue-limit", str(max(args.requests, 64)),
              "--max-batch", "8"]
    if family == "linguaforge":
        voices = write_voice(workspace / "voices" / "anna.wav").parent
        checkpoint, _codes = streaming_checkpoint(workspace, seconds)
        server = running_server(workspace, checkpoint, voices, workspace / "serve.log", *common)
        return server, checkpoint.stem, {"input": TEXT, "voice": "anna"}
    if family in ("chatterbox", "chatterbox-turbo"):
        served = (chatterbox_server if family == "chatterbox" else turbo_server)(workspace, seconds, args.steps)
        return served.run(*common), served.model, {"input": AMHARIC_SENTENCES[1], "voice": "anna"}
    served = indextts_server(workspace, seconds, args.steps, audible=True)
    return served.run(*common), served.model, {"input": "HELLO THERE, HOW ARE YOU TODAY", "voice": "anna"}


def _stream_round(url: str, model: str, requests: int, clients: int) -> dict[str, Any]:
    body = {"model": model, "input": TEXT, "voice": "anna"}
    pool = [httpx.Client(timeout=3600) for _ in range(clients)]
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as executor:
        answers = list(executor.map(lambda i: _stream_once(pool[i % clients], url, body), range(requests)))
    wall = time.perf_counter() - start
    for client in pool:
        client.close()
    ok = [a for a in answers if a["status"] == 200 and a["first_audio_s"] is not None]
    firsts, totals = [a["first_audio_s"] for a in ok], [a["total_s"] for a in ok]
    return {"wall_s": round(wall, 2), "dropped": len(answers) - len(ok),
            "first_audio_p50_s": _percentile(firsts, 0.5), "first_audio_p95_s": _percentile(firsts, 0.95),
            "total_p50_s": _percentile(totals, 0.5), "total_p95_s": _percentile(totals, 0.95)}


def _disconnect_round(url: str, model: str, clients: int, codes: int) -> dict[str, Any]:
    """`clients` streams of eight sentences each leave at their first audio; return what the engine did."""
    long = " ".join([TEXT] * 8)
    before = httpx.get(f"{url}/health").json()
    pool = [httpx.Client(timeout=3600) for _ in range(clients)]
    body = {"model": model, "input": long, "voice": "anna"}
    with ThreadPoolExecutor(clients) as executor:
        answers = list(executor.map(lambda i: _stream_once(pool[i], url, body, leave_after_first=True), range(clients)))
    left = time.perf_counter()
    health = httpx.get(f"{url}/health").json()
    while (health["speaking"] or health["waiting"]) and time.perf_counter() - left < 600:
        time.sleep(0.1)
        health = httpx.get(f"{url}/health").json()
    idle_s = time.perf_counter() - left
    for client in pool:
        client.close()
    after = httpx.post(f"{url}/v1/audio/speech", json={"model": model, "input": TEXT, "voice": "anna"}, timeout=3600)
    return {"clients": clients, "answered": sum(1 for a in answers if a["status"] == 200),
            "stopped": health["stopped"] - before["stopped"], "still_speaking": health["speaking"],
            "waiting": health["waiting"], "idle_after_s": round(idle_s, 2),
            "codes_generated": health["speech_tokens"] - before["speech_tokens"], "codes_if_finished": clients * 8 * codes,
            "next_request": after.status_code}


def run_streaming(args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    """Serve each family of --families; return the latency rows, then the own model's concurrency and disconnect rows."""
    workspace.mkdir(parents=True, exist_ok=True)
    latency, rounds, disconnects = [], [], None
    for family in args.families:
        folder = workspace / family
        folder.mkdir(parents=True, exist_ok=True)
        server_context, model, body = _family_server(family, folder, args, args.seconds)
        with server_context as server:
            latency.append({"family": family, **family_latency(server.url, model, body, args.repeats)})
            if family != "linguaforge":
                continue
            process = psutil.Process(server.proc.pid)
            _stream_round(server.url, model, args.clients, args.clients)  # warm-up: one stream per client
            rss = [process.memory_info().rss / 2**20]
            for number in range(1, args.rounds + 1):
                figures = _stream_round(server.url, model, args.requests, args.clients)
                rss.append(process.memory_info().rss / 2**20)
                rounds.append({"round": number, "requests": args.requests, "clients": args.clients, **figures,
                               "rss_before_mib": round(rss[-2]), "rss_after_mib": round(rss[-1])})
            disconnects = _disconnect_round(server.url, model, args.disconnects, math.ceil(args.seconds * QUICK_CODES_PER_SECOND))
    codec = codec_on_speech() if "linguaforge" in args.families and shutil.which("espeak-ng") else []
    return {**_provenance(args), "seconds": args.seconds, "steps": args.steps, "latency": latency, "rounds": rounds,
            "disconnects": disconnects, "codec_on_speech": codec}


def streaming_markdown(result: dict[str, Any]) -> str:
    """Return the streaming result as the markdown tables of docs/benchmarks.md."""
    lines = ["| family | audio s | whole request s | streamed: first audio s | streamed: total s | RTF (whole) | "
             "streamed vs whole: same length, MCD-DTW dB |", "|---|---|---|---|---|---|---|"]
    for row in result["latency"]:
        lines.append(f"| {row['family']} | {row['audio_s']} | {row['whole_s']} | {row['first_audio_s']} | "
                     f"{row['streamed_total_s']} | {row['rtf_whole']} | {row['same_length']}, "
                     f"{row['mcd_streamed_vs_whole_db']} |")
    if result.get("codec_on_speech"):
        lines += ["", "| own codec on espeak speech: hop | codes/s | clips | same length | streamed vs whole MCD-DTW dB "
                      "mean (max) | whole vs recording MCD-DTW dB |", "|---|---|---|---|---|---|"]
        for row in result["codec_on_speech"]:
            lines.append(f"| {row['hop']} | {row['codes_per_s']} | {row['clips']} | {row['same_length']} | "
                         f"{row['mcd_streamed_vs_whole_mean_db']} ({row['mcd_streamed_vs_whole_max_db']}) | "
                         f"{row['mcd_whole_vs_recording_mean_db']} |")
    if result["rounds"]:
        lines += ["", "| round | requests | clients | dropped | first audio p50 s | p95 s | total p50 s | p95 s | "
                      "RSS before → after MiB |", "|---|---|---|---|---|---|---|---|---|"]
        for row in result["rounds"]:
            lines.append(f"| {row['round']} | {row['requests']} | {row['clients']} | {row['dropped']} | "
                         f"{row['first_audio_p50_s']} | {row['first_audio_p95_s']} | {row['total_p50_s']} | "
                         f"{row['total_p95_s']} | {row['rss_before_mib']} → {row['rss_after_mib']} |")
    if result["disconnects"]:
        d = result["disconnects"]
        lines += ["", "| clients that left at their first audio | stopped | still speaking | idle after s | "
                      "codes generated / if finished | next request |", "|---|---|---|---|---|---|",
                  f"| {d['clients']} | {d['stopped']} | {d['still_speaking']} | {d['idle_after_s']} | "
                  f"{d['codes_generated']} / {d['codes_if_finished']} | {d['next_request']} |"]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """Return the result as the two markdown tables of docs/benchmarks.md."""
    lines = ["| max batch | round | requests | dropped | p50 s | p95 s | throughput req/s | RSS before → after MiB | largest batch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in result["load"]:
        lines.append(f"| {row['max_batch']} | {row['round']} | {result['requests']} | {row['dropped']} | {row['p50_s']} | "
                     f"{row['p95_s']} | {row['throughput_rps']} | {row['rss_before_mib']} → {row['rss_after_mib']} | "
                     f"{row['largest_batch']} |")
    lines += ["", "| batch of one-sentence requests (in-process, 1 thread) | generate s | codec decode s | per request s |",
              "|---|---|---|---|"]
    for row in result["breakdown"]:
        lines.append(f"| {row['batch']} | {row['generate_s']} | {row['decode_s']} | {row['per_request_s']} |")
    lines += ["", "| bad request | status | message (one line) | next good request |", "|---|---|---|---|"]
    for row in result["faults"]:
        lines.append(f"| {row['request']} | {row['status']} | {row['message']} | {row['next_good_request']} |")
    return "\n".join(lines)


def main() -> None:
    """Parse options, run the load and fault figures, print them (markdown, or JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50, help="requests per round (default 50)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per server, to see whether memory stays flat")
    parser.add_argument("--max-batch", type=int, nargs="+", default=[8, 1], help="server --max-batch values to compare")
    parser.add_argument("--codes", type=int, default=125, help="codes per sentence of the default checkpoint (62.5 = 1 s)")
    parser.add_argument("--workspace", type=Path, help="the workspace of --checkpoint")
    parser.add_argument("--checkpoint", type=Path, help="a trained TTS checkpoint to serve instead of the random one")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the server's model runs")
    parser.add_argument("--streaming", action="store_true", help="measure streamed speech (see above) instead")
    parser.add_argument("--families", nargs="+", default=["linguaforge"], choices=["linguaforge", "chatterbox", "chatterbox-turbo", "indextts"],
                        help="--streaming: the families whose time to first audio is measured (default linguaforge)")
    parser.add_argument("--seconds", type=float, default=10.0, help="--streaming: the sentence's length (default 10)")
    parser.add_argument("--steps", type=int, default=None,
                        help="--streaming: Chatterbox(-Turbo) cfm_steps / IndexTTS2 diffusion_steps (default: the family's own)")
    parser.add_argument("--repeats", type=int, default=2, help="--streaming: requests per latency figure (median)")
    parser.add_argument("--disconnects", type=int, default=20, help="--streaming: clients that leave mid-stream")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if (args.checkpoint is None) != (args.workspace is None):
        parser.error("--checkpoint and --workspace go together (the checkpoint's workspace)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device on this machine")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as folder:
        if args.streaming:
            result = run_streaming(args, Path(folder) / "workspace")
            print(json.dumps(result, indent=2) if args.json else streaming_markdown(result))
            return
        result = run(args, Path(folder) / "workspace")
    print(json.dumps(result, indent=2) if args.json else markdown(result))


if __name__ == "__main__":
    main()
