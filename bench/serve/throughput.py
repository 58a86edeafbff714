"""Prefill and decode throughput of `selq serve` against llama.cpp's server
(llama-cpp-python[server]) on the same model and thread count, with 1 and 8
clients at once, as lm-eval's num_concurrent sends them (docs/BENCHMARKS.md,
"selq serve").

  python3 bench/serve/throughput.py --selq build/release/src/selq --gguf MODEL.gguf \
      --checkpoint DIR_IMPORTED_FROM_IT --llama-python ~/.cache/selq/llamacpp-venv/bin/python

selq serves the checkpoint `selq import-gguf` made from the GGUF (BF16 weights,
F32 compute); llama.cpp serves the GGUF itself (its own quantized kernels). Each
phase runs the same requests against both, servers taking turns, 3 rounds:
  prefill: prompts of ~PROMPT tokens from Persuasion, max_tokens 1 (what a
           loglikelihood task sends), prompt tokens per second;
  decode:  prompts of a few tokens, max_tokens 64, generated tokens per second.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("server did not come up")


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def run_load(url, bodies, clients):
    """Sends bodies from `clients` threads; (seconds, prompt tokens, completion tokens)."""
    todo = list(bodies)
    lock = threading.Lock()
    usage = [0, 0]

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                b = todo.pop()
            u = post(url, b)["usage"]
            with lock:
                usage[0] += u["prompt_tokens"]
                usage[1] += u["completion_tokens"]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, usage[0], usage[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt", type=int, default=512, help="about this many tokens per prefill prompt")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    text = subprocess.run([a.selq, "text", "austen/persuasion", "--max-bytes", "400000"], capture_output=True,
                          text=True, check=True).stdout
    words = re.sub(r"\s+", " ", text).split(" ")
    per = int(a.prompt * 0.75)  # ~1.3 tokens a word
    prefill = [{"prompt": " ".join(words[i * per:(i + 1) * per]), "max_tokens": 1, "temperature": 0}
               for i in range(a.requests)]
    decode = [{"prompt": " ".join(words[i * 7:i * 7 + 6]), "max_tokens": 64, "temperature": 0}
              for i in range(a.requests)]
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "OPENBLAS_NUM_THREADS": str(a.threads)}
    servers = {}
    p = free_port()
    servers["selq serve"] = (subprocess.Popen([a.selq, "serve", a.checkpoint, "--port", str(p), "--slots", "8", "-q"],
                                              env=env, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{p}")
    p = free_port()
    servers["llama.cpp server"] = (subprocess.Popen([a.llama_python, "-m", "llama_cpp.server", "--model", a.gguf,
                                                     "--n_threads", str(a.threads), "--n_ctx", "4096", "--port", str(p),
                                                     "--host", "127.0.0.1"], env=env, stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL), f"http://127.0.0.1:{p}")
    try:
        for proc, url in servers.values():
            wait_up(url, proc)
        results = {}
        for phase, bodies, idx in (("prefill", prefill, 1), ("decode", decode, 2)):
            for clients in (1, 8):
                for r in range(a.rounds):
                    for name, (_, url) in servers.items():
                        secs, pt, ct = run_load(url, bodies, clients)
                        rate = (pt if phase == "prefill" else ct) / secs
                        results.setdefault((phase, clients, name), []).append(rate)
                        print(f"round {r}: {phase:7s} clients {clients}: {name:16s} {rate:8.1f} tok/s "
                              f"({pt} prompt, {ct} generated tokens, {secs:.1f} s)", flush=True)
        print("\n| phase | clients | selq serve tok/s | llama.cpp tok/s | ratio |\n|---|---|---|---|---|")
        for phase in ("prefill", "decode"):
            for clients in (1, 8):
                s = statistics.median(results[(phase, clients, "selq serve")])
                q = statistics.median(results[(phase, clients, "llama.cpp server")])
                print(f"| {phase} | {clients} | {s:.1f} | {q:.1f} | {s / q:.2f}× |")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    sys.exit(main())
