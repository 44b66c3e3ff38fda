"""Server requests for CoBA's groups: n-sampling (one request per distinct group size, n = that size) against one row
per prompt entry (what TRL 1.16 sends when every row is a prompt of its own, n = 1).

Starts a vLLM server (the CPU build, the README's command) on the demo's model shape, then times rounds of the same
rows both ways in interleaved pairs, reading the prompt tokens the server processed from its `/metrics`
(`vllm:prompt_tokens`, of which `vllm:prompt_tokens_cached` came from the prefix cache). Prints the machine, the vLLM
version, each pair and the ratio of medians (rows / n-sampling: above 1 means n-sampling is faster).

    python benchmarks/vllm_server_requests.py [--prompts 64] [--prompt_tokens 40] [--max_tokens 32] [--pairs 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from machine import machine_line  # noqa: E402

from coba_trl.generation.cpu_server import running_server, server_command  # noqa: E402
from coba_trl.generation.requests import generate_grouped  # noqa: E402

METRICS = ("vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total")


def counters(client) -> dict[str, float]:
    text = client.session.get(f"{client.base_url}/metrics", timeout=10).text  # through the server's socket
    found = {}
    for name in METRICS:
        values = [float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)]
        found[name] = sum(values)
    return found


def round_rows(num_prompts: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    """Rows of a CoBA-like round: `num_prompts` distinct prompts of `prompt_tokens` tokens with uneven group sizes
    that average about 8 (2 to 32), one row (a prompt's token ids) per completion."""
    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.geometric(1 / 8, num_prompts), 2, 32)
    prompts = [list(rng.integers(3, 250, prompt_tokens)) for _ in range(num_prompts)]
    return [list(map(int, prompts[i])) for i in range(num_prompts) for _ in range(int(sizes[i]))]


def run_round(client, rows: list[list[int]], grouped: bool, max_tokens: int) -> tuple[float, dict]:
    client.reset_prefix_cache()
    before = counters(client)
    start = time.perf_counter()
    sampling = dict(max_tokens=max_tokens, temperature=1.0, logprobs=0)
    if grouped:
        completions = generate_grouped(client, rows, **sampling)["completion_ids"]
    else:
        completions = client.generate(prompts=rows, n=1, **sampling)["completion_ids"]
    seconds = time.perf_counter() - start
    assert len(completions) == len(rows)
    after = counters(client)
    return seconds, {name: after[name] - before[name] for name in METRICS}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--prompt_tokens", type=int, default=40, help="Prompt length (the demo's model holds 128).")
    args = parser.parse_args(argv)

    import vllm

    from coba_trl.generation.cpu_weights import CPUWeightSyncClient

    print(machine_line())
    print(f"vLLM {vllm.__version__} (CPU build), server: the README's command on the demo's model shape")
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = os.path.join(scratch, "demo-model")
        from coba_trl.demo.model import main as write_model

        write_model([model_dir])
        folder = os.path.join(scratch, "server")  # a private folder of its own: the socket and the weight files
        command = server_command(model_dir, folder, python=sys.executable)
        socket_path = os.path.join(folder, "vllm.sock")
        with running_server(command, socket_path, os.path.join(scratch, "server.log")) as base_url:
            client = CPUWeightSyncClient(base_url=base_url, connection_timeout=60)
            rows = round_rows(args.prompts, args.prompt_tokens, seed=0)
            print(
                f"round: {args.prompts} prompts of {args.prompt_tokens} tokens, {len(rows)} rows, completions of up "
                f"to {args.max_tokens} tokens"
            )
            run_round(client, rows, True, args.max_tokens)  # warm-up, both ways
            run_round(client, rows, False, args.max_tokens)
            times = {True: [], False: []}
            for pair in range(args.pairs):
                line = []
                for grouped in (True, False) if pair % 2 == 0 else (False, True):
                    seconds, tokens = run_round(client, rows, grouped, args.max_tokens)
                    times[grouped].append(seconds)
                    name = "n-sampling" if grouped else "rows"
                    line.append(
                        f"{name} {seconds:.2f} s, prompt tokens {tokens[METRICS[0]]:.0f} "
                        f"({tokens[METRICS[1]]:.0f} cached)"
                    )
                print(f"pair {pair + 1}: " + "; ".join(line))
    grouped, rows_time = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"median round time: n-sampling {grouped:.2f} s, one row per prompt entry {rows_time:.2f} s; "
        f"ratio rows / n-sampling {rows_time / grouped:.2f}"
    )


if __name__ == "__main__":
    main()
