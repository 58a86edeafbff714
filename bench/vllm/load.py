#!/usr/bin/env python
"""Load a checkpoint directory with the real vLLM engine (CPU build) and
greedy-generate a few tokens.

usage: python load.py DIR [N_TOKENS]

Prints the generated token ids and text. Exit status 0 on success; on any
failure the exception (with traceback) is printed and the exit status is 1
(2 for bad usage).
"""
import os
import sys
import traceback

# CPU backend: without an explicit KV-cache size vLLM reserves
# gpu_memory_utilization (0.92) of *all* node memory and refuses to start when
# less than that is free (it always is on a shared 24 GiB box). A fixed 1 GiB
# KV cache is ample for max_model_len=512 and skips that check.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# Only local directories are loaded; never try to reach the HF hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = "The capital of France is"


def open_llm(model_dir):
    from vllm import LLM
    return LLM(model=model_dir, dtype="bfloat16", enforce_eager=True, max_model_len=512)


def generate_and_print(llm, n_tokens):
    from vllm import SamplingParams
    completion = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=n_tokens))[0].outputs[0]
    print("prompt:", repr(PROMPT))
    print("token_ids:", list(completion.token_ids))
    print("text:", repr(completion.text))


def run(main, name):
    """Exit status 0 on success; any failure printed with its traceback, status 1."""
    try:
        rc = main(sys.argv)
    except BaseException as exc:  # noqa: BLE001 - report everything, then fail
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        traceback.print_exc()
        print(f"{name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(rc)


def main(argv):
    if len(argv) < 2 or len(argv) > 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    generate_and_print(open_llm(argv[1]), int(argv[2]) if len(argv) == 3 else 8)
    return 0


if __name__ == "__main__":
    run(main, "load.py")
