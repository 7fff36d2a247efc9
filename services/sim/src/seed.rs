//! Deterministic seeds: the same inputs give the same page on every run and machine.

use sha2::{Digest, Sha256};

/// SHA-256 over `parts`, each followed by a NUL so `("ab", "c")` and `("a", "bc")`
/// differ.
pub(crate) fn digest(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// The `i`-th 64-bit word of a digest (`i` in `0..4`).
pub(crate) fn word(d: &[u8; 32], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[i * 8..i * 8 + 8]);
    u64::from_le_bytes(b)
}

/// A generator seeded from `parts`, for picks that need more than a few words.
pub(crate) fn rng(parts: &[&str]) -> fastrand::Rng {
    fastrand::Rng::with_seed(word(&digest(parts), 0))
}
