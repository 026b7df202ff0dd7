//! A set of logical CPU ids, in both of Linux's text forms.
//!
//! Linux writes CPU sets two ways: as lists (`0-3,8,10-11`, the `*_list` files,
//! `Cpus_allowed_list`) and as hex masks made of comma-separated 32-bit words, most
//! significant first (`0000,00ff00ff`, the older `*_siblings`/`cpumap` files and
//! `/proc/irq/N/smp_affinity`). Both parse into the same bitset.
//!
//! Invariants: the set has no upper bound other than memory (a mask of 8,192 bits is
//! fine); `parse_list(s.to_list_string()) == s` and `parse_mask(s.to_mask_string()) == s`
//! for every set `s` (tested by property tests).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;
use std::fmt;

/// Largest CPU id accepted by the parsers. Linux's NR_CPUS tops out at 8,192; a larger
/// number in a file is malformed input, not a machine.
pub const MAX_CPU_ID: u32 = 1 << 16;

#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit i of word w is CPU 64*w + i. No trailing zero words (so `==` is set equality).
    /// Inline up to 128 CPUs: a sample holds a set per process and thread, and cloning them
    /// must not allocate on common machines.
    words: SmallVec<[u64; 2]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("empty element in CPU list {0:?}")]
    EmptyElement(String),
    #[error("bad number {num:?} in CPU list {text:?}")]
    BadNumber { text: String, num: String },
    #[error("reversed range {lo}-{hi} in CPU list {text:?}")]
    ReversedRange { text: String, lo: u32, hi: u32 },
    #[error("bad stride in CPU list {0:?}")]
    BadStride(String),
    #[error("CPU id {id} above the limit {MAX_CPU_ID} in {text:?}")]
    TooLarge { text: String, id: u32 },
    #[error("bad hex word {word:?} in CPU mask {text:?}")]
    BadMaskWord { text: String, word: String },
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The set `{0, 1, ..., n-1}`.
    pub fn first_n(n: u32) -> Self {
        (0..n).collect()
    }

    pub fn single(cpu: u32) -> Self {
        let mut s = Self::new();
        s.insert(cpu);
        s
    }

    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1u64 << b;
    }

    /// Inserts `lo, lo + stride, ...` up to `hi`, a 64-bit word at a time: parsing costs
    /// the number of words a range spans, not the number of CPUs in it (a hostile list of
    /// many wide ranges must not cost seconds).
    fn insert_progression(&mut self, lo: u32, hi: u32, stride: u32) {
        let w_hi = hi as usize / 64;
        if self.words.len() <= w_hi {
            self.words.resize(w_hi + 1, 0);
        }
        if stride == 1 {
            // Whole words between the partial first and last ones.
            let (w_lo, b_lo, b_hi) = (lo as usize / 64, lo % 64, hi % 64);
            let low = u64::MAX << b_lo;
            let high = if b_hi == 63 {
                u64::MAX
            } else {
                (1u64 << (b_hi + 1)) - 1
            };
            if w_lo == w_hi {
                self.words[w_lo] |= low & high;
            } else {
                self.words[w_lo] |= low;
                self.words[w_lo + 1..w_hi].fill(u64::MAX);
                self.words[w_hi] |= high;
            }
            return;
        }
        if stride >= 64 {
            // At most one CPU per word.
            let mut c = lo;
            while c <= hi {
                self.insert(c);
                c = c.saturating_add(stride);
                if c == u32::MAX {
                    break;
                }
            }
            self.trim();
            return;
        }
        for w in lo as usize / 64..=w_hi {
            let base = w as u32 * 64;
            let first = if base <= lo {
                lo
            } else {
                lo + (base - lo).div_ceil(stride) * stride
            };
            if first > hi || first > base + 63 {
                continue;
            }
            // Bits first, first + stride, ... by doubling the pattern.
            let mut bits = 1u64 << (first - base);
            let mut span = stride;
            while span < 64 {
                bits |= bits << span;
                span *= 2;
            }
            let top = hi.min(base + 63) - base;
            let keep = if top == 63 {
                u64::MAX
            } else {
                (1u64 << (top + 1)) - 1
            };
            self.words[w] |= bits & keep;
        }
        // Words the range spans may end up empty (a sparse progression): no trailing zeros.
        self.trim();
    }

    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1u64 << b);
        }
        self.trim();
    }

    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = (cpu as usize / 64, cpu % 64);
        self.words
            .get(w)
            .is_some_and(|word| word & (1u64 << b) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    pub fn last(&self) -> Option<u32> {
        let w = self.words.len().checked_sub(1)?;
        let word = self.words[w];
        Some(w as u32 * 64 + 63 - word.leading_zeros())
    }

    /// CPU ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some(w as u32 * 64 + b)
            })
        })
    }

    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n).map(|i| self.word(i) | other.word(i)).collect();
        Self::from_words(words)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().min(other.words.len());
        Self::from_words((0..n).map(|i| self.word(i) & other.word(i)).collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        Self::from_words(
            (0..self.words.len())
                .map(|i| self.word(i) & !other.word(i))
                .collect(),
        )
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        let n = self.words.len().min(other.words.len());
        (0..n).any(|i| self.word(i) & other.word(i) != 0)
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn from_words(words: SmallVec<[u64; 2]>) -> Self {
        let mut s = CpuSet { words };
        s.trim();
        s
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Parses the list form: `0-3,8,10-11`, also the stride form `0-62:2` that some
    /// kernels write for node cpumaps, surrounding whitespace and an empty string (the
    /// empty set, as in an empty `cpulist`).
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        let t = text.trim();
        let mut set = CpuSet::new();
        if t.is_empty() {
            return Ok(set);
        }
        let num = |s: &str| -> Result<u32, CpuSetError> {
            let v: u32 = s.trim().parse().map_err(|_| CpuSetError::BadNumber {
                text: text.to_string(),
                num: s.to_string(),
            })?;
            if v > MAX_CPU_ID {
                return Err(CpuSetError::TooLarge {
                    text: text.to_string(),
                    id: v,
                });
            }
            Ok(v)
        };
        for part in t.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(CpuSetError::EmptyElement(text.to_string()));
            }
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => {
                    let s = num(s)?;
                    if s == 0 {
                        return Err(CpuSetError::BadStride(text.to_string()));
                    }
                    (r, s)
                }
                None => (part, 1),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let v = num(range)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(CpuSetError::ReversedRange {
                    text: text.to_string(),
                    lo,
                    hi,
                });
            }
            set.insert_progression(lo, hi, stride);
        }
        Ok(set)
    }

    /// Parses the mask form: comma-separated hex words of up to 32 bits, most significant
    /// first (`0000,00ff00ff`); an optional `0x` per word as hwloc writes it.
    pub fn parse_mask(text: &str) -> Result<CpuSet, CpuSetError> {
        let t = text.trim();
        let bad = |w: &str| CpuSetError::BadMaskWord {
            text: text.to_string(),
            word: w.to_string(),
        };
        if t.is_empty() {
            return Err(bad(""));
        }
        let parts: Vec<&str> = t.split(',').collect();
        let mut set = CpuSet::new();
        for (i, raw) in parts.iter().rev().enumerate() {
            let w = raw.trim();
            let w = w
                .strip_prefix("0x")
                .or_else(|| w.strip_prefix("0X"))
                .unwrap_or(w);
            if w.is_empty() || w.len() > 8 || !w.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(raw));
            }
            let v = u32::from_str_radix(w, 16).map_err(|_| bad(raw))?;
            let base = i as u64 * 32;
            if v != 0 && base + 31 - u64::from(v.leading_zeros()) > u64::from(MAX_CPU_ID) {
                return Err(CpuSetError::TooLarge {
                    text: text.to_string(),
                    id: (base as u32).saturating_add(31 - v.leading_zeros()),
                });
            }
            let mut rest = v;
            while rest != 0 {
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                set.insert(base as u32 + b);
            }
        }
        Ok(set)
    }

    /// The list form, ranges merged: `0-3,8,10-11`; the empty set prints as "".
    pub fn to_list_string(&self) -> String {
        let mut out = String::new();
        let mut it = self.iter().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi = it.next().unwrap_or(hi);
            }
            if !out.is_empty() {
                out.push(',');
            }
            if lo == hi {
                out.push_str(&lo.to_string());
            } else {
                out.push_str(&format!("{lo}-{hi}"));
            }
        }
        out
    }

    /// The mask form as the kernel prints it: 8 hex digits per 32-bit word, comma-separated,
    /// at least `min_words` words (the kernel pads to NR_CPUS); the empty set is `00000000`.
    pub fn to_mask_string_padded(&self, min_words: usize) -> String {
        let nwords = (self.words.len() * 2).max(min_words).max(1);
        let mut w32: Vec<u32> = (0..nwords)
            .map(|i| {
                let w = self.word(i / 2);
                if i % 2 == 0 {
                    w as u32
                } else {
                    (w >> 32) as u32
                }
            })
            .collect();
        while w32.len() > min_words.max(1) && w32.last() == Some(&0) {
            w32.pop();
        }
        w32.iter()
            .rev()
            .map(|w| format!("{w:08x}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn to_mask_string(&self) -> String {
        self.to_mask_string_padded(1)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for c in iter {
            self.insert(c);
        }
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list_string())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list_string())
    }
}

impl std::str::FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse_list(s)
    }
}

impl PartialOrd for CpuSet {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CpuSet {
    /// Lexicographic on the sorted ids; gives a stable order for reports.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

/// Serialized as an array of ids (`[0,1,2]`), the form `placer topo --json` promises.
impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Ids(Vec<u32>),
            List(String),
        }
        match Form::deserialize(d)? {
            Form::Ids(v) => Ok(v.into_iter().collect()),
            Form::List(s) => CpuSet::parse_list(&s).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_lists() {
        let s = CpuSet::parse_list("0-3,8,10-11\n").unwrap();
        assert_eq!(s.to_vec(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_list_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse_list("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse_list("0-62:2").unwrap().len(), 32);
        assert_eq!(
            CpuSet::parse_list("1-61:4").unwrap().to_vec()[..3],
            [1, 5, 9]
        );
    }

    #[test]
    fn rejects_bad_lists() {
        for bad in [
            "0-", "-3", "1,,2", "3-1", "a", "0-3,x", "1:0", "99999999", "0-2:0",
        ] {
            assert!(CpuSet::parse_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parses_masks() {
        let s = CpuSet::parse_mask("0000,00ff00ff").unwrap();
        assert_eq!(s.to_list_string(), "0-7,16-23");
        assert_eq!(
            CpuSet::parse_mask("0x0000ffff,0xffffffff").unwrap().len(),
            48
        );
        assert_eq!(
            CpuSet::parse_mask("80000000,00000000").unwrap().to_vec(),
            vec![63]
        );
        assert!(CpuSet::parse_mask("00000000").unwrap().is_empty());
        assert_eq!(s.to_mask_string(), "00ff00ff");
        assert_eq!(s.to_mask_string_padded(2), "00000000,00ff00ff");
    }

    #[test]
    fn rejects_bad_masks() {
        for bad in ["", "zz", "0000,,ff", "123456789", "ff,", "0x"] {
            assert!(CpuSet::parse_mask(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn algebra() {
        let a = CpuSet::parse_list("0-7").unwrap();
        let b = CpuSet::parse_list("4-11,70").unwrap();
        assert_eq!(a.union(&b).to_list_string(), "0-11,70");
        assert_eq!(a.intersection(&b).to_list_string(), "4-7");
        assert_eq!(a.difference(&b).to_list_string(), "0-3");
        assert_eq!(b.difference(&a).to_list_string(), "8-11,70");
        assert!(a.intersection(&b).is_subset(&a));
        assert!(!a.is_subset(&b));
        assert!(a.intersects(&b));
        assert_eq!(b.last(), Some(70));
        let mut c = b.clone();
        c.remove(70);
        assert_eq!(c.last(), Some(11));
        assert_eq!(c, CpuSet::parse_list("4-11").unwrap());
    }

    #[test]
    fn serde_as_ids() {
        let s = CpuSet::parse_list("1,3-4").unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), "[1,3,4]");
        let back: CpuSet = serde_json::from_str("[4,3,1]").unwrap();
        assert_eq!(back, s);
        let from_text: CpuSet = serde_json::from_str("\"1,3-4\"").unwrap();
        assert_eq!(from_text, s);
    }

    /// Issue 36: a list of many full-width ranges parses in time proportional to its
    /// words (it was linear in the CPUs named: a 160 KB list took 12 s; these 5,000 ranges of
    /// 65,537 CPUs were 330 million inserts).
    #[test]
    fn wide_ranges_parse_by_words() {
        let part = format!("0-{MAX_CPU_ID}");
        let text = vec![part.as_str(); 5_000].join(",");
        let strided = vec!["1-65535:3"; 5_000].join(",");
        // This thread's CPU time, not the wall clock: on a busy host (the suite's own
        // parallel tests, a build beside it) a linear parse can wait seconds for a CPU.
        let cpu_ns = || -> Option<u64> {
            std::fs::read_to_string("/proc/thread-self/schedstat")
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        let (t0, c0) = (std::time::Instant::now(), cpu_ns());
        let all = CpuSet::parse_list(&text).expect("list");
        let thirds = CpuSet::parse_list(&strided).expect("strided");
        let took = match (c0, cpu_ns()) {
            (Some(a), Some(b)) => std::time::Duration::from_nanos(b.saturating_sub(a)),
            _ => t0.elapsed(),
        };
        assert_eq!(all.len(), MAX_CPU_ID as usize + 1);
        assert_eq!(thirds.len(), 65535 / 3);
        assert!(thirds.contains(1) && thirds.contains(4) && !thirds.contains(2));
        assert!(
            took < std::time::Duration::from_secs(2),
            "took {took:?} of CPU"
        );
    }

    proptest! {
        #[test]
        fn progression_matches_stepping(lo in 0u32..700, len in 0u32..700, stride in 1u32..90) {
            let hi = lo + len;
            let mut got = CpuSet::new();
            got.insert_progression(lo, hi, stride);
            let want: CpuSet = (lo..=hi).step_by(stride as usize).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn list_round_trip(ids in proptest::collection::btree_set(0u32..5000, 0..200)) {
            let s: CpuSet = ids.iter().copied().collect();
            let back = CpuSet::parse_list(&s.to_list_string()).unwrap();
            prop_assert_eq!(&back, &s);
            prop_assert_eq!(back.to_vec(), ids.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn mask_round_trip(ids in proptest::collection::btree_set(0u32..5000, 0..200), pad in 0usize..200) {
            let s: CpuSet = ids.iter().copied().collect();
            prop_assert_eq!(CpuSet::parse_mask(&s.to_mask_string_padded(pad)).unwrap(), s);
        }

        #[test]
        fn parsers_never_panic(text in ".{0,64}") {
            let _ = CpuSet::parse_list(&text);
            let _ = CpuSet::parse_mask(&text);
        }

        #[test]
        fn parsers_never_panic_on_near_valid(text in "[0-9a-fx,:\\- ]{0,40}") {
            let _ = CpuSet::parse_list(&text);
            let _ = CpuSet::parse_mask(&text);
        }

        #[test]
        fn algebra_matches_btreeset(a in proptest::collection::btree_set(0u32..300, 0..50),
                                    b in proptest::collection::btree_set(0u32..300, 0..50)) {
            let (sa, sb): (CpuSet, CpuSet) = (a.iter().copied().collect(), b.iter().copied().collect());
            prop_assert_eq!(sa.union(&sb).to_vec(), a.union(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.intersection(&sb).to_vec(), a.intersection(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.difference(&sb).to_vec(), a.difference(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
            prop_assert_eq!(sa.len(), a.len());
        }
    }
}
