#!/usr/bin/env bash
# kk_cross_entropy_bwd's 48-register instantiation (kNc loads, 5 blocks per SM) takes rows of at most 512 columns
# (ops/softmax.py _CE_BWD_LEAN_COLS), a cut measured against the 80 registers all dtypes then had. Session 49 made the
# default kKeep loads at 64 registers for 16-bit rows (80 for float32). A: the shipped cut, B:
#   none:  no lean rows (every width takes the default)
#   1024:  the cut at 1024 columns (adopted; the run before measured none and 1024 against the cut at 512)
#   2048:  the cut at 2048 columns
# B/A below 1: B is faster. On the GPU machine: OUT=$OUT bash bench/gpu_run.sh ce-lean-cut.
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
export AB_ROUNDS=${AB_ROUNDS:-6}
lean="cross_entropy_backward:bfloat16:32768x128 cross_entropy_backward:bfloat16:32768x256
cross_entropy_backward:bfloat16:32768x512 cross_entropy_backward:float32:32768x256
cross_entropy_backward:float32:32768x512"
# shellcheck disable=SC2086
{
  ab softmax "ab-$gpu-ce-lean-none.log" --b-host "softmax._CE_BWD_LEAN_COLS=0" $lean
  ab softmax "ab-$gpu-ce-lean-1024.log" --b-host "softmax._CE_BWD_LEAN_COLS=1024" \
    cross_entropy_backward:bfloat16:32768x1024 cross_entropy_backward:float32:32768x1024
  ab softmax "ab-$gpu-ce-lean-2048.log" --b-host "softmax._CE_BWD_LEAN_COLS=2048" \
    cross_entropy_backward:bfloat16:32768x2048 cross_entropy_backward:float32:32768x2048 \
    cross_entropy_backward:bfloat16:65536x1536
}
