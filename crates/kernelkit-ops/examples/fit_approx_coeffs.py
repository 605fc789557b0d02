"""Regenerates the polynomial coefficients in src/approx.rs (needs numpy and mpmath).

    python crates/kernelkit-ops/examples/fit_approx_coeffs.py

Minimax fits by Lawson's iteratively reweighted least squares on Chebyshev nodes, against
mpmath references; coefficients are printed rounded to f32 (shortest round-tripping form).
The f32 error of the implementation itself is measured by the Rust tests, not here.
"""

import mpmath as mp
import numpy as np

mp.mp.dps = 40


def lawson(basis, f, xs, iters=500, rel=True):
    a = np.array([[float(b(x)) for b in basis] for x in xs])
    y = np.array([float(f(x)) for x in xs])
    scale = np.abs(y) if rel else np.ones_like(y)
    w = np.ones(len(xs)) / len(xs)
    best = None
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a / scale[:, None] * sw[:, None], y / scale * sw, rcond=None)
        e = np.abs(a @ c - y) / scale
        if best is None or e.max() < best[1]:
            best = (c, e.max())
        w = w * e
        w /= w.sum()
    return best


def cheb(lo, hi, n):
    k = np.arange(n)
    return 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / n)


def f32(v):
    return np.format_float_positional(np.float32(v), unique=True, trim="-")


def main():
    # exp(r) = 1 + r + r^2 P(r), |r| <= 0.35 (a little more than ln2/2).
    xs = cheb(-0.35, 0.35, 3000)
    xs = xs[np.abs(xs) > 1e-7]
    c, e = lawson(
        [lambda x, j=j: x ** (j + 2) for j in range(5)], lambda x: mp.exp(mp.mpf(x)) - 1 - mp.mpf(x), xs, rel=False
    )
    print(f"EXP_P      abs err {e:.2e}: {[f32(v) for v in c]}")

    # Phi(x) - 1/2 = x P(x^2), |x| <= 1.
    xs = cheb(0, 1.0, 3000)
    xs = xs[xs > 1e-6]
    c, e = lawson(
        [lambda x, j=j: x ** (2 * j) for j in range(6)], lambda x: mp.erf(mp.mpf(x) / mp.sqrt(2)) / 2 / mp.mpf(x), xs
    )
    print(f"PHI_SMALL  rel err {e:.2e}: {[f32(v) for v in c]}")

    # 1 - Phi(w) = exp(-w^2/2) t S(t), t = 1/(1 + w/2), 1 <= w <= 14.5.
    def r(w):
        w = mp.mpf(w)
        return mp.erfc(w / mp.sqrt(2)) / 2 * mp.exp(w * w / 2)

    xs = cheb(1.0, 14.5, 4000)
    c, e = lawson([lambda x, j=j: (1 / (1 + 0.5 * x)) ** (j + 1) for j in range(10)], r, xs, iters=800)
    print(f"PHI_TAIL   rel err {e:.2e}: {[f32(v) for v in c]}")


if __name__ == "__main__":
    main()
