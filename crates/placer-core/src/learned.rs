//! What the policies learned about this machine, kept across daemon restarts: a small
//! typed record the daemon writes to its state dir (`learned.json`) when it changes and
//! gives back to the policies at its next start, so that a restarted daemon does not
//! explore again what its predecessor measured (issue 45: on the 16-core device each fresh
//! daemon pinned receivers onto the receive CPU again, where that class had already been
//! measured to cost CPU per byte).
//!
//! Today one policy learns something worth keeping: net-affinity's record of what each
//! placement class (on the receive CPU, beside it) cost the moved receivers
//! ([`ClassRecord`]). A new kind of memory is a variant of [`Learned`]: every match on it
//! is exhaustive, so it cannot be added without its handling.
//!
//! The file is pure data in and out ([`LearnedFile::to_json`], [`LearnedFile::parse`]); the
//! agent does the I/O.
//!
//! Invariants (each tested below; a test's name starts with the ones it checks):
//! - L1: a record is given back only on a machine of the same shape ([`shape_key`]: CPUs,
//!   packages, dies, cores, NUMA nodes and which CPUs share each cache); another shape's
//!   record is refused with why, never applied in part;
//! - L2: a record written and read back is the same record (each value within JSON's
//!   decimal rounding, 1e-12);
//! - L3: a file that does not parse, or of another format version, is refused with why;
//! - L4: what a file gives back is bounded and finite: at most [`MAX_RECORD`] values per
//!   class, none NaN or infinite (a crafted or torn file cannot grow a policy's memory or
//!   poison its statistics).

use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The file's format version; a file of another version is refused (L3).
pub const FORMAT_VERSION: u32 = 1;
/// The most values per class a file gives back (L4); net-affinity keeps fewer.
pub const MAX_RECORD: usize = 64;

/// net-affinity's measured record per placement class: log(after / before) of a moved
/// receiver's own CPU per byte, oldest first (`policies::net_affinity::ClassCosts`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRecord {
    pub on: Vec<f64>,
    pub beside: Vec<f64>,
}

/// One policy's memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Learned {
    /// net-affinity's placement classes.
    NetAffinityClasses(ClassRecord),
}

impl Learned {
    /// L4: bounded (the newest [`MAX_RECORD`]) and finite.
    fn bounded(self) -> Learned {
        fn clean(v: Vec<f64>) -> Vec<f64> {
            let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
            let skip = v.len().saturating_sub(MAX_RECORD);
            v[skip..].to_vec()
        }
        match self {
            Learned::NetAffinityClasses(r) => Learned::NetAffinityClasses(ClassRecord {
                on: clean(r.on),
                beside: clean(r.beside),
            }),
        }
    }

    /// "net-affinity: 4 moves on the receive CPU, 3 beside it".
    pub fn describe(&self) -> String {
        match self {
            Learned::NetAffinityClasses(r) => format!(
                "net-affinity: {} measured move(s) on the receive CPU, {} beside it",
                r.on.len(),
                r.beside.len()
            ),
        }
    }
}

/// The state dir's `learned.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedFile {
    pub version: u32,
    /// [`shape_key`] of the machine it was learned on.
    pub shape: String,
    /// Unix time of the write, seconds (for people: it decides nothing).
    pub saved_unix_s: f64,
    pub learned: Vec<Learned>,
}

/// Why a file gives nothing back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("not a learned record: {0}")]
    Unreadable(String),
    #[error("format version {found}, this placer reads {FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("learned on a machine of another shape ({found}; this one is {here})")]
    OtherShape { found: String, here: String },
}

impl LearnedFile {
    pub fn new(topo: &Topology, saved_unix_s: f64, learned: Vec<Learned>) -> LearnedFile {
        LearnedFile {
            version: FORMAT_VERSION,
            shape: shape_key(topo),
            saved_unix_s,
            learned,
        }
    }

    pub fn to_json(&self) -> String {
        // Plain data: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The file's text, checked (L3); not yet against a machine (see [`LearnedFile::for_machine`]).
    pub fn parse(text: &str) -> Result<LearnedFile, Refused> {
        // The version first, so that a newer placer's file says so rather than "unreadable".
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let v: Version =
            serde_json::from_str(text).map_err(|e| Refused::Unreadable(e.to_string()))?;
        if v.version != FORMAT_VERSION {
            return Err(Refused::Version { found: v.version });
        }
        let f: LearnedFile =
            serde_json::from_str(text).map_err(|e| Refused::Unreadable(e.to_string()))?;
        Ok(f)
    }

    /// What this file gives back on `topo` (L1, L4).
    pub fn for_machine(self, topo: &Topology) -> Result<Vec<Learned>, Refused> {
        let here = shape_key(topo);
        if self.shape != here {
            return Err(Refused::OtherShape {
                found: self.shape,
                here,
            });
        }
        Ok(self.learned.into_iter().map(Learned::bounded).collect())
    }
}

/// The machine's shape as the learned costs depend on it: which CPUs exist, their
/// package, die, core and node, and which CPUs share each cache level. Not the CPUs this
/// process may use now, their load, frequencies or the NICs' receive CPUs: those move
/// while the machine stays the same, and a class ("on" or "beside" the receive CPU) is
/// measured relative to whichever CPU receives.
pub fn shape_key(topo: &Topology) -> String {
    let mut s = String::new();
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for c in &topo.cpus {
        let _ = write!(
            s,
            "{}:p{}d{}c{}n{};",
            c.id,
            opt(c.package),
            opt(c.die),
            opt(c.core),
            opt(c.node)
        );
    }
    let mut caches: Vec<String> = topo
        .caches
        .iter()
        .map(|c| format!("L{}{:?}[{}]", c.level, c.kind, c.cpus))
        .collect();
    caches.sort();
    caches.dedup();
    s.push_str(&caches.join(","));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Machine;

    fn topo(m: Machine) -> Topology {
        crate::machines::build(m)
    }

    fn record() -> Vec<Learned> {
        vec![Learned::NetAffinityClasses(ClassRecord {
            on: vec![0.31, 0.49, 0.22],
            beside: vec![-0.01, 0.02],
        })]
    }

    #[test]
    fn l1_a_record_comes_back_on_the_same_shape_only() {
        let a = topo(Machine::ALL[0]);
        let f = LearnedFile::new(&a, 1.0, record());
        assert_eq!(f.clone().for_machine(&a), Ok(record()));
        let other = Machine::ALL
            .into_iter()
            .map(topo)
            .find(|t| shape_key(t) != shape_key(&a))
            .expect("two built-in machines of different shapes");
        match f.for_machine(&other) {
            Err(Refused::OtherShape { .. }) => {}
            r => panic!("another shape's record was given back: {r:?}"),
        }
    }

    #[test]
    fn l1_the_shape_ignores_what_moves_on_one_machine_and_sees_the_caches() {
        let a = topo(Machine::ALL[0]);
        let mut b = a.clone();
        for c in &mut b.cpus {
            c.allowed = false;
            c.max_khz = Some(1);
        }
        b.nics.clear();
        assert_eq!(shape_key(&a), shape_key(&b));
        let mut c = a.clone();
        let last = c.caches.len() - 1;
        c.caches[last].cpus = crate::CpuSet::from_iter([0]);
        assert_ne!(shape_key(&a), shape_key(&c), "a cache shared by other CPUs");
    }

    #[test]
    fn l2_written_and_read_back_is_the_same_record() {
        let a = topo(Machine::ALL[0]);
        let f = LearnedFile::new(&a, 1_764_000_000.5, record());
        assert_eq!(LearnedFile::parse(&f.to_json()), Ok(f));
    }

    #[test]
    fn l3_unreadable_and_other_versions_are_refused() {
        assert!(matches!(
            LearnedFile::parse("{\"version\": 1, \"shape\": "),
            Err(Refused::Unreadable(_))
        ));
        assert!(matches!(
            LearnedFile::parse("[1, 2]"),
            Err(Refused::Unreadable(_))
        ));
        let a = topo(Machine::ALL[0]);
        let mut f = LearnedFile::new(&a, 1.0, record());
        f.version = FORMAT_VERSION + 1;
        assert_eq!(
            LearnedFile::parse(&f.to_json()),
            Err(Refused::Version {
                found: FORMAT_VERSION + 1
            })
        );
        // An unknown kind of memory is refused, not skipped in part.
        let text = LearnedFile::new(&a, 1.0, record())
            .to_json()
            .replace("net_affinity_classes", "something_else");
        assert!(matches!(
            LearnedFile::parse(&text),
            Err(Refused::Unreadable(_))
        ));
    }

    #[test]
    fn l4_what_a_file_gives_back_is_bounded_and_finite() {
        let a = topo(Machine::ALL[0]);
        let long: Vec<f64> = (0..1000).map(|i| i as f64).collect();
        let f = LearnedFile::new(
            &a,
            1.0,
            vec![Learned::NetAffinityClasses(ClassRecord {
                on: long,
                beside: vec![f64::NAN, 0.5, f64::INFINITY],
            })],
        );
        // NaN cannot travel as JSON; the bound applies to what a parse gives too.
        let back = f.for_machine(&a).expect("same shape");
        let Learned::NetAffinityClasses(r) = &back[0];
        assert_eq!(r.on.len(), MAX_RECORD);
        assert_eq!(r.on.last(), Some(&999.0), "the newest kept");
        assert_eq!(r.beside, vec![0.5]);
    }
}
