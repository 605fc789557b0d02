//! Times the CPU ops on 16M-element f32 inputs (median of several runs).
//!
//!     cargo run --release -p kernelkit-ops --example cpu_bench [-- --runs N] [-- --all-dtypes]
//!
//! Compare with torch eager: `python examples/torch_eager_bench.py` (same sizes).
//! GB/s counts the bytes each op must read and write once (`out` written, inputs read).
//! "fresh out" times include allocating a new zeroed output per call (the page faults that
//! torch's `a * b + c` also pays), "reused out" writes into a preallocated buffer.

use half::{bf16, f16};
use kernelkit_ops::element::Element;
use kernelkit_ops::{elementwise, gelu, matmul, Approx};
use std::hint::black_box;
use std::time::Instant;

const N: usize = 16 * 1024 * 1024;
const ROWS: usize = 4096;
const COLS: usize = 4096;

fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up: page in buffers, spin up the pool
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    t[t.len() / 2]
}

fn report(name: &str, ms: f64, bytes: usize) {
    println!(
        "{name:<34} {ms:9.3} ms  {:7.2} GB/s",
        bytes as f64 / ms / 1e6
    );
}

/// Deterministic inputs roughly like N(0, 1).
fn data<T: Element>(n: usize, seed: u32) -> Vec<T> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let u = (s >> 8) as f32 / (1u32 << 24) as f32;
            T::from_compute(<T::Compute as kernelkit_ops::element::Real>::from_f64(
                ((u - 0.5) * 6.0) as f64,
            ))
        })
        .collect()
}

fn bench_dtype<T: Element>(runs: usize, full: bool) {
    let sz = std::mem::size_of::<T>();
    let tag = T::DTYPE;
    let a: Vec<T> = data(N, 1);
    let b: Vec<T> = data(N, 2);
    let c: Vec<T> = data(N, 3);
    let bias: Vec<T> = data(COLS, 4);
    let mut out: Vec<T> = data(N, 5);

    let ms = median_ms(runs, || elementwise::muladd(&a, &b, &c, &mut out).unwrap());
    report(&format!("muladd {tag} (reused out)"), ms, 4 * sz * N);
    let ms = median_ms(runs, || {
        let mut o = vec![T::from_compute(<T::Compute as kernelkit_ops::element::Real>::ZERO); N];
        elementwise::muladd(&a, &b, &c, &mut o).unwrap();
        black_box(o);
    });
    report(&format!("muladd {tag} (fresh out)"), ms, 4 * sz * N);

    for (approx, name) in [(Approx::Tanh, "tanh"), (Approx::None, "none")] {
        let ms = median_ms(runs, || {
            gelu::bias_gelu_fwd(&a, &bias, &mut out, approx).unwrap()
        });
        report(
            &format!("bias_gelu_fwd {name} {tag} (reused)"),
            ms,
            2 * sz * N,
        );
        let ms = median_ms(runs, || {
            let mut o =
                vec![T::from_compute(<T::Compute as kernelkit_ops::element::Real>::ZERO); N];
            gelu::bias_gelu_fwd(&a, &bias, &mut o, approx).unwrap();
            black_box(o);
        });
        report(
            &format!("bias_gelu_fwd {name} {tag} (fresh)"),
            ms,
            2 * sz * N,
        );
        if full {
            let mut gb: Vec<T> = data(COLS, 6);
            let ms = median_ms(runs, || {
                gelu::bias_gelu_bwd(&b, &a, &bias, &mut out, &mut gb, approx).unwrap()
            });
            report(
                &format!("bias_gelu_bwd {name} {tag} (reused)"),
                ms,
                3 * sz * N,
            );
        }
    }
    if !full {
        return;
    }
    let ms = median_ms(runs, || elementwise::add(&a, &b, &mut out).unwrap());
    report(&format!("add {tag} (reused out)"), ms, 3 * sz * N);
    let ms = median_ms(runs, || elementwise::mul(&a, &b, &mut out).unwrap());
    report(&format!("mul {tag} (reused out)"), ms, 3 * sz * N);
    let ms = median_ms(runs, || elementwise::scale_(&mut out, 1.000_000_1).unwrap());
    report(&format!("scale_ {tag} (in place)"), ms, 2 * sz * N);

    let (m, k, n) = (1024, 1024, 1024);
    let mut mo: Vec<T> = data(m * n, 7);
    let ms = median_ms(runs.min(7), || {
        matmul::matmul(&a[..m * k], &b[..k * n], &mut mo, m, k, n).unwrap()
    });
    println!(
        "{:<34} {ms:9.3} ms  {:7.1} GFLOP/s",
        format!("matmul {tag} 1024^3"),
        2.0 * (m * k * n) as f64 / ms / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let all = args.iter().any(|a| a == "--all-dtypes");
    println!(
        "kernelkit-ops cpu_bench: {N} elements, gelu {ROWS}x{COLS}, {} rayon threads, median of {runs}",
        rayon::current_num_threads()
    );
    bench_dtype::<f32>(runs, true);
    if all {
        bench_dtype::<f16>(runs, false);
        bench_dtype::<bf16>(runs, false);
        bench_dtype::<f64>(runs.min(5), false);
    }
}
