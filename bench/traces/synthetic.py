#!/usr/bin/env python3
"""Synthetic allocation traces in the bundled traces' format (RMM's CSV, gzip), one per shape of
real GPU program that the bundled captures do not cover well. They are not captures: sizes follow
the arithmetic of each model family (activations grow with batch x length, attention with
length squared, caches grow a token at a time), with fixed seeds, so every run writes the same
files. Use them to check that a policy holds beyond the three captured workloads:

    python3 bench/traces/synthetic.py OUT_DIR          # every family
    poolkit-replay OUT_DIR/*.csv.gz
    python3 bench/traces/synthetic.py OUT_DIR --seed 1 --varlen-steps 48   # others of the same shapes

--seed S draws each family from other seeds (NAME_sS.csv.gz), so that a policy is checked on more
than one draw of each shape; --varlen-steps N sets varlen_training's steps (16).

Families:
  generation         decoder inference with per-layer key/value caches grown by concatenation
                     (a new, one-token-longer block, then the old one freed), batch and prompt
                     length drawn per request
  varlen_training    transformer training with batch x length drawn per step: activations kept
                     for the backward pass, attention scores quadratic in the length, gradients
  multiscale_vision  CNN training on batches of a resolution drawn per step
  kv_serving         a server that keeps many requests' caches live at once, requests of random
                     lengths arriving and finishing at different times
  pipeline           inference split into four stages, one per stream, microbatches of drawn
                     batch x length passing down: each stage frees its input, made on the stream
                     before (a cross-stream free)
  sharded_training   sharded data-parallel training (FSDP's shape): each layer's parameters
                     gathered on a side stream one layer ahead and dropped by the compute stream,
                     gradients reduced on another stream that frees their full-size inputs, the
                     batch copied in on a third
  moe_training       mixture-of-experts transformer training: each layer routes every token to 2 of 8
                     experts, as unevenly as a router does, so the experts' activations take sizes
                     that differ in every layer and step; batch x length drawn per step
  fine_moe_training  the same with fine-grained experts (each token to 8 of 64 small experts, the
                     router's load more uneven): most experts' activations are blocks under 1 MiB,
                     hundreds of them kept for the backward pass
  checkpointed_training
                     transformer training with activation checkpointing: the forward pass keeps
                     only each layer's input, and the backward pass runs each layer's forward
                     again before its own; batch x length drawn per step
  diffusion_inference
                     a latent diffusion model's image generation: a U-Net's down path keeps its
                     skip activations for the up path, run for every denoising step of a request
                     at the request's resolution (drawn per request, the batch doubled for
                     classifier-free guidance), then the decoder to pixels
"""
import argparse
import gzip
import io
import os
import random

MiB = 1 << 20


class Trace:
    def __init__(self, path):
        # No name and mtime 0 in the gzip header: the same trace makes the same bytes.
        self.raw = open(path, "wb")
        self.file = io.TextIOWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0), encoding="ascii", newline="")
        self.file.write("Thread,Time,Action,Pointer,Size,Stream\n")
        self.events = 0
        self.next_id = 0
        self.free_ids = []

    def _write(self, action, ident, size, stream):
        # Time only orders the events; one microsecond apart.
        us = self.events
        stamp = f"{us // 3_600_000_000:02d}:{us // 60_000_000 % 60:02d}:{us // 1_000_000 % 60:02d}.{us % 1_000_000:06d}"
        self.file.write(f"0,{stamp},{action},0x{ident:x},{size},{stream}\n")
        self.events += 1

    def alloc(self, size, stream=0):
        """A block of `size` bytes made on `stream` (a handle; 0 is the default stream)."""
        size = max(512, (int(size) + 511) // 512 * 512)  # the caching allocator's rounding, as in the captures
        ident = self.free_ids.pop() if self.free_ids else self._new_id()
        self._write("allocate", ident, size, stream)
        return (ident, size, stream)

    def _new_id(self):
        self.next_id += 1
        return self.next_id

    def free(self, block, stream=None):
        """Frees `block` on `stream`, by default the one it was made on; another stream is a
        cross-stream free, as when a consumer stream drops what a producer stream made."""
        self._write("free", block[0], block[1], block[2] if stream is None else stream)
        self.free_ids.append(block[0])

    def free_all(self, blocks, stream=None):
        for block in blocks:
            self.free(block, stream)

    def close(self):
        self.file.close()
        self.raw.close()


def write(family, path, seed="", varlen_steps=16):
    """Writes the named family's trace to path, drawn from the family's name and `seed`; returns
    its event count."""
    trace = Trace(path)
    rng = random.Random(family + seed)
    if family == "varlen_training":
        varlen_training(trace, rng, varlen_steps)
    else:
        FAMILIES[family](trace, rng)
    trace.close()
    return trace.events


def generation(t, rng):
    layers, hidden, heads, vocab = 24, 2048, 16, 50257
    weights = [t.alloc(rng.choice([8, 16, 32, 50]) * MiB) for _ in range(80)]
    for _ in range(10):
        batch, prompt, new_tokens = rng.choice([1, 2, 4, 8]), rng.randint(32, 512), rng.randint(32, 256)
        kv = [t.alloc(batch * prompt * hidden * 2) for _ in range(2 * layers)]
        for length in range(prompt, prompt + new_tokens):
            for layer in range(layers):
                h, q = t.alloc(batch * hidden * 2), t.alloc(batch * hidden * 2)
                scores = t.alloc(batch * heads * (length + 1) * 4)
                for i in (2 * layer, 2 * layer + 1):
                    grown = t.alloc(batch * (length + 1) * hidden * 2)
                    t.free(kv[i])
                    kv[i] = grown
                t.free_all((scores, q, h))
            logits = t.alloc(batch * vocab * 4)
            t.free(logits)
        t.free_all(kv)
    t.free_all(weights)


def varlen_training(t, rng, steps=16):
    layers, hidden, heads, vocab = 12, 1024, 16, 32000
    params = [t.alloc(hidden * hidden * 4 * rng.choice([1, 3, 4])) for _ in range(layers * 4)]
    adam = [t.alloc(p[1]) for p in params for _ in range(2)]
    for _ in range(steps):
        batch, length = rng.choice([4, 8, 16]), rng.choice(range(128, 1025, 64))
        tokens = batch * length
        saved = []
        for _ in range(layers):
            saved.append(t.alloc(tokens * hidden * 2))
            scores = t.alloc(batch * heads * length * length * 2)
            probs = t.alloc(batch * heads * length * length * 2)
            t.free(scores)
            saved.append(probs)
            saved.append(t.alloc(tokens * hidden * 4 * 2))
            tmp = t.alloc(tokens * hidden * 2)
            t.free(tmp)
        logits = t.alloc(tokens * vocab * 2)
        grad_logits = t.alloc(tokens * vocab * 2)
        t.free(logits)
        grads = []
        for i in reversed(range(len(saved))):
            g = t.alloc(saved[i][1])
            t.free(saved[i])
            if i % 3 == 0:
                grads.append(t.alloc(params[i // 3 % len(params)][1]))
            t.free(g)
        t.free(grad_logits)
        t.free_all(grads)
    t.free_all(params + adam)


def multiscale_vision(t, rng):
    params = [t.alloc(rng.choice([1, 2, 4, 9]) * MiB) for _ in range(60)]
    for _ in range(150):
        scale = rng.choice([224, 256, 288, 320, 384, 448])
        acts = []
        for _ in range(40):
            acts.append(t.alloc(64 * scale * scale * rng.choice([1, 2, 4])))
            t.free(t.alloc(rng.choice([512, 8192, MiB])))
        grads = []
        for layer in reversed(range(40)):
            g = t.alloc(acts[layer][1])
            t.free(acts[layer])
            grads.append(t.alloc(rng.choice([1, 2, 4]) * MiB))
            t.free(g)
        t.free_all(grads)
    t.free_all(params)


def kv_serving(t, rng):
    layers, hidden = 16, 4096
    weights = [t.alloc(rng.choice([32, 64, 128]) * MiB) for _ in range(40)]
    live = {}  # request -> (caches, tokens left)
    for step in range(3000):
        if len(live) < 12 and rng.random() < 0.3:
            prompt = rng.randint(16, 1024)
            live[step] = ([t.alloc(prompt * hidden * 2 * 2) for _ in range(layers)], prompt, rng.randint(16, 400))
        act = [t.alloc(max(1, len(live)) * hidden * 2 * rng.choice([1, 4])) for _ in range(4)]
        t.free_all(act)
        for request in list(live):
            caches, length, left = live[request]
            if left == 0:
                t.free_all(caches)
                del live[request]
            elif rng.random() < 0.25:  # grows in pages of 16 tokens
                grown = []
                for c in caches:
                    grown.append(t.alloc((length + 16) * hidden * 2 * 2))
                    t.free(c)
                live[request] = (grown, length + 16, max(0, left - 16))
            else:
                live[request] = (caches, length, max(0, left - 1))
    for caches, _, _ in live.values():
        t.free_all(caches)
    t.free_all(weights)


# Side streams' handles (0 is the default stream).
SIDE_STREAMS = (0x1000, 0x2000, 0x3000)


def pipeline(t, rng):
    layers_per_stage, hidden, heads = 4, 4096, 32
    streams = (0,) + SIDE_STREAMS  # a stage on each
    weights = [t.alloc(rng.choice([64, 128, 256]) * MiB, s) for s in streams for _ in range(3 * layers_per_stage)]
    microbatches = [None] * 200
    for m in range(len(microbatches)):
        length = rng.choice(range(64, 2049, 64))
        microbatches[m] = (rng.randint(1, max(1, 8192 // length)), length)
    handoff = [None] * len(streams)  # stage k's output, waiting for stage k + 1
    for tick in range(len(microbatches) + len(streams) - 1):
        for k in reversed(range(len(streams))):  # the last stage first: it takes the previous tick's handoff
            m = tick - k
            if not 0 <= m < len(microbatches):
                continue
            batch, length = microbatches[m]
            tokens, s = batch * length, streams[k]
            x = t.alloc(tokens * 8, s) if k == 0 else handoff[k - 1]  # stage 0's input: the token ids
            for _ in range(layers_per_stage):
                qkv = t.alloc(tokens * hidden * 2 * 3, s)
                scores = t.alloc(batch * heads * length * length * 2, s)
                t.free(scores)
                attended = t.alloc(tokens * hidden * 2, s)
                t.free(qkv)
                mlp = t.alloc(tokens * hidden * 4 * 2, s)
                y = t.alloc(tokens * hidden * 2, s)
                t.free_all((mlp, attended))
                t.free(x, s)  # the input, made on the stage before when it is the handoff
                x = y
            if k + 1 < len(streams):
                handoff[k] = x
            else:
                logits = t.alloc(batch * 32000 * 2, s)
                t.free_all((logits, x))
    t.free_all(weights)


def sharded_training(t, rng, steps=12):
    layers, hidden, vocab, world = 16, 2048, 32000, 8
    gather_stream, reduce_stream, copy_stream = SIDE_STREAMS
    sizes = [hidden * hidden * 2 * rng.choice([8, 12, 16]) for _ in range(layers)]  # a layer's bf16 parameters
    shards = [t.alloc(size // world * 2) for size in sizes]  # fp32 shard of its parameters
    adam = [t.alloc(size // world * 2) for size in sizes for _ in range(2)]
    for _ in range(steps):
        batch, length = rng.choice([4, 8, 16]), rng.choice(range(128, 1025, 64))
        tokens = batch * length
        inputs = t.alloc(tokens * 8, copy_stream)
        gathered = {}

        def gather(i):
            if 0 <= i < layers:
                gathered[i] = t.alloc(sizes[i], gather_stream)

        gather(0)
        saved = []
        for i in range(layers):
            gather(i + 1)  # the next layer's parameters gathered while this one computes
            saved.append(t.alloc(tokens * hidden * 2))
            hidden_mlp = t.alloc(tokens * hidden * 4 * 2)
            saved.append(t.alloc(tokens * hidden * 2))
            t.free(hidden_mlp)
            t.free(gathered.pop(i), 0)  # dropped by the compute stream once used
        logits = t.alloc(tokens * vocab * 2)
        grad_logits = t.alloc(tokens * vocab * 2)
        t.free(logits)
        gather(layers - 1)
        reduced = []
        for i in reversed(range(layers)):
            gather(i - 1)
            grad = t.alloc(sizes[i])
            upstream = t.alloc(tokens * hidden * 2)
            t.free_all((saved.pop(), saved.pop()))
            t.free(gathered.pop(i), 0)
            reduced.append(t.alloc(sizes[i] // world * 2, reduce_stream))
            t.free(grad, reduce_stream)  # the reduce-scatter's input, dropped on its stream
            t.free(upstream)
        t.free(grad_logits)
        t.free_all(reduced, 0)  # the optimizer step consumed the reduced gradients
        t.free(inputs, 0)
    t.free_all(shards + adam)


def moe_training(t, rng):
    _moe(t, rng, steps=16, layers=8, hidden=2048, ffn=4096, experts=8, top_k=2, skew=2.0)


def fine_moe_training(t, rng):
    _moe(t, rng, steps=8, layers=8, hidden=1024, ffn=512, experts=64, top_k=8, skew=0.7)


def _moe(t, rng, steps, layers, hidden, ffn, experts, top_k, skew):
    """A mixture-of-experts transformer's training steps: each token goes to top_k of `experts`,
    each expert's share of the tokens drawn per layer and step (a gamma of shape `skew` per expert:
    the smaller, the more uneven)."""
    heads, vocab = 16, 32000
    attention = [t.alloc(hidden * hidden * 4 * 2) for _ in range(layers)]  # bf16 q, k, v and o
    expert_size = hidden * ffn * 3 * 2  # an expert's gate, up and down projections
    params = attention + [t.alloc(expert_size) for _ in range(layers * experts)]
    for _ in range(steps):
        batch, length = rng.choice([4, 8, 16]), rng.choice(range(128, 1025, 64))
        tokens = batch * length
        saved = []  # per layer, what its backward pass reads
        for _ in range(layers):
            kept = [t.alloc(tokens * hidden * 2), t.alloc(tokens * hidden * 3 * 2)]  # the input, q k v
            t.free(t.alloc(batch * heads * length * length * 2))  # attention scores
            kept.append(t.alloc(tokens * hidden * 2))  # attention's output
            kept.append(t.alloc(tokens * experts * 4))  # the router's logits
            # The router's load differs by layer and step; each expert gets its share of the tokens.
            load = [rng.gammavariate(skew, 1.0) for _ in range(experts)]
            counts = [int(tokens * top_k * w / sum(load)) for w in load]
            kept.append(t.alloc(tokens * top_k * hidden * 2))  # the tokens sorted by expert
            outputs = []
            for count in counts:
                if count:
                    kept += [t.alloc(count * ffn * 2), t.alloc(count * ffn * 2)]  # gate and up, activated
                    outputs.append(t.alloc(count * hidden * 2))
            kept.append(t.alloc(tokens * hidden * 2))  # the experts' outputs, weighted and combined
            t.free_all(outputs)
            saved.append(kept)
        logits = t.alloc(tokens * vocab * 2)
        grad_logits = t.alloc(tokens * vocab * 2)
        t.free(logits)
        grads = []
        for kept in reversed(saved):
            for block in reversed(kept):
                g = t.alloc(block[1])
                t.free(block)
                t.free(g)
            grads.append(t.alloc(hidden * hidden * 4 * 2))
            grads += [t.alloc(expert_size) for _ in range(experts)]
        t.free(grad_logits)
        t.free_all(grads)  # the optimizer step took them
    t.free_all(params)


def checkpointed_training(t, rng, steps=12):
    layers, hidden, heads, vocab = 24, 2048, 16, 32000
    params = [t.alloc(hidden * hidden * 2 * n) for _ in range(layers) for n in (4, 8)]  # bf16 attention, MLP
    master = [t.alloc(p[1] * 2) for p in params for _ in range(3)]  # fp32 copy and Adam's two moments
    grads = [t.alloc(p[1]) for p in params]  # gradients accumulate here, kept across steps

    def layer_forward(batch, length, keep):
        """One layer's forward pass: its output, and what its backward pass reads where `keep`
        (else that is freed before it returns)."""
        tokens = batch * length
        qkv = t.alloc(tokens * hidden * 3 * 2)
        scores = t.alloc(batch * heads * length * length * 2)
        probs = t.alloc(scores[1])
        t.free(scores)
        attended = t.alloc(tokens * hidden * 2)
        mlp = t.alloc(tokens * hidden * 4 * 2)
        activated = t.alloc(mlp[1])
        out = t.alloc(tokens * hidden * 2)
        inner = [qkv, probs, attended, mlp, activated]
        if not keep:
            t.free_all(inner)
            return out, []
        return out, inner

    for _ in range(steps):
        batch, length = rng.choice([2, 4, 8]), rng.choice(range(256, 2049, 128))
        tokens = batch * length
        checkpoints = [t.alloc(tokens * hidden * 2)]  # the embedded input
        for _ in range(layers):
            out, _ = layer_forward(batch, length, keep=False)
            checkpoints.append(out)
        logits = t.alloc(tokens * vocab * 2)
        grad = t.alloc(tokens * hidden * 2)  # the gradient flowing back, after the loss
        t.free(logits)
        t.free(checkpoints.pop())
        for _ in reversed(range(layers)):
            out, inner = layer_forward(batch, length, keep=True)  # recomputed from its checkpoint
            t.free(out)
            for block in reversed(inner):
                g = t.alloc(block[1])
                t.free(block)
                t.free(g)
            upstream = t.alloc(tokens * hidden * 2)
            t.free(grad)
            t.free(checkpoints.pop())
            grad = upstream
        t.free(grad)
        for p in params:  # the optimizer's fused steps over chunks of parameters: fp32 temporaries
            t.free(t.alloc(p[1] * 2))
    t.free_all(grads + master + params)


def diffusion_inference(t, rng, requests=12):
    channels = (320, 640, 1280, 1280)  # per level of the U-Net, each half the resolution of the one above
    weights = [t.alloc(rng.choice([2, 6, 13, 26]) * MiB) for _ in range(400)]  # the models' fp16 weights
    for _ in range(requests):
        height, width = rng.choice([(512, 512), (768, 768), (1024, 1024), (768, 1024), (1024, 576), (640, 896)])
        batch = rng.choice([1, 2, 4]) * 2  # classifier-free guidance: conditioned and not, in one batch
        steps = rng.choice([20, 25, 30, 50])
        latent = t.alloc(batch // 2 * 4 * (height // 8) * (width // 8) * 4)
        text = t.alloc(batch * 77 * 2048 * 2)
        for _ in range(steps):
            h, w = height // 8, width // 8
            x = t.alloc(batch * channels[0] * h * w * 2)  # conv_in's output
            skips = [x]  # every down block's output is kept for the up path: they are not freed here
            for level, c in enumerate(channels):
                for _ in range(2):
                    t.free(t.alloc(batch * c * h * w * 2))  # the norm's output
                    if level > 0:  # self-attention over h x w tokens, its scores quadratic; cross-attention to the text
                        t.free(t.alloc(batch * 8 * (h * w) ** 2 * 2))
                        t.free(t.alloc(batch * 8 * h * w * 77 * 2))
                    x = t.alloc(batch * c * h * w * 2)
                    skips.append(x)
                if level + 1 < len(channels):
                    h, w = h // 2, w // 2
                    x = t.alloc(batch * c * h * w * 2)  # downsampled
                    skips.append(x)
            x = t.alloc(x[1])  # the middle block's output
            for level, c in reversed(list(enumerate(channels))):  # up: each block joins a skip
                for _ in range(3):
                    skip = skips.pop()
                    joined = t.alloc(x[1] + skip[1])
                    t.free_all((skip, x))
                    x = t.alloc(batch * c * h * w * 2)
                    t.free(joined)
                if level > 0:
                    h, w = h * 2, w * 2
                    up = t.alloc(batch * c * h * w * 2)
                    t.free(x)
                    x = up
            eps = t.alloc(batch * 4 * h * w * 2)
            t.free(x)
            t.free(eps)  # guidance and the scheduler's step update the latent in place
        pixels = t.alloc(batch // 2 * 3 * height * width * 2)
        for c, f in ((512, 8), (512, 4), (256, 2), (128, 1)):  # the decoder, up to full resolution
            a = t.alloc(batch // 2 * c * (height // f) * (width // f) * 2)
            t.free(t.alloc(a[1]))
            t.free(a)
        t.free_all((pixels, text, latent))
    t.free_all(weights)


FAMILIES = {f.__name__: f for f in (generation, varlen_training, multiscale_vision, kv_serving, pipeline, sharded_training,
                                    moe_training, fine_moe_training, checkpointed_training, diffusion_inference)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="folder to write NAME.csv.gz into (made if missing)")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="only these (repeatable); default: all")
    parser.add_argument("--seed", default="", help="draw from other seeds: NAME_sSEED.csv.gz (default: the bundled draws)")
    parser.add_argument("--varlen-steps", type=int, default=16, help="training steps of varlen_training (default 16)")
    args = parser.parse_args()
    if args.varlen_steps < 1:
        parser.error("--varlen-steps must be at least 1")
    os.makedirs(args.out, exist_ok=True)
    for name in args.family or list(FAMILIES):
        path = os.path.join(args.out, f"{name}_s{args.seed}.csv.gz" if args.seed else f"{name}.csv.gz")
        print(f"{path}: {write(name, path, args.seed, args.varlen_steps)} events")


if __name__ == "__main__":
    main()
