#!/usr/bin/env python3
"""Writes a GPT-2-style decoder as a herd model file (docs/model-files.md): the zoo's
gpt-nano and gpt2 come from here, so their blocks cannot drift apart.

    python3 scripts/gpt_model.py gpt-nano > models/gpt-nano.json
    python3 scripts/gpt_model.py gpt2 > models/gpt2.json
    python3 scripts/gpt_model.py --name my-gpt --layers 6 --heads 8 --width 512 \\
        --context 512 --vocab 256 > my-gpt.json

Blocks are GPT-2's, pre-norm: x + attn(ln1(x)), then + proj(gelu(fc(ln2(.)))), a final
layer norm, and a head that reads the embedding's token table. Initialisation is
GPT-2's (and llm.c's): N(0, 0.02) for the embeddings (the embedding layer's own rule)
and every weight matrix, zero biases, and the two projections that feed each residual
add (attention's output, the MLP's proj) at 0.02 / sqrt(2 x layers), so the residual
stream's variance does not grow with depth. Under tensor parallelism the MLP is
Megatron-LM's pair: fc column-parallel, proj row-parallel ("parallel").
"""
import argparse
import json
import math
import sys

PRESETS = {
    # name: layers, heads, width, context, vocabulary, description
    "gpt-nano": (2, 2, 64, 64, 256, "GPT-2's decoder in small (2 layers, 2 heads, width 64, "
                 "context 64, bytes)"),
    "gpt2": (12, 12, 768, 1024, 50257, "GPT-2 small (Radford et al. 2019): 12 layers, 12 heads, "
             "width 768, context 1024, GPT-2's BPE vocabulary"),
}


def model(name, layers, heads, width, context, vocab, description):
    std, proj = 0.02, 0.02 / math.sqrt(2 * layers)
    out = [{"type": "embedding", "name": "embed", "vocab": vocab, "context": context,
            "out": width}]
    prev = "embed"
    for i in range(layers):
        h = "h%d" % i
        out += [
            {"type": "layernorm", "name": h + ".ln1", "input": prev},
            {"type": "attention", "name": h + ".attn", "heads": heads, "init_std": std,
             "proj_init_std": proj},
            {"type": "add", "name": h + ".res1", "inputs": [h + ".attn", prev]},
            {"type": "layernorm", "name": h + ".ln2"},
            {"type": "linear", "name": h + ".fc", "out": 4 * width, "per_position": True,
             "parallel": "column", "init_std": std},
            {"type": "gelu", "name": h + ".gelu"},
            {"type": "linear", "name": h + ".proj", "out": width, "per_position": True,
             "parallel": "row", "init_std": proj},
            {"type": "add", "name": h + ".out", "inputs": [h + ".proj", h + ".res1"]},
        ]
        prev = h + ".out"
    out += [{"type": "layernorm", "name": "ln_f"},
            {"type": "lm_head", "name": "head", "tie": "embed"}]
    head = ("// %s: %s\n"
            "// Written by scripts/gpt_model.py (edit that, not this file). Pre-norm blocks as GPT-2:\n"
            "// x + attn(ln1(x)), then + proj(gelu(fc(ln2(.)))); the head reads the embedding's\n"
            "// token table (\"tie\"). GPT-2's initialisation: N(0, 0.02), the residual projections\n"
            "// at 0.02 / sqrt(2 x %d layers). Input: 1 x T x 1 token ids (T <= %d) as floats;\n"
            "// output 1 x T x %d, a next-token prediction at every position. Under\n"
            "// --tensor-parallel T: attention split by heads, fc by columns, proj by rows, the\n"
            "// vocabulary by rows of the token table (T must divide the heads).\n"
            % (name, description, layers, context, vocab))
    lines = ",\n".join("    " + json.dumps(l) for l in out)
    return (head + "{\n  \"name\": %s,\n  \"description\": %s,\n  \"layers\": [\n%s\n  ]\n}\n"
            % (json.dumps(name), json.dumps("GPT-2 decoder, %d layers x %d heads, width %d, "
                                            "context %d, vocabulary %d"
                                            % (layers, heads, width, context, vocab)), lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("preset", nargs="?", choices=sorted(PRESETS))
    p.add_argument("--name")
    for k in ("layers", "heads", "width", "context", "vocab"):
        p.add_argument("--" + k, type=int)
    a = p.parse_args()
    if a.preset:
        layers, heads, width, context, vocab, desc = PRESETS[a.preset]
        name = a.preset
    else:
        if not all([a.name, a.layers, a.heads, a.width, a.context, a.vocab]):
            p.error("without a preset give --name, --layers, --heads, --width, --context, --vocab")
        layers, heads, width, context, vocab = a.layers, a.heads, a.width, a.context, a.vocab
        name, desc = a.name, "a GPT-2-style decoder"
    if width % heads:
        p.error("--width %d is not a multiple of --heads %d" % (width, heads))
    sys.stdout.write(model(name, layers, heads, width, context, vocab, desc))


if __name__ == "__main__":
    main()
