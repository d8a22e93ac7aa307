#!/usr/bin/env python3
"""The official `openai` Python SDK (pinned in scripts/requirements.txt) against the real
`tierserve serve` binary on port 0 with stories260K: completions, chat, streaming with the
usage chunk, service_tier, the tierserve headers, errors and API keys as the SDK sees them.

Run by CTest with .venv's python:  openai_sdk_test.py --bin build/bin/tierserve --model M --work DIR
Exits 77 (CTest: skipped) when the openai package is not installed, unless
TIERSERVE_REQUIRE_OPENAI=1 (scripts/test.sh sets it), which makes that a failure.
"""
import argparse
import os
import signal
import subprocess
import sys
import time
import unittest

try:
    import openai
except ImportError as e:  # pragma: no cover
    print(f"openai SDK not installed ({e}); run scripts/python-env.sh", file=sys.stderr)
    sys.exit(1 if os.environ.get("TIERSERVE_REQUIRE_OPENAI") == "1" else 77)

ARGS = None


class Server:
    def __init__(self, name, config_yaml, extra=()):
        os.makedirs(ARGS.work, exist_ok=True)
        self.cfg = os.path.join(ARGS.work, name + ".yaml")
        self.port_file = os.path.join(ARGS.work, name + ".port")
        with open(self.cfg, "w") as f:
            f.write(config_yaml)
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.err = open(os.path.join(ARGS.work, name + ".stderr"), "w")
        self.proc = subprocess.Popen(
            [ARGS.bin, "serve", "-c", self.cfg, "-m", ARGS.model, "-t", "1", "--port", "0",
             "--port-file", self.port_file, *extra],
            stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.time() + 60
        while time.time() < deadline:
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.port = int(text)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"tierserve serve exited with {self.proc.returncode}")
            time.sleep(0.01)
        raise RuntimeError("tierserve serve did not start")

    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        self.err.close()
        return rc


class OpenAiSdk(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("sdk", "http: {threads: 2}\n")
        cls.client = openai.OpenAI(base_url=cls.srv.url(), api_key="unused", max_retries=0, timeout=30)

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def test_completion(self):
        r = self.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=64,
                                           temperature=0, stop=["Lily"])
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].text, ", there was a little girl named ")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.prompt_tokens, 5)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_and_service_tier(self):
        r = self.client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=8, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.service_tier, "standard")
        for asked, served in (("priority", "ultrafast"), ("flex", "batch"), ("default", "standard")):
            r = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                    max_tokens=2, service_tier=asked)
            self.assertEqual(r.service_tier, served, asked)

    def test_stream_with_usage(self):
        plain = self.client.completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0)
        stream = self.client.completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        text, usage, finish, n = "", None, None, 0
        for chunk in stream:
            n += 1
            if chunk.choices:
                text += chunk.choices[0].text
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                usage = chunk.usage
        self.assertGreater(n, 2)
        self.assertEqual(text, plain.choices[0].text)
        self.assertEqual(finish, "length")
        self.assertIsNotNone(usage)
        self.assertEqual(usage.completion_tokens, 24)

        chat = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                   max_tokens=6, stream=True, service_tier="priority")
        tiers, content = set(), ""
        for chunk in chat:
            tiers.add(chunk.service_tier)
            if chunk.choices and chunk.choices[0].delta.content:
                content += chunk.choices[0].delta.content
        self.assertEqual(tiers, {"ultrafast"})
        self.assertTrue(content)

    def test_logprobs(self):
        # Chat: logprobs + top_logprobs; greedy, so each token is its own most likely one.
        r = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertEqual(t.top_logprobs[0].token, t.token)
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=5)
            self.assertEqual(bytes(t.bytes).decode("utf-8", "replace"), t.token)
        # Streamed: the chunks' logprobs add up to the same list.
        stream = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=12, temperature=0, logprobs=True, top_logprobs=3,
                                                     stream=True)
        streamed = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
                streamed += chunk.choices[0].logprobs.content
        self.assertEqual([(t.token, round(t.logprob, 5)) for t in streamed],
                         [(t.token, round(t.logprob, 5)) for t in content])
        # Completions: logprobs N.
        c = self.client.completions.create(model="m", prompt="Once upon a time", max_tokens=8, temperature=0,
                                           logprobs=2)
        lp = c.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 8)
        self.assertEqual("".join(lp.tokens), c.choices[0].text)
        self.assertEqual(len(lp.top_logprobs[0]), 2)
        self.assertEqual(lp.text_offset[0], 0)
        self.assertEqual(lp.text_offset[1], len(lp.tokens[0].encode()))
        # Off: null.
        r = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        self.assertIsNone(r.choices[0].logprobs)

    def test_headers_via_raw_response(self):
        # The legacy completions API has no service_tier parameter; it goes as an extra field.
        raw = self.client.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=2,
                                                               extra_body={"service_tier": "flex"})
        self.assertEqual(raw.headers["x-tierserve-tier-requested"], "batch")
        self.assertEqual(raw.headers["x-tierserve-tier-served"], "batch")
        self.assertEqual(raw.parse().service_tier, "batch")

    def test_token_id_prompt(self):
        # stories260K's tokens of "Once upon a time", BOS first.
        r = self.client.completions.create(model="m", prompt=[1, 403, 407, 261, 378], max_tokens=64, temperature=0,
                                           stop=["Lily"])
        self.assertEqual(r.choices[0].text, ", there was a little girl named ")
        self.assertEqual(r.usage.prompt_tokens, 5)

    def test_logit_bias(self):
        # Token 432 is the "," that greedy decoding starts with; +100 on 383 (" there")
        # makes it every token.
        r = self.client.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0,
                                           logit_bias={"432": -100})
        self.assertFalse(r.choices[0].text.startswith(","))
        r = self.client.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0,
                                           logit_bias={"383": 100})
        self.assertEqual(r.choices[0].text, " there there there")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="m", prompt="Hi", max_tokens=1, logit_bias={"512": 1})
        self.assertEqual(e.exception.code, "invalid_value")

    def test_errors_are_sdk_exceptions(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="m", prompt="Hi", n=2)
        self.assertEqual(e.exception.status_code, 400)
        self.assertEqual(e.exception.code, "unsupported_parameter")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="m", prompt="Once upon a time " * 60, max_tokens=4)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])

    def test_models(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertEqual(ids, ["stories260K"])


class OpenAiSdkKeys(unittest.TestCase):
    def test_keys_and_rate_limit(self):
        key_hash = subprocess.run([ARGS.bin, "serve", "--hash-key", "sk-sdk"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        srv = Server("sdk_keys", f"keys:\n  - {{name: sdk, sha256: {key_hash}, requests_per_min: 2}}\n")
        try:
            bad = openai.OpenAI(base_url=srv.url(), api_key="sk-wrong", max_retries=0)
            with self.assertRaises(openai.AuthenticationError):
                bad.completions.create(model="m", prompt="Hi", max_tokens=1)
            good = openai.OpenAI(base_url=srv.url(), api_key="sk-sdk", max_retries=0)
            for _ in range(2):
                good.completions.create(model="m", prompt="Hi", max_tokens=1)
            with self.assertRaises(openai.RateLimitError) as e:
                good.completions.create(model="m", prompt="Hi", max_tokens=1)
            self.assertEqual(e.exception.status_code, 429)
            self.assertGreaterEqual(int(e.exception.response.headers["retry-after"]), 1)
            self.assertEqual(e.exception.response.headers["x-ratelimit-remaining-requests"], "0")
        finally:
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
