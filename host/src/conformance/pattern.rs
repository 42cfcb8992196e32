//! A string that matches a schema's `pattern`: the pattern is parsed (as the
//! host's validator reads it, by the `regex` crate's syntax) and one of its
//! matches written out: a literal as is, a class's first printable member,
//! an alternation's first branch, a repetition as few times as the length
//! bounds allow. Anchors and word boundaries write nothing; the caller
//! validates the whole object, so a match they would refuse is reported.

use regex_syntax::hir::{Class, Hir, HirKind};

/// How many times beyond its minimum a repetition is tried, in turn, until
/// the string fits the length bounds.
const EXTRA_REPEATS: [u32; 8] = [0, 1, 2, 4, 8, 16, 64, 256];

/// The longest match written, in bytes.
const MAX_BYTES: usize = 16 << 10;

/// The most parts of the pattern written for one match (a repetition of
/// nothing, `(?:){4000000000}`, writes no byte but would take as long).
const MAX_STEPS: u32 = 100_000;

/// A match of `pattern` of `min` to `max` characters.
pub(crate) fn matching(pattern: &str, min: u64, max: u64) -> Result<String, String> {
    let hir = regex_syntax::parse(pattern).map_err(|e| format!("does not parse: {e}"))?;
    for extra in EXTRA_REPEATS {
        let mut out = Vec::new();
        let mut steps = 0;
        write(&hir, extra, &mut out, &mut steps)?;
        let s = String::from_utf8(out).map_err(|_| "a match is not UTF-8".to_string())?;
        if (min..=max).contains(&(s.chars().count() as u64)) {
            return Ok(s);
        }
    }
    Err(format!(
        "the generator found no match of {min} to {max} characters"
    ))
}

/// Appends one match of `hir` to `out`, each repetition `extra` times more
/// than its minimum (within its maximum), counting `steps`.
fn write(hir: &Hir, extra: u32, out: &mut Vec<u8>, steps: &mut u32) -> Result<(), String> {
    if out.len() > MAX_BYTES {
        return Err(format!("a match is longer than {MAX_BYTES} bytes"));
    }
    *steps += 1;
    if *steps > MAX_STEPS {
        return Err(format!("writing a match took more than {MAX_STEPS} steps"));
    }
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(literal) => out.extend_from_slice(&literal.0),
        HirKind::Class(class) => push_member(class, out)?,
        HirKind::Capture(capture) => write(&capture.sub, extra, out, steps)?,
        HirKind::Concat(parts) => {
            for part in parts {
                write(part, extra, out, steps)?;
            }
        }
        HirKind::Alternation(branches) => {
            if let Some(first) = branches.first() {
                write(first, extra, out, steps)?;
            }
        }
        HirKind::Repetition(rep) => {
            let times = rep.min.saturating_add(extra);
            let times = rep.max.map_or(times, |m| times.min(m));
            for _ in 0..times {
                write(&rep.sub, extra, out, steps)?;
            }
        }
    }
    Ok(())
}

/// Characters a class is asked for first, when it holds them: they read
/// well in a report and pass most tools' own checks.
const PREFERRED: [char; 6] = ['a', 'A', '0', 'x', '_', '-'];

/// Appends one member of `class`: a preferred character, else the first
/// printable one, else its first.
fn push_member(class: &Class, out: &mut Vec<u8>) -> Result<(), String> {
    match class {
        Class::Unicode(c) => {
            let ranges = c.ranges();
            let within = |ch: char| ranges.iter().any(|r| r.start() <= ch && ch <= r.end());
            let ch = PREFERRED
                .into_iter()
                .find(|ch| within(*ch))
                .or_else(|| {
                    ranges
                        .iter()
                        .flat_map(|r| [r.start(), r.end()])
                        .find(|ch| !ch.is_control())
                })
                .or_else(|| ranges.first().map(|r| r.start()))
                .ok_or_else(|| "a class that matches nothing".to_string())?;
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
        Class::Bytes(c) => {
            let b = c
                .ranges()
                .first()
                .map(|r| r.start())
                .ok_or_else(|| "a class that matches nothing".to_string())?;
            out.push(b);
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn matches_are_written_out() {
        let cases = [
            ("^[a-z]+$", 1, 10, "a"),
            ("^[0-9]{3}-[0-9]{4}$", 0, 100, "000-0000"),
            ("^(GET|POST)$", 0, 10, "GET"),
            (r"^\d+\.\d+$", 0, 10, "0.0"),
        ];
        for (pattern, min, max, want) in cases {
            assert_eq!(matching(pattern, min, max).unwrap(), want, "{pattern}");
        }
        // A repetition grows until the length fits.
        assert_eq!(matching("^x*$", 5, 8).unwrap(), "xxxxxxxx");
        assert!(matching("^[a-z]{2}$", 3, 5).is_err());
        assert!(matching("(", 0, 5).unwrap_err().contains("parse"));
        // Bounded, in bytes and in work.
        assert!(
            matching("^a{100000}$", 0, 200_000)
                .unwrap_err()
                .contains("longer")
        );
        // A repetition of a branch that writes nothing.
        let e = matching("(?:|a){4000000000}", 1, 5).unwrap_err();
        assert!(e.contains("steps"), "{e}");
    }
}
