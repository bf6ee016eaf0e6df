"""Real PyTorch programs of the shapes an allocator meets, each under every allocator of
allocators.py in a process of its own: peak reserved, peak allocated and the median time per step
(after two warm-up steps), and the program's results, which must equal those under PyTorch's
default allocator (fixed seeds, deterministic kernels).

    PYTHONPATH=python/src:python/checks POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so \\
        python3 python/checks/programs.py [PROGRAM ...] [--steps N] [--rounds R] [--lockstep [--cpus LIST]] [--json FILE]

Programs (default: all):
  resnet18_train      ResNet-18 training, batch 64 at 224x224
  multiscale_train    ResNet-18 training at a resolution drawn per step (160 to 320)
  varlen_train        a GPT-2-style transformer (6 layers, built from a config) trained on batch x
                      length drawn per step (4-16 x 64-512)
  moe_train           a Mixtral-style mixture-of-experts transformer (4 layers of 8 experts, each
                      token routed to 2, built from a config) trained as varlen_train: the tokens
                      each expert gets, and so its tensors' sizes, change with every layer and step
  generate            the same GPT-2 model generating 32-96 new tokens for a batch and prompt drawn
                      per call: key/value caches that grow a token at a time
  alloc_free          no model: 10,000 torch.empty calls per step, sizes of 512 B to 8 MiB, 16
                      tensors alive: the allocator's own cost per call through PyTorch, which a
                      model's step time hides among its kernels (ms per step / 10 = us per pair)

Step times drift between runs of the same script (by up to a quarter on the H200), so with
--rounds R every allocator runs R times, the order rotated each round, and each run's step time
is also taken relative to the PyTorch run of its round: the table gives the median of those paired
ratios (the figure to compare with "within 2% of PyTorch") and their range, and the median over
every round and step of a step's time over the same step's under PyTorch (the same drawn shapes)
with a 95% interval (paired_steps): a figure whose interval holds 1 is within noise.
With --lockstep a round runs every allocator's process at once and interleaves their steps one
by one, each alone on the GPU while the others wait: a drift over the round then reaches every
allocator alike, and a step's pair lies seconds apart instead of a whole run. --cpus (such as
2-5) runs every child on those CPUs alone, so that every allocator's steps run on the same cores
(elsewhere the scheduler places each process where it will, and a host-bound step's time follows).

Exits 1 when a program's results differ from PyTorch's default allocator's, a child fails, or
poolkit's statistics disagree with its snapshot. A program whose library is missing
(torchvision, transformers) is reported as skipped.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import allocators


def deterministic():
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


# In a child run with --lockstep: the child's side of allocators.lockstep_round, a step a program
# step, its figure the step's milliseconds.
_lockstep = False


def _timed(step, steps, device_allocations):
    """Runs step(i) for each i; returns its results, the median milliseconds after two steps,
    every step's milliseconds and device_allocations() after each step (outside its time)."""
    import torch
    results, times, allocs = [], [], []
    if _lockstep:
        torch.cuda.synchronize()
        allocators.lockstep_ready()
    for i in range(steps):
        if _lockstep:
            allocators.lockstep_go()
        torch.cuda.synchronize()
        start = time.perf_counter()
        results.append(step(i))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        allocs.append(device_allocations())
        if _lockstep:
            allocators.lockstep_step(1e3 * times[-1])
    return results, 1e3 * statistics.median(times[2:] or times), [round(1e3 * t, 3) for t in times], allocs


def _resnet_train(sizes):
    import torch
    import torchvision
    model = torchvision.models.resnet18(num_classes=10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator(device="cuda").manual_seed(1)
    draw = random.Random(2)

    def step(_):
        size = draw.choice(sizes)
        images = torch.randn(64, 3, size, size, device="cuda", generator=generator)
        labels = torch.randint(0, 10, (64,), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _gpt():
    import transformers
    config = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, n_positions=1024, vocab_size=16384)
    return transformers.GPT2LMHeadModel(config).cuda()


def resnet18_train():
    return _resnet_train([224])


def multiscale_train():
    return _resnet_train([160, 192, 224, 256, 288, 320])


def _mixtral():
    import transformers
    config = transformers.MixtralConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                                        num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2,
                                        max_position_embeddings=1024, vocab_size=16384)
    return transformers.MixtralForCausalLM(config).cuda()


def _lm_train(model):
    """A language model's training step on batch x length drawn per step, in bf16 autocast."""
    import torch
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(1)
    draw = random.Random(2)

    def step(_):
        batch, length = draw.choice([4, 8, 16]), draw.randrange(64, 513, 32)
        tokens = torch.randint(0, 16384, (batch, length), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def varlen_train():
    return _lm_train(_gpt())


def moe_train():
    return _lm_train(_mixtral())


def generate():
    import torch
    model = _gpt().eval()
    generator = torch.Generator(device="cuda").manual_seed(1)
    draw = random.Random(2)

    @torch.no_grad()
    def step(_):
        batch, prompt, new = draw.choice([1, 4, 8, 16]), draw.randrange(16, 257), draw.randrange(32, 97)
        tokens = torch.randint(0, 16384, (batch, prompt), device="cuda", generator=generator)
        out = model.generate(tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, pad_token_id=0)
        return int(out[:, prompt:].sum().item())

    return step


def alloc_free_sizes():
    """alloc_free's 10,000 request sizes, 512 B to 8 MiB (allocator_calls.py times the same)."""
    draw = random.Random(2)
    return [draw.choice([512, 4096, 65536, 1 << 20, 8 << 20]) + 512 * draw.randrange(8) for _ in range(10000)]


def alloc_free():
    import torch
    sizes = alloc_free_sizes()

    def step(_):
        alive = [None] * 16
        for i, size in enumerate(sizes):
            alive[i % 16] = torch.empty(size, dtype=torch.uint8, device="cuda")
        return len(sizes)

    return step


# Each builds its program on the GPU and returns its step: step(i) runs step i and returns its result.
PROGRAMS = {f.__name__: f for f in (resnet18_train, multiscale_train, varlen_train, moe_train, generate, alloc_free)}
NEEDS = {"resnet18_train": "torchvision", "multiscale_train": "torchvision", "varlen_train": "transformers",
         "moe_train": "transformers",
         "generate": "transformers", "alloc_free": "torch"}


def paired(rounds, reference="pytorch"):
    """rounds: one {allocator: ms_per_step} per round. For each allocator, the median over rounds
    of its step time over the reference's in the same round, and the least and most of them."""
    figures = {}
    for name in rounds[0]:
        ratios = sorted(r[name] / r[reference] for r in rounds)
        figures[name] = (statistics.median(ratios), ratios[0], ratios[-1])
    return figures


def paired_steps(rounds, reference="pytorch", draws=2000, seed=0):
    """rounds: one {allocator: [ms of each step]} per round. For each allocator, the median over
    rounds and steps (the first two skipped) of a step's time over the same step's under the
    reference in the same round (the same shapes, so a drawn size's own cost cancels out), and a
    95% interval of that median: (median, low, high). The interval is a bootstrap that draws
    rounds, then steps within each drawn round, so that a round's own drift widens it as a
    step's noise does: a figure is within noise of the reference where its interval holds 1."""
    figures = {}
    draw = random.Random(seed)
    for name in rounds[0]:
        per_round = [[mine / theirs for mine, theirs in zip(r[name][2:], r[reference][2:])] for r in rounds]
        per_round = [ratios for ratios in per_round if ratios]
        if not per_round:
            continue
        medians = sorted(statistics.median(x for ratios in (draw.choice(per_round) for _ in per_round)
                                            for x in draw.choices(ratios, k=len(ratios)))
                         for _ in range(draws))
        figures[name] = (statistics.median(x for ratios in per_round for x in ratios),
                         medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1])
    return figures


def allocations_per_step(runs, steps):
    """runs: {allocator: a child's output}. The allocations each allocator served per step (warm-up
    steps included). What bounds an allocator's host time per step is this times its cost per call
    (poolkit-bench-c_api_cuda times poolkit's allocate + free through the C ABI)."""
    return {name: run["figures"].get("allocations", 0) / max(steps, 1) for name, run in runs.items()}


def lockstep_round(script, program, names, steps, round_index=0, cpus=None):
    """One round of `program` with every allocator's child alive at once, the steps interleaved
    (allocators.lockstep_round), on `cpus` where given. Returns {allocator: the child's output}, as
    run_child's."""
    return allocators.lockstep_round(script, names, [program, str(steps), "--lockstep"], steps, round_index, cpus)


def child(name, program, steps, lockstep=False):
    global _lockstep
    _lockstep = lockstep
    allocators.install(name)
    deterministic()
    results, ms_per_step, step_ms, step_allocs = _timed(PROGRAMS[program](), steps, lambda: allocators.device_allocations(name))
    print(json.dumps({"losses": results, "ms_per_step": ms_per_step, "step_ms": step_ms, "step_allocs": step_allocs,
                      "figures": allocators.figures(name)}))


def write_json(path, everything):
    """Every round so far into `path` (none: nothing), replacing what an earlier call wrote."""
    if path:
        with open(path, "w") as f:
            json.dump(everything, f, indent=1)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), lockstep=sys.argv[5:] == ["--lockstep"])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="*", default=[], help=f"of {', '.join(PROGRAMS)} (default: all)")
    parser.add_argument("--allocators", help="comma-separated names of allocators.py's ALLOCATORS or CONTROLS (default: every allocator but the run without hooks)")
    parser.add_argument("--steps", type=int, default=24, help="steps per program (default 24; the median skips two)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each allocator, interleaved (default 1)")
    parser.add_argument("--lockstep", action="store_true",
                        help="run a round's allocators at once, their steps interleaved one by one (lockstep_round)")
    parser.add_argument("--cpus", help="with --lockstep: run every child on these CPUs alone (such as 2-5), so that a "
                                       "step's time does not depend on which cores its process was given")
    parser.add_argument("--json", help="also write every run's figures here")
    args = parser.parse_args()
    cpus = None
    if args.cpus:
        if not args.lockstep:
            parser.error("--cpus needs --lockstep (children that run at once would contend for them)")
        try:
            cpus = allocators.cpu_set(args.cpus)
        except ValueError as error:
            parser.error(str(error))
    names, unknown = allocators.chosen(args.allocators)
    unknown = [p for p in args.programs if p not in PROGRAMS] + unknown
    if unknown or "pytorch" not in names:
        parser.error(f"unknown: {', '.join(unknown)}" if unknown else "the pytorch run is the reference: keep it")
    failures, everything = [], {}
    for program in args.programs or list(PROGRAMS):
        try:
            __import__(NEEDS[program])
        except ImportError:
            print(f"{program}: skipped: {NEEDS[program]} is not installed\n")
            continue
        rounds = everything[program] = []
        for index in range(max(1, args.rounds)):
            if args.lockstep:
                rounds.append(lockstep_round(__file__, program, names, args.steps, index, cpus))
            else:
                runs = {name: allocators.run_child(__file__, name, [program, str(args.steps)]) for name in allocators.rotated(names, index)}
                rounds.append({name: runs[name] for name in names})
            write_json(args.json, everything)  # each round as it ends: a run stopped by a time limit keeps those before
        print(f"{program}, {args.steps} steps, {len(rounds)} round(s); the first round's figures:")
        print(allocators.table(rounds[0]))
        print("allocations per step: " + ", ".join(f"{n} {v:,.0f}" for n, v in allocations_per_step(rounds[0], args.steps).items()))
        if len(rounds) > 1:
            print("step time / PyTorch's in the same round: median (least - most); median of each step's / the same step's"
                  " (95% interval: within noise where it holds 1)")
            by_step = paired_steps([{n: r[n]["step_ms"] for n in names} for r in rounds])
            for name, (median, least, most) in paired([{n: r[n]["ms_per_step"] for n in names} for r in rounds]).items():
                step_median, low, high = by_step.get(name, (float("nan"),) * 3)
                print(f"  {name:30} {median:6.3f} ({least:.3f} - {most:.3f}); {step_median:6.3f} ({low:.3f} - {high:.3f})")
        print()
        expected = rounds[0]["pytorch"]["losses"]
        for runs in rounds:
            failures += [f"{program}: {name}: results differ from pytorch's" for name, run in runs.items() if run["losses"] != expected]
            failures += [f"{program}: {line}" for line in allocators.inconsistencies(runs)]
    for failure in failures:
        print("FAILED:", failure)
    print("OK" if not failures else f"FAILED: {len(failures)} checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
