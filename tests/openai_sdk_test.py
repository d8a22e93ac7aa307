#!/usr/bin/env python3
"""Real clients (pinned in scripts/requirements.txt) against the real `tierserve serve`
binary on port 0 with stories260K: the official `openai` SDK (completions, chat, streaming
with the usage chunk, service_tier as OpenAI defines it, the tierserve headers, errors,
API keys, its retry on 429 with Retry-After), every body and chunk validated strictly with
the SDK's own models, langchain-openai's ChatOpenAI, and the `llm` CLI.

Run by CTest with .venv's python:  openai_sdk_test.py --bin build/bin/tierserve --model M --work DIR
Exits 77 (CTest: skipped) when the openai package is not installed, unless
TIERSERVE_REQUIRE_OPENAI=1 (scripts/test.sh sets it), which makes that a failure.
"""
import argparse
import json
import os
import threading
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
    def __init__(self, name, config_yaml, extra=(), model=None):
        os.makedirs(ARGS.work, exist_ok=True)
        self.cfg = os.path.join(ARGS.work, name + ".yaml")
        self.port_file = os.path.join(ARGS.work, name + ".port")
        with open(self.cfg, "w") as f:
            f.write(config_yaml)
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.err = open(os.path.join(ARGS.work, name + ".stderr"), "w")
        self.proc = subprocess.Popen(
            [ARGS.bin, "serve", "-c", self.cfg, "-m", model or ARGS.model, "-t", "1", "--port", "0",
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


# The SDK's response models, validated strictly (pydantic strict mode: no coercions, enums
# such as service_tier checked). The SDK's own create() builds them leniently.
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

OPENAI_TIERS = {"auto", "default", "flex", "scale", "priority"}


def raw_post(url, path, body, headers=None):
    """POST a JSON body; returns (status, headers, text) without the SDK in between."""
    import httpx
    r = httpx.post(url + path, json=body, headers=headers or {}, timeout=30)
    return r.status_code, r.headers, r.text


def sse_payloads(text):
    return [l[len("data: "):] for l in text.split("\n") if l.startswith("data: ")]


class OpenAiSdk(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Two served names for the one model: requests may use either.
        cls.srv = Server("sdk", "http: {threads: 2}\n", extra=["--served-model-name", "stories260K",
                                                               "--served-model-name", "m"])
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
        self.assertEqual(r.service_tier, "default")  # OpenAI's value; tierserve's tier in the headers
        for asked, served, tier in (("priority", "priority", "ultrafast"), ("fast", "priority", "ultrafast"),
                                    ("flex", "flex", "batch"), ("default", "default", "standard"),
                                    ("scale", "default", "standard"), ("auto", "default", "standard"),
                                    ("ultrafast", "priority", "ultrafast"), ("batch", "flex", "batch")):
            raw = self.client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, service_tier=asked)
            self.assertEqual(raw.parse().service_tier, served, asked)
            self.assertEqual(raw.headers["x-tierserve-tier-served"], tier, asked)
            self.assertEqual(json.loads(raw.text)["tierserve"]["tier_served"], tier, asked)

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
        self.assertEqual(tiers, {"priority"})
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
        self.assertEqual(raw.parse().service_tier, "flex")

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
        self.assertEqual(ids, ["stories260K", "m"])
        self.assertEqual(self.client.models.retrieve("m").id, "m")
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.models.retrieve("gpt-17")
        self.assertEqual(e.exception.code, "model_not_found")
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="gpt-17", prompt="Hi", max_tokens=1)
        self.assertEqual(e.exception.code, "model_not_found")
        self.assertEqual(e.exception.body["param"], "model")
        r = self.client.completions.create(model="stories260K", prompt="Hi", max_tokens=1)
        self.assertEqual(r.model, "stories260K")  # the name asked for

    # --- strict validation of every body and chunk with the SDK's models ---------------

    def test_strict_bodies(self):
        url = self.srv.url()
        chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}
        for tier in ("priority", "default", "flex", "auto", "ultrafast", "standard", "batch"):
            st, _, text = raw_post(url, "/chat/completions", {**chat, "service_tier": tier})
            self.assertEqual(st, 200, text)
            c = ChatCompletion.model_validate(json.loads(text), strict=True)
            self.assertIn(c.service_tier, OPENAI_TIERS)
        st, _, text = raw_post(url, "/chat/completions", {**chat, "logprobs": True, "top_logprobs": 2, "stop": ["\n"]})
        self.assertEqual(st, 200, text)
        c = ChatCompletion.model_validate(json.loads(text), strict=True)
        self.assertIsNotNone(c.choices[0].logprobs)
        st, _, text = raw_post(url, "/completions", {"model": "m", "prompt": "Once", "max_tokens": 5, "logprobs": 2,
                                                     "stop": "Lily", "service_tier": "flex"})
        self.assertEqual(st, 200, text)
        Completion.model_validate(json.loads(text), strict=True)

    def test_strict_stream_chunks_usage_null_until_the_usage_chunk(self):
        url = self.srv.url()
        for body in ({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                      "logprobs": True, "top_logprobs": 1, "service_tier": "priority"},
                     {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stop": ["."]},
                     # every other request value: each served tier's chunks validate too
                     *({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                        "service_tier": t} for t in ("flex", "fast", "scale", "default", "auto", "batch"))):
            st, headers, text = raw_post(url, "/chat/completions",
                                         {**body, "stream": True, "stream_options": {"include_usage": True}})
            self.assertEqual(st, 200, text)
            self.assertEqual(headers.get("x-accel-buffering"), "no")
            payloads = sse_payloads(text)
            self.assertEqual(payloads[-1], "[DONE]")
            chunks = [json.loads(p) for p in payloads[:-1]]
            for ch in chunks[:-1]:
                self.assertIn("usage", ch)
                self.assertIsNone(ch["usage"])
            self.assertIsNotNone(chunks[-1]["usage"])
            self.assertEqual(chunks[-1]["choices"], [])
            served = {"flex": "flex", "batch": "flex", "scale": "default", "default": "default"}.get(body.get("service_tier"))
            for ch in chunks:
                ChatCompletionChunk.model_validate(ch, strict=True)
                self.assertIn(ch["service_tier"], OPENAI_TIERS)
                if served:
                    self.assertEqual(ch["service_tier"], served, body)
        st, _, text = raw_post(url, "/completions", {"model": "m", "prompt": "Once", "max_tokens": 4, "stream": True,
                                                     "stream_options": {"include_usage": True}})
        self.assertEqual(st, 200, text)
        chunks = [json.loads(p) for p in sse_payloads(text)[:-1]]
        self.assertGreaterEqual(len(chunks), 2)
        for ch in chunks:
            # The SDK types a streamed completion chunk as Completion, whose choices'
            # finish_reason admits no null; OpenAI's own chunks carry null until the last,
            # as ours do (asserted), so for the strict check of everything else a null
            # stands in as "length".
            for c in ch["choices"]:
                if c["finish_reason"] is None:
                    c["finish_reason"] = "length"
                else:
                    self.assertIs(ch, chunks[-2])  # only the final text chunk says why it stopped
            Completion.model_validate(ch, strict=True)
            self.assertIn(ch["service_tier"], OPENAI_TIERS)
        self.assertIsNotNone(chunks[-1]["usage"])

    def test_strict_error_bodies(self):
        from openai.types.shared import ErrorObject
        url = self.srv.url()
        for path, body, status, code in (
                ("/completions", {"model": "m", "prompt": "Hi", "n": 3}, 400, "unsupported_parameter"),
                ("/completions", {"model": "nope", "prompt": "Hi"}, 404, "model_not_found"),
                ("/chat/completions", {"model": "m", "messages": []}, 400, "invalid_value"),
                ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}],
                                       "service_tier": "gold"}, 400, "invalid_value")):
            st, _, text = raw_post(url, path, body)
            self.assertEqual(st, status, text)
            e = ErrorObject.model_validate(json.loads(text)["error"], strict=True)
            self.assertEqual(e.code, code)

    def test_request_id_is_used_or_made(self):
        url = self.srv.url()
        body = {"model": "m", "prompt": "Hi", "max_tokens": 1}
        _, h, _ = raw_post(url, "/completions", body, {"X-Request-Id": "req-abc-123"})
        self.assertEqual(h["x-request-id"], "req-abc-123")
        for bad in ("x" * 200, "has space", "caf\u00e9"):
            try:
                _, h, _ = raw_post(url, "/completions", body, {"X-Request-Id": bad})
            except UnicodeEncodeError:
                continue
            self.assertNotEqual(h["x-request-id"], bad)
            self.assertRegex(h["x-request-id"], r"^[0-9a-f]{32}$")
        _, h, _ = raw_post(url, "/completions", body, {
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
        self.assertRegex(h["x-request-id"], r"^[0-9a-f]{32}$")
        with open(self.srv.err.name) as f:
            log = f.read()
        self.assertIn("trace_id=4bf92f3577b34da6a3ce929d0e0e4736", log)
        self.assertIn("request_id=req-abc-123", log)

    def test_tokenize_and_detokenize(self):
        url = self.srv.url().rsplit("/v1", 1)[0]
        st, _, text = raw_post(url, "/tokenize", {"model": "m", "prompt": "Once upon a time"})
        self.assertEqual(st, 200, text)
        t = json.loads(text)
        self.assertEqual(t["tokens"], [1, 403, 407, 261, 378])
        self.assertEqual(t["count"], 5)
        self.assertGreater(t["max_model_len"], 0)
        st, _, text = raw_post(url, "/detokenize", {"model": "m", "tokens": t["tokens"][1:]})
        self.assertEqual(st, 200, text)
        self.assertEqual(json.loads(text)["prompt"], "Once upon a time")
        st, _, text = raw_post(url, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
        self.assertEqual(st, 200, text)
        self.assertGreater(json.loads(text)["count"], 2)
        st, _, text = raw_post(url, "/detokenize", {"tokens": [10 ** 9]})
        self.assertEqual(st, 400, text)


class OpenAiSdkKeys(unittest.TestCase):
    def test_keys_and_rate_limit(self):
        key_hash = subprocess.run([ARGS.bin, "serve", "--hash-key", "sk-sdk"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        srv = Server("sdk_keys", f"keys:\n  - {{name: sdk, sha256: {key_hash}, requests_per_min: 2}}\n",
                     extra=["--served-model-name", "m"])
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

    def test_sdk_retries_a_429_after_its_retry_after(self):
        # One request at a time per key: while a long one runs, the next is refused 429 with
        # Retry-After; the SDK waits and retries, and gets through once the first is done.
        key_hash = subprocess.run([ARGS.bin, "serve", "--hash-key", "sk-one"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        model = os.path.join(ARGS.work, "llama15m.gguf")
        if not os.path.exists(model):
            subprocess.run([ARGS.bin, "make-model", "--arch", "llama", "--shape", "15m", "--type", "q8_0", "-o", model],
                           check=True, capture_output=True)
        srv = Server("sdk_retry", f"keys:\n  - {{name: one, sha256: {key_hash}, max_concurrent: 1}}\n",
                     extra=["--served-model-name", "m"], model=model)
        try:
            slow = openai.OpenAI(base_url=srv.url(), api_key="sk-one", max_retries=0, timeout=60)
            done = threading.Event()

            def long_one():
                slow.completions.create(model="m", prompt="Once", max_tokens=1200, extra_body={"ignore_eos": True})
                done.set()

            t = threading.Thread(target=long_one)
            t.start()
            time.sleep(0.3)
            with self.assertRaises(openai.RateLimitError):
                slow.completions.create(model="m", prompt="Hi", max_tokens=1)
            patient = openai.OpenAI(base_url=srv.url(), api_key="sk-one", max_retries=8, timeout=60)
            raw = patient.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=1)
            self.assertEqual(raw.http_response.status_code, 200)
            self.assertGreaterEqual(raw.retries_taken, 1)
            t.join()
            self.assertTrue(done.is_set())
        finally:
            self.assertEqual(srv.stop(), 0)


class OtherClients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("clients", "", extra=["--served-model-name", "stories260K"])

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def test_langchain_chat_openai_invoke_and_stream(self):
        from langchain_openai import ChatOpenAI
        llm = ChatOpenAI(model="stories260K", base_url=self.srv.url(), api_key="unused", max_tokens=8,
                         temperature=0, max_retries=0)
        msg = llm.invoke("Once upon a time")
        self.assertIsInstance(msg.content, str)
        self.assertTrue(msg.content)
        self.assertEqual(msg.response_metadata.get("model_name"), "stories260K")
        parts = [c.content for c in llm.stream("Once upon a time")]
        self.assertGreater(len(parts), 1)
        self.assertEqual("".join(parts), msg.content)

    def test_llm_cli_prompt_and_stream(self):
        # The `llm` CLI with tierserve registered as an OpenAI-compatible model
        # (extra-openai-models.yaml in its user directory).
        user_dir = os.path.join(ARGS.work, "llm-user")
        os.makedirs(user_dir, exist_ok=True)
        with open(os.path.join(user_dir, "extra-openai-models.yaml"), "w") as f:
            f.write(f"- model_id: tierserve\n  model_name: stories260K\n  api_base: \"{self.srv.url()}\"\n")
        env = {**os.environ, "LLM_USER_PATH": user_dir, "OPENAI_API_KEY": "unused"}
        llm_bin = os.path.join(os.path.dirname(sys.executable), "llm")
        for extra in ([], ["--no-stream"]):
            r = subprocess.run([llm_bin, "-m", "tierserve", *extra, "-o", "max_tokens", "8", "-o", "temperature", "0",
                                "Once upon a time"], capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.strip(), r.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
