"""Hugging Face's loss under gradient accumulation (a micro-batch's sum divided by num_items_in_batch), forward and
backward: kernelkit.ops.cross_entropy(divisor=items), whose held kernel divides by the count itself and writes the
gradient in the forward's one pass, against the route the patched loss took before (the summed loss through the
dispatcher, then `/ items`: the loss's gradient is not 1, so the kernels stay apart), torch, torch.compile and Liger.

    python3 bench/exp_ce_divisor.py --out ce-divisor.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import torch

from kernelkit import bench


def before(logits, target, items):
    total, _, _ = torch.ops.kernelkit.cross_entropy_reduced(logits, target, -100, 0.0, False, None)
    return total / items


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    (case,) = bench.op_cases(["cross_entropy_items_fwd_bwd"])
    case.impls["kernelkit, sum then / items (before)"] = before
    gpu = torch.cuda.is_available()
    copy_gbps = bench.copy_bandwidth() if gpu else None
    sizes = bench.LLM_SIZES if gpu else [(256, 512)]
    results = bench.run([case], sizes, [torch.bfloat16, torch.float32], reps=args.reps, copy_gbps=copy_gbps)
    env = bench.environment()
    bench.render(results, env, copy_gbps)
    with open(args.out, "w") as f:
        rows = [dataclasses.asdict(r) for r in results]
        json.dump({"environment": env, "copy_gbps": copy_gbps, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
