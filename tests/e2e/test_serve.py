"""`selq serve` driven by the real client (docs/SERVE.md).

lm-evaluation-harness 0.4.13 (`local-completions`, its remote tokenizer
detected from /tokenizer_info and /tokenize) scores two tasks built here from
Austen's *Persuasion* (a last-word cloze, loglikelihood; a continuation,
generate_until) against `selq serve` on SmolLM2's BF16 base, and the same
tasks with lm-eval's own transformers (`hf`) backend: every document's
loglikelihood within 1e-3 relative, the same greedy flags, the same
generations. A quantized output (NVFP4) is served and scored too, and its
scores are not the base's. Then the server under bad input: malformed JSON and
fields get 400 with the reason, seeded random mutations of valid requests get
400 (never a crash, never 5xx), a body past --max-body 413, a full queue 503
with Retry-After, and afterwards the same request still gets the same answer;
concurrent requests (batched together) get the answers they get alone;
SIGTERM lets the request being answered finish and exits 0.
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "crosscheck"))
import e2e_util as E  # noqa: E402
from xref import smollm2_gguf  # noqa: E402

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}


class Server:
    """`selq serve DIR --port 0 ...`, its port read from the start line."""

    def __init__(self, directory, *args):
        self.p = subprocess.Popen([E.ARGS.selq, "serve", directory, "--port", "0", *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/v1", line)
        if not m:
            self.p.kill()
            raise AssertionError(f"selq serve did not start: {line}{self.p.stderr.read()}")
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def post(self, path, body, raw=None):
        """(status, JSON answer) of POST path."""
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}"), e.headers

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return json.loads(r.read())

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(60)
        self.p.stderr.close()


def make_tasks(directory):
    """Two lm-eval tasks from *Persuasion* (not in the calibration mix): the last word of each
    of 40 sentences (loglikelihood) and each sentence's second half (generation)."""
    text = E.selq("text", "austen/persuasion", "--max-bytes", "200000").stdout
    sents = [re.sub(r"\s+", " ", s).strip() for s in re.split(r"(?<=[.!?])\s+", text)]
    sents = [s for s in sents if 60 <= len(s) <= 200 and s.endswith(".") and '"' not in s]
    sents = sents[:: max(1, len(sents) // 40)][:40]
    cloze, cont = [], []
    for s in sents:
        ctx, last = s[:-1].rsplit(" ", 1)
        cloze.append({"context": ctx, "target": " " + last})
        words = s.split(" ")
        cont.append({"context": " ".join(words[: len(words) // 2]), "target": " " + " ".join(words[len(words) // 2:])})
    for name, docs in (("cloze", cloze), ("continue", cont)):
        with open(os.path.join(directory, name + ".jsonl"), "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in docs)

    def common(name):
        return (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {os.path.join(directory, name)}.jsonl\n"
                'test_split: test\ndoc_to_text: "{{context}}"\ndoc_to_target: "{{target}}"\n')
    with open(os.path.join(directory, "selq_austen_cloze.yaml"), "w") as f:
        f.write("task: selq_austen_cloze\noutput_type: loglikelihood\n" + common("cloze") +
                "metric_list:\n  - metric: acc\n  - metric: perplexity\n")
    with open(os.path.join(directory, "selq_austen_continue.yaml"), "w") as f:
        f.write("task: selq_austen_continue\noutput_type: generate_until\n" + common("continue") +
                'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 12\n  do_sample: false\n'
                "metric_list:\n  - metric: exact_match\n")
    return len(cloze)


def lm_eval(tasks_dir, out, model, model_args, tasks="selq_austen_cloze,selq_austen_continue"):
    """Runs lm-eval; {task: {doc_id: sample}} from its --log_samples files."""
    cmd = [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args, "--tasks", tasks,
           "--include_path", tasks_dir, "--output_path", out, "--log_samples"]
    if model == "hf":
        cmd += ["--device", "cpu", "--batch_size", "8"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **OFFLINE}, cwd=out)
    if r.returncode != 0:
        raise AssertionError(f"lm_eval {model} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    samples = {}
    for task in tasks.split(","):
        (path,) = glob.glob(os.path.join(out, "**", f"samples_{task}_*.jsonl"), recursive=True)
        with open(path) as f:
            samples[task] = {d["doc_id"]: d for d in map(json.loads, f)}
    return samples


def loglikelihoods(samples):
    return {i: (float(d["filtered_resps"][0][0]), d["filtered_resps"][0][1]) for i, d in samples.items()}


class Serve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("lm_eval", path=os.path.dirname(sys.executable)) is None:
            raise AssertionError(f"lm-eval is not installed in {sys.executable}'s environment: scripts/setup.sh")
        cls.tmp = tempfile.TemporaryDirectory()
        t = cls.tmp.name
        cls.base = os.path.join(t, "base")
        E.selq("import-gguf", smollm2_gguf(), cls.base)
        cls.quant = os.path.join(t, "nvfp4")
        E.selq("quantize", cls.base, cls.quant, "--recipe", E.recipe("llama-nvfp4"), "--quiet")
        cls.tasks = os.path.join(t, "tasks")
        os.makedirs(cls.tasks)
        cls.docs = make_tasks(cls.tasks)
        cls.server = Server(cls.base)
        cls.reference = cls.server.post("/v1/completions", {"prompt": "It is a truth universally", "max_tokens": 12,
                                                            "echo": True, "logprobs": 2})

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def out_dir(self, name):
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d, exist_ok=True)
        return d

    def assert_still_serving(self, server=None):
        server = server or self.server
        status, body, _ = server.post("/v1/completions", {"prompt": "It is a truth universally", "max_tokens": 12,
                                                          "echo": True, "logprobs": 2})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["choices"], self.reference[1]["choices"])

    def test_lm_eval_against_serve_equals_its_hf_backend(self):
        args = f"base_url={self.server.url}/v1/completions,model=base,num_concurrent=4,max_retries=1"
        served = lm_eval(self.tasks, self.out_dir("lm-eval-serve"), "local-completions", args)
        hf = lm_eval(self.tasks, self.out_dir("lm-eval-hf"), "hf", f"pretrained={self.base},dtype=float32")
        a, b = loglikelihoods(served["selq_austen_cloze"]), loglikelihoods(hf["selq_austen_cloze"])
        self.assertEqual(sorted(a), list(range(self.docs)))
        self.assertEqual(sorted(a), sorted(b))
        for i in a:
            self.assertLessEqual(abs(a[i][0] - b[i][0]), 1e-3 * abs(b[i][0]), f"doc {i}: serve {a[i]}, hf {b[i]}")
            self.assertEqual(a[i][1], b[i][1], f"doc {i}: greedy flag")
        ga = {i: d["filtered_resps"] for i, d in served["selq_austen_continue"].items()}
        gb = {i: d["filtered_resps"] for i, d in hf["selq_austen_continue"].items()}
        self.assertEqual(ga, gb)
        self.assertTrue(all(r[0].strip() for r in ga.values()), "every continuation has text")

    def test_a_quantized_checkpoint_is_scored_in_its_format(self):
        q = Server(self.quant)
        try:
            args = f"base_url={q.url}/v1/completions,model=nvfp4,num_concurrent=2,max_retries=1"
            qs = loglikelihoods(lm_eval(self.tasks, self.out_dir("lm-eval-nvfp4"), "local-completions", args,
                                        "selq_austen_cloze")["selq_austen_cloze"])
            st, info, _ = q.post("/v1/completions", {"prompt": "It is a truth universally", "max_tokens": 12})
            self.assertEqual(st, 200, info)
        finally:
            q.stop()
        base = loglikelihoods(lm_eval(self.tasks, self.out_dir("lm-eval-base-cloze"), "local-completions",
                                      f"base_url={self.server.url}/v1/completions,model=base,max_retries=1",
                                      "selq_austen_cloze")["selq_austen_cloze"])
        moved = sum(abs(qs[i][0] - base[i][0]) > 1e-3 * abs(base[i][0]) for i in base)
        self.assertGreater(moved, self.docs // 2, "NVFP4's loglikelihoods are the base's: the format was not applied")
        self.assertLess(max(abs(qs[i][0] - base[i][0]) for i in base), 20.0)

    def test_every_route(self):
        self.assertEqual(self.server.get("/health")["status"], "ok")
        models = self.server.get("/v1/models")["data"]
        self.assertEqual([m["id"] for m in models], ["base"])
        info = self.server.get("/tokenizer_info")
        self.assertEqual(info["eos_token"], "<|im_end|>")
        self.assertIn("<|im_start|>", info["chat_template"])
        st, tok, _ = self.server.post("/tokenize", {"prompt": "Persuasion", "add_special_tokens": False})
        self.assertEqual(st, 200)
        st, detok, _ = self.server.post("/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(detok["prompt"], "Persuasion")
        # Echo: one logprob per prompt token after the first, then the completion's.
        st, body, _ = self.reference
        lp = body["choices"][0]["logprobs"]
        n = len(self.server.post("/tokenize", {"prompt": "It is a truth universally"})[1]["tokens"])
        self.assertEqual(len(lp["token_logprobs"]), n + 12)
        self.assertIsNone(lp["token_logprobs"][0])
        for tok_lp, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
            self.assertLessEqual(len(top), 2)
            self.assertGreaterEqual(max(top.values()), tok_lp - 1e-6)
        # The completion is the greedy token each time: its logprob is the top one.
        for tok_lp, top in zip(lp["token_logprobs"][n:], lp["top_logprobs"][n:]):
            self.assertEqual(tok_lp, max(top.values()))
        st, chat, _ = self.server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                                "max_tokens": 8})
        self.assertEqual(st, 200, chat)
        self.assertIsInstance(chat["choices"][0]["message"]["content"], str)
        # Token ids and several prompts in one request, in order.
        st, many, _ = self.server.post("/v1/completions", {"prompt": [tok["tokens"], "Emma"], "max_tokens": 3})
        self.assertEqual([c["index"] for c in many["choices"]], [0, 1])

    def test_bad_requests_get_400_with_the_reason(self):
        cases = [(b"{not json", "not valid JSON"), (b"[1, 2]", "JSON object"),
                 (json.dumps({"max_tokens": 3}).encode(), "'prompt' is missing"),
                 (json.dumps({"prompt": "a", "temperature": 0.8}).encode(), "greedily"),
                 (json.dumps({"prompt": "a", "max_tokens": -1}).encode(), "max_tokens"),
                 (json.dumps({"prompt": [[1, 99999999]]}).encode(), "outside the vocabulary"),
                 (json.dumps({"prompt": [[]]}).encode(), "'prompt' must be"),
                 (json.dumps({"prompt": "a", "logprobs": 50}).encode(), "logprobs"),
                 (json.dumps({"prompt": "a", "stop": 5}).encode(), "'stop'"),
                 (json.dumps({"prompt": "a", "max_tokens": 9000}).encode(), "max_tokens"),
                 (json.dumps({"prompt": "", "max_tokens": 2}).encode(), "empty")]
        for raw, why in cases:
            with self.subTest(body=raw[:60]):
                st, body, _ = self.server.post("/v1/completions", None, raw=raw)
                self.assertEqual(st, 400, body)
                self.assertIn(why, body["error"]["message"])
        st, body, _ = self.server.post("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
        self.assertEqual(st, 400)
        self.assertIn("role", body["error"]["message"])
        st, body, _ = self.server.post("/nowhere", {})
        self.assertEqual(st, 404)
        self.assert_still_serving()

    def test_fuzzed_requests_never_crash_it(self):
        rng = random.Random(52)
        valid = [json.dumps({"prompt": "It is a truth", "max_tokens": 2, "echo": True, "logprobs": 1}),
                 json.dumps({"prompt": [[1, 2, 3], "x"], "max_tokens": 1, "stop": ["\n"]}),
                 json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})]
        values = [None, True, -1, 0, 2**40, 1.5, "", "x" * 300, [], [[]], {}, [1, "a"], [-5], {"a": 1}]
        statuses = {}
        for k in range(240):
            body = rng.choice(valid)
            if k % 2:  # a field's value replaced
                j = json.loads(body)
                key = rng.choice(list(j) + ["n", "stream", "seed"])
                j[key] = rng.choice(values)
                raw = json.dumps(j).encode()
            else:  # bytes flipped, cut or doubled
                b = bytearray(body.encode())
                for _ in range(rng.randint(1, 4)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                raw = bytes(b[: rng.randint(0, len(b))]) if k % 4 == 0 else bytes(b) * rng.randint(1, 2)
            path = "/v1/chat/completions" if b"messages" in raw else rng.choice(["/v1/completions", "/tokenize",
                                                                                  "/detokenize"])
            req = urllib.request.Request(self.server.url + path, data=raw)
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
            except urllib.error.HTTPError as e:
                statuses[e.code] = statuses.get(e.code, 0) + 1
                self.assertLess(e.code, 500, f"{path} {raw[:200]!r}: {e.code} {e.read()[:300]!r}")
        self.assertIsNone(self.server.p.poll(), "the server died")
        self.assertGreater(statuses.get(400, 0), 50, statuses)
        self.assert_still_serving()

    def test_concurrent_requests_get_the_answers_they_get_alone(self):
        prompts = [f"Chapter {k}. Sir Walter Elliot" for k in range(8)]
        alone = [self.server.post("/v1/completions", {"prompt": p, "max_tokens": 10})[1]["choices"][0]["text"]
                 for p in prompts]
        together = [None] * len(prompts)

        def ask(k):
            together[k] = self.server.post("/v1/completions", {"prompt": prompts[k], "max_tokens": 10})[1]
        threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(prompts))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual([t["choices"][0]["text"] for t in together], alone)
        self.assertGreater(self.server.get("/health")["steps"], 0)

    def test_limits_queue_body_and_sigterm(self):
        s = Server(self.base, "--slots", "1", "--queue", "1", "--max-body", "4096")
        try:
            st, body, _ = s.post("/v1/completions", None, raw=json.dumps({"prompt": "x" * 8000}).encode())
            self.assertEqual(st, 413, body)
            results = []

            def ask():
                results.append(s.post("/v1/completions", {"prompt": "Anne Elliot", "max_tokens": 48}))
            threads = [threading.Thread(target=ask) for _ in range(6)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            codes = sorted(r[0] for r in results)
            self.assertIn(200, codes)
            self.assertIn(503, codes)
            full = next(r for r in results if r[0] == 503)
            self.assertIn("queue is full", full[1]["error"]["message"])
            self.assertEqual(full[2]["Retry-After"], "1")
            # Every answer is out, so nothing runs or waits (a stale count here once
            # let the SIGTERM below go out before the late request was taken).
            health = s.get("/health")
            self.assertEqual((health["running"], health["queued"]), (0, 0), health)
            # SIGTERM while a request runs: it is answered, then the process exits 0.
            late = []
            th = threading.Thread(target=lambda: late.append(s.post("/v1/completions",
                                                                    {"prompt": "Anne Elliot", "max_tokens": 64})))
            th.start()
            deadline = time.time() + 30
            while s.get("/health")["running"] == 0 and time.time() < deadline:
                time.sleep(0.01)
            s.p.send_signal(signal.SIGTERM)
            th.join(120)
            self.assertEqual(late[0][0], 200, late)
            self.assertEqual(s.p.wait(60), 0)
        finally:
            s.stop()


if __name__ == "__main__":
    E.main()
