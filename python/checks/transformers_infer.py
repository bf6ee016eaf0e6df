"""Inference with a Hugging Face transformers model built from its config (GPT-2 small, random
weights: nothing is downloaded) at varying batch sizes and sequence lengths, greedy generation
included, under the five allocators of allocators.py, each in its own process. The generated
tokens must be the same under every allocator; prints peak allocated / reserved and time per step.

    PYTHONPATH=python/src POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/transformers_infer.py OUT_DIR

Writes each poolkit run's snapshot to OUT_DIR/transformers-<run>.pickle. Exits 1 if any check
fails.
"""
import hashlib
import json
import os
import random
import statistics
import sys
import time

import allocators

STEPS = 40
NEW_TOKENS = 16


def shapes():
    """(batch, prompt length) of each step: a served model's traffic, every step a new shape."""
    draw = random.Random(7)
    return [(draw.choice((1, 2, 4, 8, 16)), draw.randint(16, 900)) for _ in range(STEPS)]


def infer(name, out_dir):
    allocators.install(name)
    import torch
    import transformers

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    config = transformers.GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    model = transformers.GPT2LMHeadModel(config).to(device="cuda", dtype=torch.bfloat16).eval()
    generator = torch.Generator(device="cuda").manual_seed(1)
    digest = hashlib.sha256()
    times = []
    with torch.no_grad():
        for batch, length in shapes():
            torch.cuda.synchronize()
            start = time.perf_counter()
            prompt = torch.randint(0, config.vocab_size, (batch, length), device="cuda", generator=generator)
            tokens = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                    do_sample=False, pad_token_id=0)
            digest.update(tokens.cpu().numpy().tobytes())
            times.append(time.perf_counter() - start)
    result = {"tokens": digest.hexdigest(), "ms_per_step": 1e3 * statistics.median(times[3:]), "figures": allocators.figures(name)}
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        poolkit.torch.dump_snapshot(os.path.join(out_dir, f"transformers-{allocators.snapshot_name(name)}.pickle"))
    print(json.dumps(result))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        infer(sys.argv[2], sys.argv[3])
        return 0
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    os.makedirs(out_dir, exist_ok=True)
    runs = {name: allocators.run_child(__file__, name, [out_dir]) for name in allocators.ALLOCATORS}
    sizes = sorted(shapes())
    print(f"GPT-2 small from its config, bf16, {STEPS} steps of greedy generation ({NEW_TOKENS} new tokens), "
          f"batch x prompt from {sizes[0]} to {sizes[-1]}\n")
    print(allocators.table(runs))
    failures = allocators.inconsistencies(runs)
    expected = runs["pytorch"]["tokens"]
    failures += [f"{name}: generated tokens differ from pytorch's" for name, run in runs.items() if run["tokens"] != expected]
    print("\n" + ("every check passed: the same tokens under every allocator, poolkit's stats agree with its snapshots"
                  if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
