#!/usr/bin/env bash
# The norm backwards' chunks on shifted rows (ops/norms.py _shifted_chunks) and the CTAs of split rows
# (ops/_runtime.py split_shape, fill). Chunks take rows of one of P shift classes, and had been cut to cap // P
# per class, so that 15 clusters of 7 CTAs (cap not a multiple of P) left some of the GPU idle (rms_norm_backward bf16
# 8192 x 50257 at 35% of copy, h200-2026-11-28-s46/wide-norms.log); and 15 clusters of 7 CTAs at one block per SM
# cover 105 of the 132 SMs (an H200 holds 15 clusters of 8 too: 120).
# 1. The launch shapes: each split backward's cap (clusters in one wave), CTAs, and the chunks before and after.
# 2. A: the wheel, B: the same wheel with rows split over the fewest CTAs (split_shape without fill); B/A above 1: A
#    faster.
# 3. A: the wheel, B: the old chunking.
# 4. kernelkit bench of the six norm ops at 8192 x 50257 against torch, torch.compile and Liger.
# On the GPU machine: OUT=$OUT bash bench/gpu_run.sh shifted-chunks.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
old="norms._shifted_chunks=lambda rows, p, y, cap: (lambda n: (lambda r: (r, p * -(-n // r)))(-(-n // min(-(-n // y), \
max(1, cap // p)))))(-(-rows // p))"
fewest="norms.split_shape=lambda *a, f=norms.split_shape, fill=False, **k: f(*a, **k)"
python3 - "$old" "$fewest" <<'PY' 2>&1 | tee "$OUT/shifted-chunks-shapes.log"
import math, sys, torch
from kernelkit.ops import norms
from kernelkit.ops._runtime import SHIFTED, VEC
old = eval(sys.argv[1].split("=", 1)[1], {"norms": norms})
split_shape = norms.split_shape
for fill in (False, True):
    norms.split_shape = split_shape if fill else eval(sys.argv[2].split("=", 1)[1], {"norms": norms})
    norms._backward_shape.cache_clear()
    for name in ("kk_rms_norm_bwd", "kk_layer_norm_bwd"):
        for dtype in (torch.bfloat16, torch.float32):
            for rows, cols in ((8192, 50257), (32768, 4097), (16384, 12289)):
                for extra in (False, True) if name == "kk_rms_norm_bwd" else (False,):
                    shape, _ = norms._backward_shape(name, dtype, cols, 0, SHIFTED, extra)
                    if not getattr(shape, "shifted", False):
                        print(f"{name} {dtype} {rows}x{cols} extra={extra}: not shifted")
                        continue
                    p = VEC[dtype] // math.gcd(cols, VEC[dtype])
                    print(f"fill={fill} {name} {str(dtype)[6:]} {rows}x{cols} extra={extra}: cap {shape.cap} ctas "
                          f"{shape.ctas} block {shape.block} period {p}: (rows/chunk, chunks) "
                          f"{norms._shifted_chunks(rows, p, shape.per_block, shape.cap)} "
                          f"old {old(rows, p, shape.per_block, shape.cap)}")
PY
cases="rms_norm_backward:bfloat16:8192x50257 rms_norm_backward:float32:8192x50257 add_rms_norm_backward:bfloat16:8192x50257
add_rms_norm_backward:float32:8192x50257 layer_norm_backward:bfloat16:8192x50257 layer_norm_backward:float32:8192x50257
add_rms_norm:float32:8192x50257 rms_norm_backward:bfloat16:8192x50176 layer_norm_backward:bfloat16:8192x50176
add_rms_norm_backward:bfloat16:8192x50176 rms_norm_backward:float32:8192x50176"
# shellcheck disable=SC2086
ab norms "ab-$gpu-split-fill.log" --b-host "$fewest" $cases
# shellcheck disable=SC2086
ab norms "ab-$gpu-shifted-chunks-2.log" --b-host "$old" rms_norm_backward:bfloat16:16384x12289 \
  rms_norm_backward:float32:16384x12289 layer_norm_backward:bfloat16:16384x12289 rms_norm_backward:bfloat16:32768x4097
cd .. && COLUMNS=200 python3 -m kernelkit bench rms_norm rms_norm_backward add_rms_norm add_rms_norm_backward layer_norm \
  layer_norm_backward --sizes 8192x50257 --dtype bfloat16,float32 --json "$OUT/wide-norms.json" 2>&1 \
  | tee "$OUT/wide-norms.log" | tail -3
exit 0
