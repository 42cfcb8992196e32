//! Finding a secret in text the host passes on, at a cost that does not
//! depend on how the text relates to the secret.
//!
//! A guest chooses much of the text the host searches for secrets: a
//! response a server reflects, its own progress and log messages, its
//! result. A search that stops early where a prefix of the secret matches
//! (a byte-by-byte compare, or a substring finder's prefilter keyed on the
//! secret's rarest bytes) takes longer the more of the secret a guess gets
//! right, and a guest that times the host learns the secret byte by byte.
//!
//! So every window of the secret's length is hashed with a polynomial
//! rolling hash modulo the Mersenne prime 2^61 − 1, under a base drawn at
//! random once per process: each position costs the same multiply-add and
//! compare whatever its bytes. Only a window whose hash equals the
//! secret's is then compared, in full and without an early exit. Two
//! different windows of length n collide for at most n − 1 of the 2^61 − 1
//! bases, and the guest knows neither the base nor the secret, so a guess
//! that shares a prefix with the secret is no likelier to reach that
//! compare than any other: the compare runs, in practice, only on a whole
//! occurrence, which the guest can only have placed if it knew the secret.
//!
//! What this does not hide: how many whole occurrences there are (the text
//! then changes), and costs outside the search (the allocator, caches).

use std::ops::Range;
use std::sync::OnceLock;

/// 2^61 − 1.
const P: u64 = (1 << 61) - 1;

/// `a · b mod P`, for `a, b < P`.
fn mul(a: u64, b: u64) -> u64 {
    let wide = u128::from(a) * u128::from(b);
    let folded = (wide & u128::from(P)) + (wide >> 61);
    reduce(folded as u64)
}

/// `x mod P`, for `x < 2P + 1`.
fn reduce(x: u64) -> u64 {
    let x = (x & P) + (x >> 61);
    if x >= P { x - P } else { x }
}

/// The hash's base: drawn from the process's random hasher keys (the
/// operating system's randomness) the first time a text is searched.
fn base() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    *BASE.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x746f_6f6c_686f_7374);
        // At least 256, below P: a base that small could not mix a byte.
        256 + h.finish() % (P - 512)
    })
}

/// A byte as the hash reads it: case folded when asked (ASCII only), and
/// never zero.
fn digit(byte: u8, fold: bool) -> u64 {
    let b = if fold {
        byte.to_ascii_lowercase()
    } else {
        byte
    };
    u64::from(b) + 1
}

/// The hash of `bytes` under `b`.
fn hash(bytes: &[u8], b: u64, fold: bool) -> u64 {
    bytes
        .iter()
        .fold(0, |h, &byte| reduce(mul(h, b) + digit(byte, fold)))
}

/// Whether `a` and `b` (of one length) are equal, looking at every byte.
fn same(a: &[u8], b: &[u8], fold: bool) -> bool {
    let mut differ = 0u8;
    for (x, y) in a.iter().zip(b) {
        let (x, y) = if fold {
            (x.to_ascii_lowercase(), y.to_ascii_lowercase())
        } else {
            (*x, *y)
        };
        differ |= x ^ y;
    }
    std::hint::black_box(differ) == 0
}

/// What the search needs of one secret, worked out once when it is loaded:
/// its hash, as written and case folded, and the weight of a window's
/// first byte. Its `Debug` shows none of them: they are derived from the
/// secret.
#[derive(Clone)]
pub(crate) struct Needle {
    hash: u64,
    folded: u64,
    top: u64,
}

impl std::fmt::Debug for Needle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Needle {
    pub(crate) fn of(secret: &[u8]) -> Needle {
        let b = base();
        Needle {
            hash: hash(secret, b, false),
            folded: hash(secret, b, true),
            // b^(n-1): the weight of the byte that leaves the window.
            top: (1..secret.len()).fold(1, |w, _| mul(w, b)),
        }
    }
}

/// Every occurrence of `secret` (whose [`Needle`] is `needle`) in `text`,
/// overlapping ones too, appended to `hits` as ranges, in order; with
/// `fold`, in any ASCII letter case. The work is one hash step per byte of
/// `text`, plus one full compare per window whose hash is the secret's (see
/// the module's docs).
pub(crate) fn occurrences(
    secret: &[u8],
    needle: &Needle,
    text: &[u8],
    fold: bool,
    hits: &mut Vec<Range<usize>>,
) {
    let n = secret.len();
    if n == 0 || text.len() < n {
        return;
    }
    let b = base();
    let target = if fold { needle.folded } else { needle.hash };
    let mut h = hash(&text[..n], b, fold);
    for start in 0..=text.len() - n {
        if start > 0 {
            let out = mul(digit(text[start - 1], fold), needle.top);
            let kept = reduce(h + P - out);
            h = reduce(mul(kept, b) + digit(text[start + n - 1], fold));
        }
        if h == target && compared(&text[start..start + n], secret, fold) {
            hits.push(start..start + n);
        }
    }
}

/// [`same`], counted in tests: the compare must run only on whole
/// occurrences.
fn compared(window: &[u8], secret: &[u8], fold: bool) -> bool {
    #[cfg(test)]
    COMPARES.with(|c| c.set(c.get() + 1));
    same(window, secret, fold)
}

#[cfg(test)]
thread_local! {
    static COMPARES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(secret: &str, text: &str, fold: bool) -> Vec<Range<usize>> {
        let mut hits = Vec::new();
        let needle = Needle::of(secret.as_bytes());
        occurrences(secret.as_bytes(), &needle, text.as_bytes(), fold, &mut hits);
        hits
    }

    /// The plain search it must agree with.
    fn naive(secret: &str, text: &str, fold: bool) -> Vec<Range<usize>> {
        let (s, t) = if fold {
            (secret.to_ascii_lowercase(), text.to_ascii_lowercase())
        } else {
            (secret.to_string(), text.to_string())
        };
        (0..=t.len().saturating_sub(s.len()))
            .filter(|&i| t.len() >= s.len() && t.as_bytes()[i..i + s.len()] == *s.as_bytes())
            .map(|i| i..i + s.len())
            .collect()
    }

    #[test]
    fn it_finds_what_a_plain_search_finds() {
        let cases = [
            (
                "sk-123abc",
                "head sk-123abc mid sk-12 sk-123ab tail sk-123abcsk-123abc",
            ),
            ("abab", "ababab abab aba"),
            ("aaaa", "aaaaaaa"),
            ("sk-123abc", "sk-123ab"),
            ("sk-123abc", ""),
            ("\u{ff}\u{0}", "\u{ff}\u{0}\u{ff}\u{0}"),
            ("Sk-MiXeD", "x-sk-mixed SK-MIXED sk-mixe"),
        ];
        for (secret, text) in cases {
            for fold in [false, true] {
                assert_eq!(
                    found(secret, text, fold),
                    naive(secret, text, fold),
                    "{secret:?} in {text:?}, fold {fold}"
                );
            }
        }
    }

    /// A text made of the secret's prefixes, of every length, runs the full
    /// compare not once: the work a guess causes does not grow with how
    /// much of the secret it has right. Two whole occurrences: two compares.
    #[test]
    fn only_a_whole_occurrence_is_compared() {
        let secret = "sk-live-0123456789abcdef";
        let mut text = String::new();
        for k in 1..secret.len() {
            for _ in 0..50 {
                text.push_str(&secret[..k]);
                text.push(' ');
            }
        }
        COMPARES.with(|c| c.set(0));
        assert!(found(secret, &text, false).is_empty());
        assert!(found(secret, &text, true).is_empty());
        assert_eq!(COMPARES.with(|c| c.get()), 0);
        text.push_str(secret);
        text.push_str(secret);
        assert_eq!(found(secret, &text, false).len(), 2);
        assert_eq!(COMPARES.with(|c| c.get()), 2);
    }

    #[test]
    fn arithmetic_stays_below_the_modulus() {
        for (a, b) in [(P - 1, P - 1), (P - 1, 2), (0, P - 1), (1 << 60, 1 << 60)] {
            let expected = ((u128::from(a) * u128::from(b)) % u128::from(P)) as u64;
            assert_eq!(mul(a, b), expected, "{a} * {b}");
        }
        assert_eq!(reduce(2 * P), 0);
        assert_eq!(reduce(P), 0);
        assert_eq!(reduce(P + 5), 5);
        assert!(base() >= 256 && base() < P);
    }
}
