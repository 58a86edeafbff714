"""selq.serve(): the CLI's server started and stopped from Python (docs/SERVE.md);
its answers are the CLI server's (the same engine), and a bad checkpoint is a
selq.Error before anything listens. (lm-eval against it: tests/e2e/test_serve.py.)"""
import json
import urllib.error
import urllib.request

import pytest

import selq


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_serve_answers_then_stops(smollm2):
    with selq.serve(smollm2, slots=4) as s:
        assert s.running and s.port > 0
        assert s.base_url == f"http://127.0.0.1:{s.port}/v1/completions"
        a = post(s.url, {"prompt": "It is a truth universally", "max_tokens": 6, "echo": True, "logprobs": 1})
        choice = a["choices"][0]
        assert choice["finish_reason"] == "length"
        lp = choice["logprobs"]["token_logprobs"]
        assert lp[0] is None and all(isinstance(v, float) and v <= 0 for v in lp[1:])
        assert choice["text"].startswith("It is a truth universally")
        assert "selq.Server" in repr(s)
    assert not s.running
    with pytest.raises(urllib.error.URLError):
        post(s.url, {"prompt": "x", "max_tokens": 1})
    s.stop()  # twice is fine


def test_serve_refuses_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(selq.Error):
        selq.serve(tmp_path)
