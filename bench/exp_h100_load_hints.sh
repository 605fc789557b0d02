#!/usr/bin/env bash
# The cells where an H100 still trails Liger or torch.compile at 32768 x 4096-8192 (bench/exp_ties.py --cells h100-s40:
# layer_norm bf16 4096 0.986x Liger, 8192 0.992x torch.compile; softmax bf16 4096 0.987x Liger, float32 4096 0.996x
# torch.compile), with the rows' load hints (kk::Load) chosen on an H200 (session 17) tried again, and the held rows'
# outputs stored evict-first (st.global.cs), as Liger's softmax stores them (its loads are .ca: kPlain), GPU time
# alone (ab_source.py --queued). On the GPU machine: OUT=$OUT bash bench/gpu_run.sh h100-load-hints.
# Its patterns match the sources of b5bc640 (LayerNorm's weights now load with kk_layer_norm_fwd's LD).
# shellcheck source=bench/ab_env.sh
source "$(dirname "$0")/ab_env.sh"
softmax="softmax:bfloat16:32768x4096 softmax:bfloat16:32768x8192 softmax:float32:32768x4096 softmax:float32:32768x8192"
softmax="$softmax softmax_backward:bfloat16:32768x4096"
ln="layer_norm:bfloat16:32768x4096 layer_norm:bfloat16:32768x8192 layer_norm:float32:32768x4096"
for hint in kNc kPlain; do
  # shellcheck disable=SC2086
  ab softmax "ab-h100-softmax-ld-$hint.log" --sub 'constexpr int kSoftmaxLd = sizeof\(T\) == 8 \? kk::kNc : kk::kKeep;' \
    "constexpr int kSoftmaxLd = kk::$hint;" $softmax
done
for hint in kKeep kPlain; do
  # shellcheck disable=SC2086
  ab norms "ab-h100-layer_norm-ld-$hint.log" --sub 'kLnFwdLd = kk::kNc' "kLnFwdLd = kk::$hint" $ln
done
# evict-first stores of the held rows (softmax's forward; LayerNorm's forward, the second such store in norms.cu)
sm_st=('store_vec<W, SPLIT>\(yr \+ p \* W' 'store_vec<W, true>(yr + p * W')
sm_ld=('constexpr int kSoftmaxLd = sizeof\(T\) == 8 \? kk::kNc : kk::kKeep;' 'constexpr int kSoftmaxLd = kk::kPlain;')
# shellcheck disable=SC2086
ab softmax ab-h100-softmax-st-cs.log --sub "${sm_st[@]}" $softmax
# shellcheck disable=SC2086
ab softmax ab-h100-softmax-ld-kPlain-st-cs.log --sub "${sm_st[@]}" --sub "${sm_ld[@]}" $softmax
ln_st=('(kLnFwdLd>\(b \+ p \* W\), c\);[\s\S]*?)store_vec<W, SPLIT>\(y \+ off' '\1store_vec<W, true>(y + off')
# shellcheck disable=SC2086
ab norms ab-h100-layer_norm-st-cs.log --sub "${ln_st[@]}" $ln
# shellcheck disable=SC2086
ab norms ab-h100-layer_norm-ld-kPlain-st-cs.log --sub "${ln_st[@]}" --sub 'kLnFwdLd = kk::kNc' 'kLnFwdLd = kk::kPlain' $ln
