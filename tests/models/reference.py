#!/usr/bin/env python3
"""An independent reference for trawl-embed: all-MiniLM-L6-v2 in numpy.

Reads the same model folder (vocab.txt, config.json, model.safetensors), tokenizes
with its own BERT WordPiece (lower-cased, ASCII text only), runs the BERT forward
pass in float64, mean-pools and normalizes, and compares with the vectors the
Rust embedder printed (`--example vectors`), reporting the largest absolute
difference. A manual check, not part of CI:

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy
    printf 'A man is eating food.\\n...' > /tmp/texts.txt
    cargo run -p trawl-embed --example vectors < /tmp/texts.txt > /tmp/rust.jsonl
    /tmp/ref/bin/python tests/models/reference.py tests/models/all-minilm-l6-v2 /tmp/rust.jsonl
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

MAX_TOKENS = 256


def load_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            continue
        start, end = t["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return tensors


def tokenize(text, vocab):
    """BERT uncased: lower-case, split on spaces and punctuation, WordPiece."""
    words, word = [], ""
    for ch in text.lower():
        if ch.isspace():
            if word:
                words.append(word)
            word = ""
        elif not ch.isalnum():
            if word:
                words.append(word)
            words.append(ch)
            word = ""
        else:
            word += ch
    if word:
        words.append(word)
    ids = [vocab["[CLS]"]]
    for w in words:
        start, pieces = 0, []
        while start < len(w):
            end = len(w)
            while end > start:
                piece = w[start:end] if start == 0 else "##" + w[start:end]
                if piece in vocab:
                    pieces.append(vocab[piece])
                    break
                end -= 1
            else:
                pieces = [vocab["[UNK]"]]
                break
            start = end
        ids.extend(pieces)
    return ids[: MAX_TOKENS - 1] + [vocab["[SEP]"]]


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


erf = np.vectorize(math.erf)


def embed(ids, t, cfg):
    eps = cfg["layer_norm_eps"]
    heads = cfg["num_attention_heads"]
    n = len(ids)
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:n]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    d = x.shape[1] // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(name, h):
            return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        q = lin("attention.self.query", x).reshape(n, heads, d).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, d).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, d).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        ctx = (scores @ v).transpose(1, 0, 2).reshape(n, heads * d)
        a = lin("attention.output.dense", ctx)
        x = layer_norm(a + x, t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"], eps)
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        o = lin("output.dense", h)
        x = layer_norm(o + x, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"], eps)
    mean = x.mean(0)
    return mean / max(np.linalg.norm(mean), 1e-12)


def main():
    model, rust = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads((model / "config.json").read_text())
    vocab = {w: i for i, w in enumerate((model / "vocab.txt").read_text().splitlines())}
    tensors = load_safetensors(model / "model.safetensors")
    worst = 0.0
    for line in rust.read_text().splitlines():
        row = json.loads(line)
        ref = embed(tokenize(row["text"], vocab), tensors, cfg)
        diff = float(np.abs(ref - np.array(row["vector"], dtype=np.float64)).max())
        worst = max(worst, diff)
        print(f"{diff:.3e}  {len(tokenize(row['text'], vocab)):3d} tokens  {row['text'][:60]}")
    print(f"max abs difference: {worst:.3e}")


if __name__ == "__main__":
    main()
