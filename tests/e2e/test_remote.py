"""Remote checkpoints: selq reads a checkpoint over HTTP range requests from a
real nginx on 127.0.0.1, and fails with one clear line on broken servers.
A Hugging Face-shaped server (a token, then a redirect to a CDN on another
host) checks that credentials reach their own host and never the CDN."""
import base64
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import e2e_util as u

NGINX = "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc=None, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on 127.0.0.1:{port}")


def strip_paths(j):
    """Drops the fields that name where the checkpoint lives."""
    if isinstance(j, dict):
        return {k: strip_paths(v) for k, v in j.items() if k not in ("path", "source")}
    if isinstance(j, list):
        return [strip_paths(v) for v in j]
    return j


def write_big_sparse_checkpoint(d):
    """A >2 GB llama checkpoint whose data is a hole: real header, no bytes."""
    hidden, inter, kv, vocab, layers = 8192, 28672, 1024, 32000, 2
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden],
              "lm_head.weight": [vocab, hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": [hidden, hidden], p + "self_attn.k_proj.weight": [kv, hidden],
                       p + "self_attn.v_proj.weight": [kv, hidden], p + "self_attn.o_proj.weight": [hidden, hidden],
                       p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
                       p + "mlp.down_proj.weight": [hidden, inter], p + "input_layernorm.weight": [hidden],
                       p + "post_attention_layernorm.weight": [hidden]})
    header, off = {}, 0
    for name in sorted(shapes):
        n = 2
        for s in shapes[name]:
            n *= s
        header[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(d)
    path = os.path.join(d, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 64,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": vocab, "torch_dtype": "bfloat16",
              "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return os.path.getsize(path)


class BadHandler(http.server.BaseHTTPRequestHandler):
    """Serves ROOT with one fault chosen by the first path component."""
    ROOT = None
    FAIL_AT = None  # "midtensor": (file under ROOT, byte) where every response covering it stops

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        try:
            self.serve(head=False)
        except (BrokenPipeError, ConnectionResetError):
            pass  # selq hangs up on a server that ignores Range, as it should

    def serve(self, head):
        mode, _, rel = self.path.lstrip("/").partition("/")
        path = os.path.join(self.ROOT, rel)
        missing = mode == "none" or (mode == "404shard" and rel.endswith(".safetensors"))
        if missing or not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as f:
            data = f.read()
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if mode == "norange" or not m:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)
            return
        a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        body = data[a:b + 1]
        cr = f"bytes {a}-{b}/{len(data)}"
        if mode == "wrongrange":
            cr = f"bytes {a + 1}-{b + 1}/{len(data)}"
        if mode == "wronglen":
            body = body[:max(1, len(body) // 2)]
        self.send_response(206)
        self.send_header("Content-Range", cr)
        self.send_header("Content-Length", str(len(data[a:b + 1]) if mode == "truncate" else len(body)))
        if mode == "truncate":
            self.send_header("Connection", "close")
            body = body[:len(body) // 2]
            self.close_connection = True
        if mode == "midtensor" and self.FAIL_AT and self.FAIL_AT[0] == rel and a <= self.FAIL_AT[1] <= b:
            self.send_header("Connection", "close")  # the server dies mid-body, on every attempt
            body = body[:self.FAIL_AT[1] - a]
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


TOKEN = "hf_selq_test_token_0123456789"
HF_PATH = "/org/repo/resolve/main/"  # the shape of a Hugging Face base URL; serves www/ckpt


class CdnHandler(BadHandler):
    """The CDN (127.0.0.2): serves the bytes and records every Authorization it sees."""
    SEEN = []  # Authorization header of each request (None when absent)

    def serve(self, head):
        self.SEEN.append(self.headers.get("Authorization"))
        self.path = self.path.split("?")[0]  # the signature query a real CDN checks
        super().serve(head)


class HubHandler(http.server.BaseHTTPRequestHandler):
    """The hub (127.0.0.1): 401 without a token, 403 with a wrong one, else as
    huggingface.co: JSON files 307 to a cache path on this host first, then
    everything 302 to the CDN. Accepts the token as a bearer or, as from a
    ~/.netrc entry, as the password of HTTP Basic."""
    CDN = None  # "http://127.0.0.2:PORT"
    SEEN = []   # (path, Authorization) of each request

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.serve()

    def do_GET(self):
        self.serve()

    def authorized(self):
        auth = self.headers.get("Authorization")
        self.SEEN.append((self.path, auth))
        if auth is None:
            return 401
        basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
        return 200 if auth in (f"Bearer {TOKEN}", f"Basic {basic}") else 403

    def redirect(self, code, location):
        self.send_response(code)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def serve(self):
        status = self.authorized()
        if status != 200:
            self.send_error(status)
            return
        if self.path.startswith("/cache/"):
            self.redirect(302, f"{self.CDN}/ok/ckpt/{self.path[len('/cache/'):]}?sig=x")
            return
        if not self.path.startswith(HF_PATH):
            self.send_error(404)
            return
        rel = self.path[len(HF_PATH):]
        if not os.path.isfile(os.path.join(BadHandler.ROOT, "ckpt", rel)):
            self.send_error(404)  # as the hub answers a missing file itself
        elif rel.endswith(".json"):
            self.redirect(307, f"/cache/{rel}")  # relative, on this host: the token goes along
        else:
            self.redirect(302, f"{self.CDN}/ok/ckpt/{rel}?sig=x")


class RemoteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="selq-remote-")
        os.chmod(cls.tmp, 0o755)
        cls.www = os.path.join(cls.tmp, "www")
        cls.ckpt = os.path.join(cls.www, "ckpt")
        u.selq("synth", "--arch", "llama", "--scale", "2", "--vocab", "512", cls.ckpt)
        cls.big_size = write_big_sparse_checkpoint(os.path.join(cls.www, "big"))
        cls.start_nginx()
        BadHandler.ROOT = cls.www
        cls.bad = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BadHandler)
        cls.bad_thread = threading.Thread(target=cls.bad.serve_forever, daemon=True)
        cls.bad_thread.start()
        cls.bad_base = f"http://127.0.0.1:{cls.bad.server_address[1]}"
        cls.start_hub()

    @classmethod
    def serve_in_thread(cls, server):
        threading.Thread(target=server.serve_forever, daemon=True).start()
        cls.servers.append(server)

    @classmethod
    def start_hub(cls):
        cls.servers = []
        cdn = http.server.ThreadingHTTPServer(("127.0.0.2", 0), CdnHandler)
        cls.serve_in_thread(cdn)
        HubHandler.CDN = f"http://127.0.0.2:{cdn.server_address[1]}"
        hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
        cls.serve_in_thread(hub)
        cls.hub = f"http://127.0.0.1:{hub.server_address[1]}"
        cls.hub_url = cls.hub + HF_PATH
        cls.home = os.path.join(cls.tmp, "home")  # no ~/.netrc of the user's
        os.makedirs(cls.home)

    @classmethod
    def start_nginx(cls):
        if not os.path.exists(NGINX):
            if os.environ.get("CI") == "true":
                raise AssertionError("nginx is required under CI (apt-get install nginx)")
            raise unittest.SkipTest("nginx not installed")
        cls.port = free_port()
        t = cls.tmp
        cls.access_log = os.path.join(t, "access.log")
        conf = f"""
daemon off;
master_process off;
worker_processes 1;
pid {t}/nginx.pid;
error_log {t}/error.log warn;
events {{ worker_connections 64; }}
http {{
  log_format bytes '$request_method $uri $status $body_bytes_sent';
  access_log {cls.access_log} bytes;
  client_body_temp_path {t}/body;
  proxy_temp_path {t}/proxy;
  fastcgi_temp_path {t}/fastcgi;
  uwsgi_temp_path {t}/uwsgi;
  scgi_temp_path {t}/scgi;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{cls.port};
    root {cls.www};
  }}
}}
"""
        path = os.path.join(t, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        cls.nginx = subprocess.Popen([NGINX, "-p", t, "-c", path, "-e", os.path.join(t, "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_listening(cls.port, cls.nginx)
        cls.base = f"http://127.0.0.1:{cls.port}"

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "nginx", None):
            cls.nginx.terminate()
            try:
                cls.nginx.wait(10)
            except subprocess.TimeoutExpired:
                cls.nginx.kill()
                cls.nginx.wait()
        for server in [getattr(cls, "bad", None)] + getattr(cls, "servers", []):
            if server:
                server.shutdown()
                server.server_close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def log_bytes(self, uri_prefix):
        total = 0
        with open(self.access_log) as f:
            for line in f:
                method, uri, status, sent = line.split()
                if uri.startswith(uri_prefix):
                    total += int(sent)
        return total

    def test_inspect_matches_local(self):
        local = json.loads(u.selq("inspect", "--json", self.ckpt).stdout)
        remote = json.loads(u.selq("inspect", "--json", f"{self.base}/ckpt").stdout)
        self.assertEqual(remote["path"], f"{self.base}/ckpt")
        self.assertEqual(strip_paths(local), strip_paths(remote))

    def test_plan_matches_local(self):
        r = u.recipe("llama-mix")
        local = json.loads(u.selq("plan", "--json", self.ckpt, "--recipe", r).stdout)
        remote = json.loads(u.selq("plan", "--json", f"{self.base}/ckpt/", "--recipe", r).stdout)
        self.assertEqual(strip_paths(local), strip_paths(remote))

    def assert_same_output(self, local_dst, remote_dst, src, url):
        a, b = u.tree_bytes(local_dst), u.tree_bytes(remote_dst)
        self.assertEqual(sorted(a), sorted(b))
        self.assertIn("tokenizer_config.json", b)
        for name in a:
            if name == "selq-manifest.json":
                self.assertEqual(strip_paths(json.loads(a[name])), strip_paths(json.loads(b[name])), name)
            elif name in ("selq-report.txt", "selq-report.html"):  # name their source
                self.assertEqual(a[name].replace(src.encode(), b"SRC"), b[name].replace(url.encode(), b"SRC"), name)
            else:
                self.assertEqual(a[name], b[name], name)

    def test_quantize_is_byte_identical(self):
        r = u.recipe("llama-mix")
        local_dst = os.path.join(self.tmp, "out-local")
        remote_dst = os.path.join(self.tmp, "out-remote")
        u.selq("quantize", self.ckpt, local_dst, "--recipe", r, "--quiet")
        u.selq("quantize", f"{self.base}/ckpt", remote_dst, "--recipe", r, "--quiet")
        self.assert_same_output(local_dst, remote_dst, self.ckpt, f"{self.base}/ckpt")

    def shard_bytes_sent(self, uri_prefix):
        total = 0
        with open(self.access_log) as f:
            for line in f:
                method, uri, status, sent = line.split()
                if uri.startswith(uri_prefix) and uri.endswith(".safetensors"):
                    total += int(sent)
        return total

    def test_nvfp4_tensors_downloaded_ahead_once_each(self):
        """NVFP4 fused groups (q/k/v, gate/up) read every member for their
        shared amax: the members are downloaded once all the same, ahead of
        the workers, and the output is the local run's byte for byte, with one
        worker or several, and with fused groups split across shards."""
        r = u.recipe("llama-nvfp4")
        for name, extra in (("ckpt", []), ("ckpt-shards", ["--max-shard-size", "300KB"])):
            src = os.path.join(self.www, name)
            if not os.path.exists(src):
                u.selq("synth", "--arch", "llama", "--scale", "2", "--vocab", "512", *extra, src)
            shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
            files = sum(os.path.getsize(os.path.join(src, f)) for f in shards)
            local_dst = os.path.join(self.tmp, f"nvfp4-local-{name}")
            u.selq("quantize", src, local_dst, "--recipe", r, "--quiet")
            for jobs in ("1", "3"):
                with self.subTest(checkpoint=name, jobs=jobs):
                    remote_dst = os.path.join(self.tmp, f"nvfp4-remote-{name}-{jobs}")
                    before = self.shard_bytes_sent(f"/{name}/")
                    u.selq("quantize", f"{self.base}/{name}", remote_dst, "--recipe", r, "-j", jobs, "--quiet")
                    sent = self.shard_bytes_sent(f"/{name}/") - before
                    self.assert_same_output(local_dst, remote_dst, src, f"{self.base}/{name}")
                    if len(shards) == 1:  # the header once, each tensor once
                        self.assertEqual(sent, files)
                    else:  # a member in a later shard may be read twice, never more
                        self.assertGreaterEqual(sent, files)
                        self.assertLess(sent, 2 * files)

    def test_plan_of_multi_gb_checkpoint_transfers_little(self):
        self.assertGreater(self.big_size, 2 << 30)
        before = self.log_bytes("/big/")
        out = u.selq("plan", "--json", f"{self.base}/big", "--recipe", u.recipe("llama-mix"))
        plan = json.loads(out.stdout)
        self.assertTrue(plan)
        sent = self.log_bytes("/big/") - before
        self.assertGreater(sent, 0)
        self.assertLess(sent, 1 << 20, f"plan downloaded {sent} bytes")

    def bad_run(self, mode, expect):
        url = f"{self.bad_base}/{mode}/ckpt"
        env = dict(os.environ, SELQ_HTTP_ATTEMPTS="3")
        r = u.selq("plan", url, "--recipe", u.recipe("llama-mix"), check=False, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(url, lines[0])
        self.assertRegex(lines[0], expect)
        return lines[0]

    def test_server_without_range_support(self):
        self.bad_run("norange", r"ignores HTTP Range")

    def test_truncated_responses(self):
        line = self.bad_run("truncate", r"after 3 attempts")
        self.assertIn("at byte", line)

    def test_wrong_content_range(self):
        self.bad_run("wrongrange", r"wrong Content-Range")

    def test_wrong_length(self):
        self.bad_run("wronglen", r"wrong-length response")

    def test_missing_shard(self):
        self.bad_run("404shard", r"model-00001-of-00001\.safetensors.*HTTP 404")

    def test_missing_checkpoint(self):
        self.bad_run("none", r"model\.safetensors.*HTTP 404")

    def test_quantize_through_truncating_server_fails_cleanly(self):
        dst = os.path.join(self.tmp, "out-bad")
        env = dict(os.environ, SELQ_HTTP_ATTEMPTS="2")
        r = u.selq("quantize", f"{self.bad_base}/truncate/ckpt", dst, "--recipe", u.recipe("llama-mix"),
                   check=False, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertFalse(os.path.exists(dst))

    def test_server_failing_mid_tensor_during_quantize(self):
        """The server stops in the middle of one tensor's bytes while quantize
        downloads it: one error line, nothing under DST; once the server is
        well again the same command completes, byte-identical to the local run."""
        shard = [f for f in os.listdir(self.ckpt) if f.endswith(".safetensors")][0]
        rel = f"ckpt/{shard}"
        with open(os.path.join(self.www, rel), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        tensor = "model.layers.1.mlp.down_proj.weight"
        a, b = header[tensor]["data_offsets"]
        BadHandler.FAIL_AT = (rel, 8 + n + (a + b) // 2)
        url = f"{self.bad_base}/midtensor/ckpt"
        dst = os.path.join(self.tmp, "out-midtensor")
        r = u.recipe("llama-mix")
        env = dict(os.environ, SELQ_HTTP_ATTEMPTS="2")
        try:
            bad = u.selq("quantize", url, dst, "--recipe", r, "--quiet", check=False, env=env)
        finally:
            BadHandler.FAIL_AT = None
        self.assertEqual(bad.returncode, 2, bad.stderr)
        lines = bad.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, bad.stderr)
        self.assertRegex(lines[0], "^selq: error: .*" + re.escape(shard) + ".*" + re.escape(tensor) + ".*after 2 attempts")
        self.assertFalse(os.path.exists(dst), "partial output under DST")
        u.selq("quantize", url, dst, "--recipe", r, "--quiet", env=env)
        local_dst = os.path.join(self.tmp, "out-midtensor-local")
        u.selq("quantize", self.ckpt, local_dst, "--recipe", r, "--quiet")
        self.assert_same_output(local_dst, dst, self.ckpt, url)

    def hub_env(self, **extra):
        """selq's environment for the hub: the hub is HF_ENDPOINT (its token's host)."""
        env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
        env.update(HOME=self.home, SELQ_HTTP_ATTEMPTS="2", HF_ENDPOINT=self.hub)
        env.update(extra)
        HubHandler.SEEN.clear()
        CdnHandler.SEEN.clear()
        return env

    def assert_token_stayed_home(self, expect_hub):
        """Every hub request carried `expect_hub`; the CDN served and never saw one."""
        self.assertTrue(HubHandler.SEEN)
        self.assertEqual({auth for _, auth in HubHandler.SEEN}, {expect_hub})
        self.assertIn("/cache/config.json", [path for path, _ in HubHandler.SEEN])  # same-host redirect
        self.assertTrue(CdnHandler.SEEN, "nothing came through the redirect")
        self.assertEqual(set(CdnHandler.SEEN), {None})

    def test_hub_token_reaches_the_hub_and_never_the_cdn(self):
        local = json.loads(u.selq("inspect", "--json", self.ckpt).stdout)
        remote = json.loads(u.selq("inspect", "--json", self.hub_url, env=self.hub_env(HF_TOKEN=TOKEN)).stdout)
        self.assertEqual(strip_paths(local), strip_paths(remote))
        self.assert_token_stayed_home(f"Bearer {TOKEN}")

    def test_quantize_through_hub_redirect_is_byte_identical(self):
        r = u.recipe("llama-mix")
        # The reports' title names the source's last component: "main" both ways.
        local_src = os.path.join(self.tmp, "hub-local", "main")
        shutil.copytree(self.ckpt, local_src)
        local_dst = os.path.join(self.tmp, "out-hub-local")
        remote_dst = os.path.join(self.tmp, "out-hub-remote")
        u.selq("quantize", local_src, local_dst, "--recipe", r, "--quiet")
        env = self.hub_env(HF_TOKEN=TOKEN)
        u.selq("quantize", self.hub_url, remote_dst, "--recipe", r, "--quiet", env=env)
        self.assert_same_output(local_dst, remote_dst, local_src, self.hub_url.rstrip("/"))  # named without the slash
        self.assert_token_stayed_home(f"Bearer {TOKEN}")

    def test_netrc_entry_for_the_hub(self):
        with open(os.path.join(self.home, ".netrc"), "w") as f:
            f.write(f"machine 127.0.0.1 login user password {TOKEN}\n")
        try:
            u.selq("inspect", "--json", self.hub_url, env=self.hub_env())
        finally:
            os.remove(os.path.join(self.home, ".netrc"))
        basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
        self.assert_token_stayed_home(f"Basic {basic}")

    def denied_run(self, env, expect):
        r = u.selq("inspect", self.hub_url, check=False, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(self.hub_url.rstrip("/"), lines[0])
        self.assertIn(expect, lines[0])
        self.assertNotIn(TOKEN, r.stderr)
        self.assertEqual(CdnHandler.SEEN, [])

    def test_hub_without_token_is_401(self):
        self.denied_run(self.hub_env(), "HTTP 401: needs a token: set HF_TOKEN")

    def test_hub_with_wrong_token_is_403(self):
        self.denied_run(self.hub_env(HF_TOKEN="hf_wrong"),
                        "HTTP 403: the token was refused or lacks access to this repository")

    def test_hf_token_goes_to_hugging_face_hosts_only(self):
        env = self.hub_env(HF_TOKEN=TOKEN)
        del env["HF_ENDPOINT"]  # 127.0.0.1 is then not a host the token is for
        self.denied_run(env, "HTTP 401: needs credentials (a ~/.netrc entry for 127.0.0.1)")
        self.assertEqual({auth for _, auth in HubHandler.SEEN}, {None})


if __name__ == "__main__":
    u.main()
