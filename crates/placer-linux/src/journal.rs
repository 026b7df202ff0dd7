//! The journal: every knob placer changed, with its value before placer's first change, so
//! `placer restore`, a clean shutdown, or the next daemon after a crash put it back.
//!
//! One JSON file, `<state_dir>/journal.json`, rewritten whole on every change: written to a
//! temporary file, fsynced, renamed over the old one, and the directory fsynced, so a crash
//! (or SIGKILL, or power loss) leaves either the old or the new journal, never a torn one.
//! The actuator records a knob *before* changing it; a knob whose change then failed
//! without effect is removed again.
//!
//! Each entry keeps `previous` (the value before placer's first change; a later change of
//! the same knob never overwrites it) and `applied` (what placer last wrote). A restore
//! compares the knob's current value with `applied`: if they differ, someone else changed the
//! knob since, and placer leaves it alone (the lease idea, applied at restore time too).
//!
//! Knob kinds cover every knob placer's policies touch; each kind has a restorer registered
//! with the actuator (`crate::actuator::Handlers`). Values are text in the knob's own format
//! (a CPU list, a hex mask, kHz, a governor name, JSON for a qdisc setup).

use crate::error::{LinuxError, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const JOURNAL_FILE: &str = "journal.json";
pub const JOURNAL_VERSION: u32 = 1;

pub use placer_core::journal::{Entry, Knob};

#[derive(Debug, Serialize, Deserialize)]
struct File {
    version: u32,
    entries: Vec<Entry>,
}

/// The journal in memory, mirrored durably to its file on every change.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    entries: Vec<Entry>,
    read_only: bool,
}

fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Journal {
    /// Opens (creating the state directory if needed) the journal for writing.
    pub fn open(state_dir: &Path) -> Result<Journal> {
        crate::state_dir::prepare(state_dir)?;
        crate::state_dir::remove_stale_temporaries(state_dir);
        let mut j = Journal::load(state_dir)?;
        j.read_only = false;
        Ok(j)
    }

    /// Reads the journal without the right to change it (dry runs, `explain`). A missing
    /// file is an empty journal.
    pub fn load(state_dir: &Path) -> Result<Journal> {
        let path = state_dir.join(JOURNAL_FILE);
        // A journal is trusted only in a state dir no one else could have written.
        if std::fs::symlink_metadata(state_dir).is_ok() {
            crate::state_dir::check(state_dir)?;
        }
        let entries = match crate::state_dir::read_private(&path) {
            Ok(text) => {
                let f: File =
                    serde_json::from_str(&text).map_err(|e| LinuxError::parse(&path, e))?;
                if f.version != JOURNAL_VERSION {
                    return Err(LinuxError::parse(
                        &path,
                        format!(
                            "journal version {} (this placer reads {JOURNAL_VERSION})",
                            f.version
                        ),
                    ));
                }
                f.entries
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(LinuxError::io(&path, e)),
        };
        Ok(Journal {
            path,
            entries,
            read_only: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, knob: &Knob) -> Option<&Entry> {
        self.entries.iter().find(|e| &e.knob == knob)
    }

    /// Records that `knob` is about to be set to `applied`; `previous` is its value now.
    /// Keeps the first `previous` when the knob is already journaled. Durable on return.
    /// Returns whether the entry is new (so a failed change can drop it again).
    pub fn record(
        &mut self,
        knob: Knob,
        previous: &str,
        applied: &str,
        label: &str,
    ) -> Result<bool> {
        self.record_with_threads(knob, previous, applied, label, &Default::default())
    }

    /// [`Journal::record`] with the previous values of threads that differ from
    /// `previous`; a thread already journaled keeps its first value.
    pub fn record_with_threads(
        &mut self,
        knob: Knob,
        previous: &str,
        applied: &str,
        label: &str,
        threads: &std::collections::BTreeMap<u32, String>,
    ) -> Result<bool> {
        let new = match self.entries.iter_mut().find(|e| e.knob == knob) {
            Some(e) => {
                e.applied = applied.to_string();
                for (tid, v) in threads {
                    e.thread_previous.entry(*tid).or_insert_with(|| v.clone());
                }
                false
            }
            None => {
                self.entries.push(Entry {
                    knob,
                    previous: previous.to_string(),
                    applied: applied.to_string(),
                    label: label.to_string(),
                    since_unix_s: unix_now_s(),
                    thread_previous: threads.clone(),
                });
                true
            }
        };
        self.save()?;
        Ok(new)
    }

    /// Sets the note of `knob`'s entry to its first label (the process's comm) followed by
    /// `note` (a verdict); nothing if the knob is not journaled. Durable on return.
    pub fn annotate(&mut self, knob: &Knob, note: &str) -> Result<()> {
        let Some(e) = self.entries.iter_mut().find(|e| &e.knob == knob) else {
            return Ok(());
        };
        let base = e.label.split(" | ").next().unwrap_or("").to_string();
        e.label = format!("{base} | {note}");
        self.save()
    }

    /// Forgets a knob (restored, or its object is gone). Durable on return.
    /// Removes every entry of `knobs` with one durable write (restore and pruning remove
    /// many at once: one write each would make restoring N entries cost N rewrites).
    pub fn remove_many(&mut self, knobs: &[Knob]) -> Result<()> {
        if knobs.is_empty() {
            return Ok(());
        }
        let gone: std::collections::HashSet<&Knob> = knobs.iter().collect();
        let before = self.entries.len();
        self.entries.retain(|e| !gone.contains(&e.knob));
        if self.entries.len() != before {
            self.save()?;
        }
        Ok(())
    }

    /// Drops the entries of processes that exited (their pid no longer has the journaled
    /// start time under `root`): there is nothing left to restore, and keeping them would
    /// make the journal, and every write of it, grow with churn. Returns how many.
    pub fn prune_exited(&mut self, root: &Path) -> Result<usize> {
        let gone: Vec<Knob> = self
            .entries
            .iter()
            .filter(|e| match e.knob {
                Knob::ProcAffinity {
                    pid,
                    start_time_ticks,
                }
                | Knob::MemPolicy {
                    pid,
                    start_time_ticks,
                } => crate::pid::start_time_ticks(root, pid) != Some(start_time_ticks),
                _ => false,
            })
            .map(|e| e.knob.clone())
            .collect();
        self.remove_many(&gone)?;
        Ok(gone.len())
    }

    pub fn remove(&mut self, knob: &Knob) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|e| &e.knob != knob);
        if self.entries.len() != before {
            self.save()?;
        }
        Ok(())
    }

    /// Writes the whole journal atomically and durably.
    fn save(&self) -> Result<()> {
        if self.read_only {
            return Err(LinuxError::Other(format!(
                "{}: journal opened read-only",
                self.path.display()
            )));
        }
        let file = File {
            version: JOURNAL_VERSION,
            entries: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&file)
            .map_err(|e| LinuxError::Other(format!("serializing the journal: {e}")))?;
        write_durably(&self.path, text.as_bytes())
    }
}

/// Writes `bytes` to `path` via a temporary file, fsync and rename, then fsyncs the
/// directory so the rename itself survives a crash.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| LinuxError::io(p, e)
    };
    {
        // Ours from an earlier attempt (same pid) at most; never follow or reuse a name.
        let _ = std::fs::remove_file(&tmp);
        let mut f = crate::state_dir::create_new_private(&tmp)?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("placer-journal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn record_keeps_the_first_previous_and_survives_reopen() {
        let d = tmpdir("first");
        let mut j = Journal::open(&d).expect("open");
        let k = Knob::IrqAffinity { irq: 30 };
        assert!(j.record(k.clone(), "0-3", "1", "eth0").expect("record"));
        assert!(!j.record(k.clone(), "1", "2", "eth0").expect("record"));
        let j2 = Journal::load(&d).expect("load");
        let e = j2.get(&k).expect("entry");
        assert_eq!((e.previous.as_str(), e.applied.as_str()), ("0-3", "2"));
        // No temporary file left behind.
        let names: Vec<String> = std::fs::read_dir(&d)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![JOURNAL_FILE.to_string()]);
        let mut j = Journal::open(&d).expect("open");
        j.remove(&k).expect("remove");
        assert!(Journal::load(&d).expect("load").is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn every_knob_kind_round_trips() {
        let d = tmpdir("kinds");
        let mut j = Journal::open(&d).expect("open");
        let knobs = vec![
            Knob::ProcAffinity {
                pid: 1,
                start_time_ticks: 2,
            },
            Knob::IrqAffinity { irq: 3 },
            Knob::Rps {
                dev: "veth0".into(),
                queue: "rx-0".into(),
            },
            Knob::CpufreqMax { domain: 4 },
            Knob::CpufreqGovernor { domain: 4 },
            Knob::TcQdisc {
                dev: "eth0".into(),
                netns: Some("ns1".into()),
            },
            Knob::MemPolicy {
                pid: 5,
                start_time_ticks: 6,
            },
        ];
        for k in &knobs {
            j.record(k.clone(), "a", "b", "").expect("record");
        }
        let j2 = Journal::load(&d).expect("load");
        let back: Vec<Knob> = j2.entries().iter().map(|e| e.knob.clone()).collect();
        assert_eq!(back, knobs);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn read_only_journal_refuses_changes_and_bad_files_are_errors() {
        let d = tmpdir("ro");
        std::fs::create_dir_all(&d).expect("mkdir");
        let mut j = Journal::load(&d).expect("load missing = empty");
        assert!(j
            .record(Knob::IrqAffinity { irq: 1 }, "0", "1", "")
            .is_err());
        std::fs::write(d.join(JOURNAL_FILE), "{not json").expect("write");
        let e = Journal::load(&d).expect_err("torn");
        assert!(e.to_string().contains(JOURNAL_FILE), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Issue 17: restoring many entries is linear (batched journal writes): 6,000 entries
    /// of processes that exited settle in well under 2 s, and the journal ends empty.
    #[test]
    fn six_thousand_entries_restore_quickly() {
        let d = tmpdir("many");
        let mut j = Journal::open(&d).expect("open");
        // Built in memory and written once: recording 6,000 one by one is not under test.
        for n in 0..6000u32 {
            j.entries.push(Entry {
                knob: Knob::ProcAffinity {
                    pid: 4_000_000 + n,
                    start_time_ticks: 1,
                },
                previous: "0-1".into(),
                applied: "1".into(),
                label: "gone".into(),
                since_unix_s: 0,
                thread_previous: Default::default(),
            });
        }
        j.save().expect("save");
        let mut j = Journal::open(&d).expect("reopen");
        assert_eq!(j.entries().len(), 6000);
        let mut handlers = crate::actuator::Handlers::builtin();
        let t0 = std::time::Instant::now();
        let res = crate::actuator::restore_all(Path::new("/"), &mut j, &mut handlers);
        let took = t0.elapsed();
        assert_eq!(res.len(), 6000);
        assert!(res.iter().all(|(_, r)| r.settled()), "{:?}", res.first());
        assert!(j.is_empty());
        assert!(Journal::load(&d).expect("load").is_empty());
        assert!(
            took < std::time::Duration::from_secs(2),
            "restore took {took:?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn entries_of_exited_processes_are_pruned() {
        let d = tmpdir("prune");
        let mut j = Journal::open(&d).expect("open");
        let me = std::process::id();
        let start = crate::actuator::start_time_ticks(Path::new("/"), me).expect("own start");
        let live = Knob::ProcAffinity {
            pid: me,
            start_time_ticks: start,
        };
        let dead = Knob::ProcAffinity {
            pid: me,
            start_time_ticks: start + 1,
        };
        j.record(live.clone(), "0-1", "0", "me").unwrap();
        j.record(dead.clone(), "0-1", "0", "an earlier process with my pid")
            .unwrap();
        j.record(Knob::IrqAffinity { irq: 9 }, "0-1", "0", "irq")
            .unwrap();
        assert_eq!(j.prune_exited(Path::new("/")).unwrap(), 1);
        assert!(j.get(&live).is_some() && j.get(&dead).is_none());
        assert_eq!(Journal::load(&d).unwrap().entries().len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }
}
