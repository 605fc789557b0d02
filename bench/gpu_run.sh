#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repo root, with the wheel built on the dev
# machine carried in dist/ (and Liger-Kernel's wheel there too, when it is to be compared).
# Installs it, runs the whole test suite (GPU tests included), the benchmarks and the demo, and
# writes logs and JSON reports to $OUT.
#   usage: bash bench/gpu_run.sh [STEP ...]   (default: tests foundation ops demo; install: the wheel alone)
#   Any other STEP runs bench/exp_STEP.sh, dashes as underscores (e.g. l2-policy: bench/exp_l2_policy.sh); those below
#   with a script of another name have their own case.
#   steps: tests foundation hostpath ops demo doctor sweep sweep-rows sweep-flat sweep-split sweep-llm
#          llm-norms llm-softmax llm-act (the issue-5 benchmark, in three parts of < 10 minutes), llm-ce (llm-softmax's
#          cross-entropy backward and fwd_bwd cells alone),
#          llm-norms-fwd (llm-norms' forward cells alone),
#          llm-odd (the row ops at widths off the 16-byte path: 32768 x 4097, and GPT-2's vocabulary, 8192 x 50257)
#          llama (bench/llama_train.py on one GPU), llama-accum (the same with 2 micro-batches a step, as
#          transformers' Trainer accumulates), ddp (the same under DDP on two GPUs)
#          triton-ptx (the PTX of the pointwise kernels torch.compile generated in earlier steps),
#          warp-occupancy (bench/exp_warp_rows_occupancy.sh: A/B of the softmax and cross-entropy warp rows),
#          h100-norm-bwd (bench/exp_h100_norm_bwd.sh: A/B of the 16-bit norm backwards' launches at 4096-8192 columns),
#          h100-load-hints (bench/exp_h100_load_hints.sh: A/B of softmax's and LayerNorm's load hints),
#          h100-ln-fwd (bench/exp_h100_ln_fwd.sh: the 16-bit LayerNorm forward's fits on an H100),
#          softmax-issue (bench/exp_softmax_fwd_issue.py: A/B of softmax's forward at fewer instructions per element),
#          softmax-once (bench/exp_softmax_exp_once.sh: A/B of softmax's held rows keeping their exponentials),
#          ce-two-h200 (bench/exp_ce_two_h200.sh: session 43's softmax.cu against its start, and each GPU's held
#          cross-entropy fits on the other),
#          softmax-one-row (bench/exp_softmax_one_row.sh: A/B of kk_softmax_fwd's held rows one per block),
#          softmax-held-fits (bench/exp_softmax_held_fits.sh: softmax forward fits after the one-row change),
#          softmax-sass (bench/exp_h100_softmax_sass.sh: ncu and SASS of softmax's bf16 x 4096 forward against Liger's),
#          softmax-span (bench/exp_softmax_span.sh: A/B of softmax.cu's block reductions over 16 lanes),
#          softmax-shifted (bench/exp_softmax_shifted.sh: A/B of softmax's shifted rows at odd widths),
#          ce-shifted (bench/exp_ce_shifted.sh: A/B of cross-entropy's shifted rows at odd widths),
#          norms-shifted (bench/exp_norms_shifted.sh: A/B of the norm forwards' shifted rows at odd widths),
#          shifted-chunks (bench/exp_shifted_chunks.sh: A/B of the norm backwards' chunks on shifted rows),
#          shifted-bulk (bench/exp_shifted_bulk.sh: A/B of the 16-bit norm backwards' shifted rows by bulk copies),
#          ce-bwd-flat-bf16 (bench/exp_ce_bwd_flat_bf16.sh: A/B of the 16-bit cross-entropy backward's flat grids),
#          ce-bwd-bf16 (bench/exp_ce_bwd_bf16.sh: A/B of the 16-bit cross-entropy backward's loads and registers),
#          ce-keep64 (bench/exp_ce_keep64.sh: where else the 16-bit backward's kKeep loads at 64 registers reach),
#          ce-lean-cut (bench/exp_ce_lean_cut.sh: A/B of the cross-entropy backward's 48-register rows' widths),
#          norm-bwd-keep16 (bench/exp_norm_bwd_keep16.sh: A/B of the 16-bit norm backwards' rows loaded kKeep),
#          norm-bwd-keep-rows (bench/exp_norm_bwd_keep_rows.sh: ... only the rows one block holds),
#          h100-ce-keep64 (bench/exp_h100_ce_keep64.sh: session 49's cross-entropy changes, each undone, on an H100),
#          norm-ties (bench/exp_norm_ties.sh: A/B of other fits for the norm forwards that trail torch.compile),
#          norm-fwd-keep-l2 (bench/exp_norm_fwd_keep_l2.sh: A/B of the norm forwards' x loads without evict_last in L2),
#          store-v4 (bench/exp_store_v4.sh: A/B of kk::store_vec's 16-byte stores, one v4 store or a C++ copy),
#          ncu-norm-fwd (bench/exp_ncu_gaps.sh on session 50's two norm forwards behind torch.compile),
#          norm-wide-sync (bench/exp_norm_wide_sync.sh: A/B of the norm forwards' block sums without their second barrier),
#          l2-policy (bench/exp_l2_policy.sh: A/B of other L2 eviction priorities for the norm kernels' loads and stores),
#          l2-prefetch (bench/exp_l2_prefetch.sh: A/B of kKeep's loads with a 256-byte L2 prefetch, and the PTX of
#          torch.compile's norm forwards),
#          l2-demote (bench/exp_l2_demote.sh: A/B of the norm forwards' x lines marked evict_normal again once read),
#          norm-fwd-no-stats (bench/exp_norm_fwd_no_stats.sh: A/B of the norm forwards without their per-row stats),
#          norm-fwd-fits (bench/exp_norm_fwd_fits.sh: A/B of other _wide fits for the two norm forwards behind),
#          norm-fwd-reload (bench/exp_norm_fwd_reload.sh: A/B of the norm forwards' output pass reloading x evict_first),
#          wide-check-late (bench/exp_wide_check_late.sh: A/B of the wide norm forwards' launch checks after their loads),
#          wide-fits-s52 (bench/exp_wide_fits_s52.sh: A/B of other _wide fits for the RMSNorm forwards behind),
#          held-vec-ceiling (bench/exp_held_vec_ceiling.sh: A/B of the held RMSNorm forwards with their checks after their rows),
#          vec-only-ceilings (bench/exp_vec_only_ceilings.sh: the same ceilings for the LayerNorm forward and the norm backwards),
#          ln-f32-narrow (bench/exp_ln_f32_narrow.sh: A/B of float32 LayerNorm rows of 512-2048 columns on the _wide kernel),
#          norm-narrow-fits (bench/exp_norm_narrow_fits.sh: A/B of LayerNorm fits at float32 x 256 and 16-bit x 1024, and the
#          norm forwards at 1024-2048 columns against torch.compile and Liger),
#          softmax-bwd-minb (bench/exp_softmax_bwd_minb.sh: the 16-bit softmax backward's held fits at 4096 columns
#          against torch.compile),
#          ncu-gaps (bench/exp_ncu_gaps.sh: ncu of the cells whose GPU time trails torch.compile's kernels, both sides,
#          and Inductor's Triton source for them; NCU_CASES picks the cells),
#          warp-teams (bench/exp_warp_teams.sh: A/B of softmax.cu's warp rows in teams, and the norm forwards' fits at
#          256 columns),
#          softmax-f32-narrow (bench/exp_softmax_f32_narrow.sh: A/B of float32 softmax fits at 260-1024 columns),
#          ties-norms (bench/exp_ties.py on the norm forwards of session 31's H200 cells, 42 rounds),
#          ties-ln-fit (bench/exp_ties.py on layer_norm float32 x 4096, shipped and at the _wide fit (4, 2)),
#          ties-softmax (bench/exp_ties.py on the H100's softmax cells of session 40)
#   env: PYTEST_ARGS (what to test, with extra pytest arguments as shell words, e.g.
#        "tests/test_llm_ops.py -k 'rope or swiglu'"),
#        SWEEP_ONLY (families for sweep-rows / sweep-flat / sweep-llm, e.g. "norm_bwd")
set -uo pipefail
OUT=${OUT:-/tmp/kernelkit-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELKIT_CACHE_DIR=/tmp/kernelkit-cache
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/kk-site dist/kernelkit-*.whl || exit 1
for w in dist/liger_kernel-*.whl; do
  [ -e "$w" ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/kk-site "$w"
done
export PYTHONPATH=/tmp/kk-site
steps=${*:-tests foundation ops demo}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
} | tee "$OUT/env.txt"
rc=0
for s in $steps; do
  case $s in
    tests)
      # One worker per core but one (pytest-xdist); each test's phase times go to test-times.txt as it ends. On an
      # H200 machine test_llm_cuda_vs_cpu.py took 96.8 s and the rest of the suite 106.2 s (session 54), after 50 s
      # of warm-up: the whole suite fits one call.
      xdist=$(python3 -c 'import importlib.util as u, os; u.find_spec("xdist") and print("-n", max(1, os.cpu_count() - 1))')
      python3 bench/warm_kernels.py 2>&1 | tee "$OUT/warm-kernels.log" | tail -5  # the workers then load, not compile
      eval "pytest_args=(${PYTEST_ARGS:-tests})"  # shell words, so that a quoted -k expression stays one argument
      # Two CPU threads per worker (torch's OpenMP pool, rayon's for the Rust CPU references) instead of one per core
      # each: 15 workers on 16 cores. test_llm_cuda_vs_cpu.py 489 -> 96.8 s (sessions 53 and 54).
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-2} \
        KERNELKIT_TEST_TIMES="$OUT/test-times.txt" python3 -m pytest "${pytest_args[@]}" $xdist -q -rs \
        -p no:cacheprovider -p no:logging 2>&1 | grep -v "PytestBenchmarkWarning\|warner(" | tee "$OUT/pytest.log" | tail -15
      rc=$((rc | PIPESTATUS[0])) ;;
    sweep) python3 bench/grid_sweep.py 2>&1 | tee "$OUT/grid_sweep.log" ;;
    sweep-rows | sweep-flat | sweep-split | sweep-llm)
      f=${s/-/_}
      # shellcheck disable=SC2086
      python3 bench/$f.py --out "$OUT/$f.json" ${SWEEP_ONLY:+--only $SWEEP_ONLY} 2>&1 | tee "$OUT/$f.log" | grep -v "^    " ;;
    doctor) python3 -m kernelkit doctor 2>&1 | tail -30 ;;
    hostpath) python3 bench/hostpath.py --out "$OUT/hostpath.json" 2>&1 | tail -40 ;;
    foundation) python3 bench/foundation.py --out "$OUT/foundation.json" 2>&1 | tail -25 ;;
    ops) COLUMNS=200 python3 -m kernelkit bench --json "$OUT/ops.json" --plot "$OUT/ops.png" 2>&1 | tee "$OUT/ops.log" | tail -3 ;;
    demo) python3 -m kernelkit demo 2>&1 | tee "$OUT/demo.log" | tail -25 ;;
    llm-norms | llm-norms-fwd | llm-softmax | llm-ce | llm-act | llm-odd)
      sizes=()  # the issue's sizes (kernelkit bench's default)
      case $s in
        llm-norms) names="rms_norm rms_norm_backward add_rms_norm add_rms_norm_backward layer_norm layer_norm_backward" ;;
        llm-norms-fwd) names="rms_norm add_rms_norm layer_norm" ;;
        llm-softmax) names="softmax softmax_backward cross_entropy cross_entropy_backward cross_entropy_fwd_bwd cross_entropy_items_fwd_bwd" ;;
        llm-ce) names="cross_entropy_backward cross_entropy_fwd_bwd cross_entropy_items_fwd_bwd" ;;
        llm-act) names="swiglu swiglu_backward rope rope_backward" ;;
        llm-odd)
          names="softmax softmax_backward cross_entropy cross_entropy_backward cross_entropy_fwd_bwd rms_norm rms_norm_backward
            add_rms_norm add_rms_norm_backward layer_norm layer_norm_backward"
          sizes=(--sizes 32768x4097,8192x50257) ;;
      esac
      # shellcheck disable=SC2086
      COLUMNS=200 python3 -m kernelkit bench $names "${sizes[@]}" --dtype bfloat16,float32 --json "$OUT/$s.json" 2>&1 \
        | tee "$OUT/$s.log" | tail -3 ;;
    triton-ptx)
      mkdir -p "$OUT/triton-ptx"
      find /tmp/torchinductor_* ~/.triton -name 'triton_poi*.ptx' 2>/dev/null | while read -r f; do
        cp "$f" "$OUT/triton-ptx/$(basename "$(dirname "$f")" | cut -c1-8)-$(basename "$f")"
      done
      ls "$OUT/triton-ptx" | head ;;
    warp-occupancy) OUT=$OUT bash bench/exp_warp_rows_occupancy.sh ;;
    softmax-issue) OUT=$OUT python3 bench/exp_softmax_fwd_issue.py ;;
    softmax-once) OUT=$OUT bash bench/exp_softmax_exp_once.sh ;;
    softmax-sass) OUT=$OUT bash bench/exp_h100_softmax_sass.sh ;;
    ncu-norm-fwd)  # session 50's two norm forwards behind torch.compile, as ncu-gaps profiles them
      NCU_CASES="layer_norm:float32:32768x4096 rms_norm:float32:32768x8192" OUT=$OUT bash bench/exp_ncu_gaps.sh ;;
    ties-norms) python3 bench/exp_ties.py --only rms_norm layer_norm --rounds 42 --out "$OUT/ties-norms.json" 2>&1 \
      | tee "$OUT/ties-norms.log" | tail -6 ;;
    ties-ln-fit)
      for fit in "" "norms._WIDE_FIT=norms._WIDE_FIT | {('kk_layer_norm_fwd', torch.float32): [(2048, 4096, 4, 2)]}"; do
        python3 bench/exp_ties.py --only layer_norm ${fit:+--host "$fit"} --rounds 42 2>&1 | tail -2
      done | tee "$OUT/ties-ln-fit.log" ;;
    ties-softmax) python3 bench/exp_ties.py --cells h100-s40 --only softmax --rounds 16 --out "$OUT/ties-softmax.json" 2>&1 \
      | tee "$OUT/ties-softmax.log" | tail -8 ;;
    llama) python3 bench/llama_train.py --out "$OUT/llama.json" 2>&1 | tail -12 ;;
    llama-accum) python3 bench/llama_train.py --accumulate 2 --out "$OUT/llama-accum.json" 2>&1 | tail -12 ;;
    ddp) torchrun --nproc-per-node 2 bench/llama_train.py --out "$OUT/llama-ddp.json" 2>&1 | tail -12 ;;
    install) ;;  # the wheel alone, installed above
    *)  # an A/B script named after the step: bench/exp_<step, dashes as underscores>.sh
      script=bench/exp_${s//-/_}.sh
      if [ -f "$script" ]; then
        OUT=$OUT bash "$script"
      else
        echo "gpu_run.sh: unknown step '$s' (no case here and no $script)" >&2
        rc=1
      fi ;;
  esac
done
exit $rc
