//! The mutations: byte-level ones for every target (bit flips, interesting
//! bytes and integers, inserts, deletes, duplicated ranges, splices between
//! corpus entries) and text-aware ones for the text formats (a number token
//! replaced by a boundary value, a word by another word from the corpus, a
//! line deleted, duplicated or borrowed from another entry). Inputs stay
//! under [`MAX_LEN`] bytes so one execution stays cheap.

use crate::rng::Rng;

/// The longest input a mutation produces.
pub const MAX_LEN: usize = 64 << 10;

/// Numbers at the edges of every integer and float type, written as the
/// text formats write them.
const BOUNDARY_NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "-0",
    "0.0",
    "-0.0",
    "7",
    "8",
    "16",
    "31",
    "32",
    "63",
    "64",
    "127",
    "128",
    "255",
    "256",
    "4095",
    "4096",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "1e309",
    "1e-320",
    "3.4028235e38",
    "65504",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "0x7fffffff",
    "0xffffffffffffffff",
    "1e5",
    "0.5",
];

/// Bytes worth trying in binary formats.
const INTERESTING_BYTES: &[u8] = &[0, 1, 2, 7, 8, 16, 0x7f, 0x80, 0xfe, 0xff];

/// Integers worth trying in binary formats, written little endian.
const INTERESTING_INTS: &[u64] = &[
    0,
    1,
    u8::MAX as u64,
    0x100,
    u16::MAX as u64,
    0x1_0000,
    i32::MAX as u64,
    0x8000_0000,
    u32::MAX as u64,
    0x1_0000_0000,
    i64::MAX as u64,
    0x8000_0000_0000_0000,
    u64::MAX,
    0x7ff0_0000_0000_0000, // f64 infinity
    0x7ff8_0000_0000_0000, // f64 NaN
];

/// Mutates inputs of one target.
pub struct Mutator {
    /// Words and punctuation seen in the seeds, for token replacement.
    dict: Vec<Vec<u8>>,
}

impl Mutator {
    /// A mutator whose dictionary is every word of `seeds` plus `extra`.
    pub fn new(seeds: &[Vec<u8>], extra: &[&str]) -> Mutator {
        let mut dict: Vec<Vec<u8>> = extra.iter().map(|w| w.as_bytes().to_vec()).collect();
        for s in seeds {
            for (a, b) in tokens(s) {
                if b - a <= 32 {
                    dict.push(s[a..b].to_vec());
                }
            }
        }
        dict.sort();
        dict.dedup();
        Mutator { dict }
    }

    /// A mutant of `input`: one to eight mutations, drawing on `corpus` for
    /// splices.
    pub fn mutate(&self, rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        let mut out = input.to_vec();
        let text = is_text(input);
        let rounds = 1 + rng.below(8).min(rng.below(8));
        for _ in 0..rounds {
            if text && rng.below(5) != 0 {
                self.text_mutation(rng, &mut out, corpus);
            } else {
                byte_mutation(rng, &mut out, corpus);
            }
        }
        out.truncate(MAX_LEN);
        out
    }

    fn text_mutation(&self, rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        match rng.below(7) {
            // A number becomes a boundary value.
            0 | 1 => {
                let nums: Vec<(usize, usize)> = tokens(out)
                    .into_iter()
                    .filter(|&(a, _)| out[a].is_ascii_digit() || out[a] == b'-')
                    .collect();
                if nums.is_empty() {
                    return;
                }
                let (a, b) = *rng.pick(&nums);
                let n = rng.pick(BOUNDARY_NUMBERS).as_bytes();
                out.splice(a..b, n.iter().copied());
            }
            // A word becomes another word of the corpus.
            2 | 3 => {
                let toks = tokens(out);
                if toks.is_empty() || self.dict.is_empty() {
                    return;
                }
                let (a, b) = *rng.pick(&toks);
                let w = rng.pick(&self.dict).clone();
                out.splice(a..b, w);
            }
            // A line deleted, duplicated, or moved.
            4 => {
                let lines = line_spans(out);
                if lines.is_empty() {
                    return;
                }
                let (a, b) = *rng.pick(&lines);
                let line = out[a..b].to_vec();
                match rng.below(3) {
                    0 => {
                        out.drain(a..b);
                    }
                    1 => {
                        out.splice(a..a, line);
                    }
                    _ => {
                        out.drain(a..b);
                        let lines = line_spans(out);
                        let at = lines.get(rng.below(lines.len())).map_or(0, |l| l.0);
                        out.splice(at..at, line);
                    }
                }
            }
            // A line borrowed from another corpus entry.
            5 => {
                let other = rng.pick(corpus);
                let theirs = line_spans(other);
                if theirs.is_empty() {
                    return;
                }
                let (a, b) = *rng.pick(&theirs);
                let ours = line_spans(out);
                let at = ours.get(rng.below(ours.len())).map_or(0, |l| l.0);
                out.splice(at..at, other[a..b].iter().copied());
            }
            // A dictionary word inserted anywhere.
            _ => {
                if self.dict.is_empty() {
                    return;
                }
                let at = rng.below(out.len() + 1);
                let w = rng.pick(&self.dict).clone();
                out.splice(at..at, w);
            }
        }
    }
}

fn byte_mutation(rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = out.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            out[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            out[i] = if rng.one_in(2) {
                *rng.pick(INTERESTING_BYTES)
            } else {
                rng.next_u64() as u8
            };
        }
        2 if len > 0 => {
            // An interesting integer of 2, 4 or 8 bytes, little endian.
            let width = [2, 4, 8][rng.below(3)];
            let v = *rng.pick(INTERESTING_INTS);
            let v = if rng.one_in(4) { v.wrapping_neg() } else { v };
            let at = rng.below(len);
            for (k, b) in v.to_le_bytes().iter().take(width).enumerate() {
                if let Some(x) = out.get_mut(at + k) {
                    *x = *b;
                }
            }
        }
        3 if len > 0 => {
            // Delete a range.
            let a = rng.below(len);
            let n = 1 + rng.below((len - a).min(16));
            out.drain(a..a + n);
        }
        4 => {
            // Insert random bytes.
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            out.splice(at..at, bytes);
        }
        5 if len > 0 => {
            // Duplicate a range.
            let a = rng.below(len);
            let n = 1 + rng.below((len - a).min(64));
            let chunk = out[a..a + n].to_vec();
            let at = rng.below(len + 1);
            out.splice(at..at, chunk);
        }
        6 => {
            // Splice: our prefix, another entry's suffix.
            let other = rng.pick(corpus);
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            out.truncate(cut);
            out.extend_from_slice(&other[from..]);
        }
        7 => {
            // A chunk of another entry inserted.
            let other = rng.pick(corpus);
            if other.is_empty() {
                return;
            }
            let a = rng.below(other.len());
            let n = 1 + rng.below((other.len() - a).min(64));
            let at = rng.below(len + 1);
            out.splice(at..at, other[a..a + n].iter().copied());
        }
        _ if len > 1 => {
            // Truncate.
            out.truncate(rng.below(len));
        }
        _ => out.push(rng.next_u64() as u8),
    }
}

/// True when `b` reads as text: text mutations then apply.
fn is_text(b: &[u8]) -> bool {
    let printable = b
        .iter()
        .filter(|&&c| c == b'\n' || c == b'\t' || (0x20..0x7f).contains(&c))
        .count();
    !b.is_empty() && printable * 10 >= b.len() * 9
}

/// Spans of words: runs of alphanumerics plus `_ . - +` (so numbers such as
/// `-1.5e-3` and names such as `reduce_sum` are one token each).
fn tokens(b: &[u8]) -> Vec<(usize, usize)> {
    let word = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'+');
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if word(b[i]) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

/// Spans of lines, each with its newline.
fn line_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < b.len() {
        out.push((start, b.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutants stay bounded and a seed reproduces them.
    #[test]
    fn mutants_are_reproducible_and_bounded() {
        let seeds = vec![b"graph {\n  %0 = input 0 : f32[4]\n  return %0\n}\n".to_vec()];
        let m = Mutator::new(&seeds, &["add"]);
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..200)
                .map(|_| m.mutate(&mut rng, &seeds[0], &seeds))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert!(a.iter().all(|x| x.len() <= MAX_LEN));
        assert!(a.iter().any(|x| x != &seeds[0]));
    }
}
