"""Issue 5's proof in a real model: train a small random-weight Llama twice, unpatched and with
kernelkit.patch, from the same seed on the same data, and compare loss curves, step time and
peak memory. Writes JSON to --out.

    python3 bench/llama_train.py --out llama.json                     # one GPU
    torchrun --nproc-per-node 2 bench/llama_train.py --out llama.json  # DDP on two GPUs
    python3 bench/llama_train.py --accumulate 2 --out llama-accum.json # as transformers' Trainer accumulates

Needs the CUDA kernels of the LLM ops to be registered (kernelkit.patch refuses otherwise).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import torch
import transformers

import kernelkit


def build(seed: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=2048,
        attn_implementation="sdpa",
    )
    return transformers.LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)


def batch_of_sequences(batch: int, seq: int, gen: torch.Generator, vocab: int = 32000) -> torch.Tensor:
    """Learnable synthetic text: each row counts up from a random token by a random stride (1-64), so
    the next token follows from the context and the loss falls well below uniform guessing."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 65, (batch, 1), generator=gen)
    return (start + stride * torch.arange(seq)) % vocab


def train(patched: bool, args, device, rank: int, world: int) -> dict:
    gc.collect()  # the previous run's model must not count towards this run's peak memory
    torch.cuda.empty_cache()
    model = build(args.seed, device)
    keep = {part: False for part in args.keep}
    report = str(kernelkit.patch(model, **keep)) if patched else "unpatched"
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1000 * rank)
    losses, times = [], []
    torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.steps):
        micro = [batch_of_sequences(args.batch, args.seq, gen).to(device) for _ in range(args.accumulate)]
        # Gradient accumulation as transformers' Trainer does it: each micro-batch's loss is its sum over the
        # tokens of the whole step (num_items_in_batch, a device tensor), so the step's loss is their sum.
        items = {}
        if args.accumulate > 1:
            items["num_items_in_batch"] = torch.tensor(sum(ids[:, 1:].numel() for ids in micro), device=device)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for ids in micro:
            part = model(input_ids=ids, labels=ids, **items).loss
            part.backward()
            loss = loss + part.detach()
        opt.step()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return {
        "patch_report": report,
        "losses": losses,
        "median_step_ms": statistics.median(times[5:]) * 1e3,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--accumulate", type=int, default=1, help="micro-batches per step, each loss divided by the step's tokens"
    )
    ap.add_argument(
        "--keep",
        nargs="*",
        default=[],
        choices=["rms_norm", "swiglu", "rope", "cross_entropy"],
        help="parts kernelkit.patch leaves to torch (to find where two runs part)",
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=0.01,
        help="max mean |loss difference| over the last 20 steps, relative to the loss: two bf16 runs drift "
        "apart by rounding alone (the torch_repeat run reports how far two unpatched runs drift apart)",
    )
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    # A second unpatched run measures how far two torch runs drift apart on their own (bf16 rounding,
    # nondeterministic kernels): the yardstick for the patched run.
    names = ("torch", "kernelkit", "torch_repeat")
    runs = {name: train(name == "kernelkit", args, device, rank, world) for name in names}

    def diffs(a: str, b: str) -> list:
        return [abs(x - y) for x, y in zip(runs[a]["losses"], runs[b]["losses"])]

    patched, floor = diffs("torch", "kernelkit"), diffs("torch", "torch_repeat")
    result = {
        "gpu": torch.cuda.get_device_name(device),
        "world_size": world,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "kernelkit": kernelkit.__version__,
        "args": vars(args),
        "max_loss_difference": max(patched),
        "mean_loss_difference_last_20": statistics.mean(patched[-20:]),
        "torch_vs_torch_max_loss_difference": max(floor),
        "torch_vs_torch_mean_loss_difference_last_20": statistics.mean(floor[-20:]),
        "losses_agree": statistics.mean(patched[-20:])
        <= args.tolerance * statistics.mean(runs["torch"]["losses"][-20:]),
        "runs": runs,
    }
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
        for name, r in runs.items():
            print(
                f"{name}: step {r['median_step_ms']:.1f} ms, peak {r['peak_memory_gb']:.2f} GB, "
                f"loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}"
            )
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
