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

    .venv/bin/python bench/serve.py --requests 50 --clients 8 --max-batch 8 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(REPO_ROOT)  # not bench/: its tokenizers.py would shadow the tokenizers package

import httpx  # noqa: E402
import psutil  # noqa: E402
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


def batch_breakdown(workspace: Path, checkpoint: Path, voice: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Time, in this process on one thread, what one server batch of n one-sentence requests costs: the
    model's `generate_batch` (decoded together) and the codec's decode (clip by clip), per batch size n."""
    import os

    from core.config import load_settings
    from core.inference import load_for_inference, prepare_text, reference_mel

    os.environ["LINGUAFORGE_WORKSPACE"] = str(workspace)
    torch.set_num_threads(1)
    inference = load_for_inference(checkpoint, load_settings(), task="tts", device="cpu")
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
    breakdown = batch_breakdown(workspace, checkpoint, voices / "anna.wav", sorted({1, *args.max_batch}))
    rows, faults = [], []
    for max_batch in args.max_batch:
        with running_server(workspace, checkpoint, voices, scratch / f"serve-{max_batch}.log", "--max-batch",
                            str(max_batch), "--queue-limit", str(max(args.requests, 1)),
                            "--max-input-chars", "1000") as server:
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
    return {"requests": args.requests, "clients": args.clients, "codes_per_sentence": args.codes,
            "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, {platform.python_version()}",
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                     text=True).stdout.strip(), "breakdown": breakdown, "load": rows, "faults": faults}


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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if (args.checkpoint is None) != (args.workspace is None):
        parser.error("--checkpoint and --workspace go together (the checkpoint's workspace)")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as folder:
        result = run(args, Path(folder) / "workspace")
    print(json.dumps(result, indent=2) if args.json else markdown(result))


if __name__ == "__main__":
    main()
