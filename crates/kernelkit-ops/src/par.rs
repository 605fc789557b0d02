//! Small helpers to run a list of independent jobs either on rayon's pool or inline.

use rayon::prelude::*;

/// Runs `f` on every job, in parallel when `parallel` (order of side effects unspecified).
pub(crate) fn for_each<J: Send, F: Fn(J) + Sync + Send>(jobs: Vec<J>, parallel: bool, f: F) {
    if parallel && jobs.len() > 1 {
        jobs.into_par_iter().for_each(f);
    } else {
        jobs.into_iter().for_each(f);
    }
}

/// Maps every job, in parallel when `parallel`; results come back in job order either way.
pub(crate) fn map<J: Send, R: Send, F: Fn(J) -> R + Sync + Send>(
    jobs: Vec<J>,
    parallel: bool,
    f: F,
) -> Vec<R> {
    if parallel && jobs.len() > 1 {
        jobs.into_par_iter().map(f).collect()
    } else {
        jobs.into_iter().map(f).collect()
    }
}
