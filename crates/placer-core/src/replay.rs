//! The third host: a recording played back. [`ReplayHost`] serves a recording's samples in
//! order, its topology and its sources, and applies nothing (every action is reported as
//! skipped, as a dry run does), so the engine decides exactly as it did, or would have, on
//! the machine that recorded it: the same samples give the same observations, and in a dry
//! run the plans depend on nothing else (the engine's state is not updated from outcomes).
//! Golden-plan tests run recorded real traces through the engine this way.

use crate::host::{Host, HostError};
use crate::plan::{ActionReport, Outcome, Plan};
use crate::record::RecordHeader;
use crate::sample::{Sample, SampleRequest, SourceStatus};
use crate::topology::Topology;
use std::collections::VecDeque;

pub struct ReplayHost {
    topology: Topology,
    sources: SourceStatus,
    samples: VecDeque<Sample>,
}

impl ReplayHost {
    /// A host for a recording; an error when its header has no topology (recorded before
    /// the header carried one).
    pub fn new(header: &RecordHeader, samples: Vec<Sample>) -> Result<ReplayHost, HostError> {
        let topology = header.topology.clone().ok_or_else(|| {
            HostError::new("replay", "the recording's header has no topology (too old)")
        })?;
        Ok(ReplayHost {
            topology,
            sources: header.sources.clone(),
            samples: samples.into(),
        })
    }

    /// Samples not yet served.
    pub fn remaining(&self) -> usize {
        self.samples.len()
    }
}

impl Host for ReplayHost {
    fn topology(&mut self) -> Result<Topology, HostError> {
        Ok(self.topology.clone())
    }
    fn sources(&mut self) -> SourceStatus {
        self.sources.clone()
    }
    /// The next recorded sample, whatever was asked: it holds what the recording run asked.
    fn sample(&mut self, _req: SampleRequest) -> Result<Sample, HostError> {
        self.samples
            .pop_front()
            .ok_or_else(|| HostError::new("replay", "end of the recording"))
    }
    fn apply(&mut self, plan: &Plan, _dry_run: bool) -> Vec<ActionReport> {
        plan.actions
            .iter()
            .map(|a| ActionReport {
                planned: a.clone(),
                outcome: Outcome::Skipped("replay: nothing is applied".into()),
            })
            .collect()
    }
    /// A replay applies nothing, so it has nothing to put back: its start and stop restore
    /// nothing, as the recorded run's did not need to for the plans it replays.
    fn journal(&mut self) -> Result<Vec<crate::journal::Entry>, HostError> {
        Ok(Vec::new())
    }
    fn restore_all(
        &mut self,
    ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
        Ok(Vec::new())
    }
    fn restore_where(
        &mut self,
        _which: &dyn Fn(&crate::journal::Entry) -> bool,
    ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
        Ok(Vec::new())
    }
}

/// A host that passes everything through to `inner` and hands each sample to `record`
/// (`placer daemon --record`): the recording holds exactly what the engine saw.
pub struct RecordingHost<'a, H: Host + ?Sized> {
    pub inner: &'a mut H,
    pub record: &'a mut dyn FnMut(&Sample),
}

impl<H: Host + ?Sized> Host for RecordingHost<'_, H> {
    fn topology(&mut self) -> Result<Topology, HostError> {
        self.inner.topology()
    }
    fn sources(&mut self) -> SourceStatus {
        self.inner.sources()
    }
    fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError> {
        let s = self.inner.sample(req)?;
        (self.record)(&s);
        Ok(s)
    }
    fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
        self.inner.apply(plan, dry_run)
    }
    fn journal(&mut self) -> Result<Vec<crate::journal::Entry>, HostError> {
        self.inner.journal()
    }
    fn restore_all(
        &mut self,
    ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
        self.inner.restore_all()
    }
    fn restore_where(
        &mut self,
        which: &dyn Fn(&crate::journal::Entry) -> bool,
    ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
        self.inner.restore_where(which)
    }
}

/// Runs the engine over a whole recording (dry run) and returns each cycle's plan, the
/// warm-up cycle included (empty).
pub fn plans(
    header: &RecordHeader,
    samples: Vec<Sample>,
    config: crate::config::Config,
) -> Result<Vec<Plan>, HostError> {
    let mut host = ReplayHost::new(header, samples)?;
    let mut engine = crate::engine::Engine::from_config(config, header.placer_pid);
    let mut out = Vec::new();
    while host.remaining() > 0 {
        let r = engine.step(&mut host, true);
        if let Some(e) = r.error {
            return Err(HostError::new("replay", e));
        }
        out.push(r.plan);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Action;
    use crate::sample::{CpuTimes, ProcSample};
    use crate::CpuSet;

    fn machine() -> Topology {
        crate::machines::synthetic("pkg:1 core:4").unwrap()
    }

    fn sample(t_s: u64, busy_ticks: u64) -> Sample {
        Sample {
            time_ns: t_s * 1_000_000_000,
            clk_tck: 100,
            cpus: (0..4)
                .map(|c| CpuTimes {
                    cpu: c,
                    user: t_s * 50,
                    idle: t_s * 50,
                    ..Default::default()
                })
                .collect(),
            procs: vec![std::sync::Arc::new(ProcSample {
                utime_ticks: busy_ticks,
                ..ProcSample::bare(4242, 7, "worker", CpuSet::first_n(4))
            })],
            ..Default::default()
        }
    }

    #[test]
    fn replays_serve_samples_in_order_and_apply_nothing() {
        let mut h = RecordHeader::new("h", 0, 1000, SourceStatus::default());
        assert!(ReplayHost::new(&h, vec![]).is_err(), "no topology: refused");
        h.topology = Some(machine());
        let mut host = ReplayHost::new(&h, vec![sample(1, 0), sample(2, 100)]).unwrap();
        assert_eq!(host.topology().unwrap(), machine());
        assert_eq!(
            host.sample(SampleRequest::default()).unwrap().time_ns,
            1_000_000_000
        );
        assert_eq!(
            host.sample(SampleRequest::default()).unwrap().time_ns,
            2_000_000_000
        );
        assert!(host.sample(SampleRequest::default()).is_err());
        let mut plan = Plan::default();
        plan.push(
            crate::policies::PolicyKind::NetAffinity,
            Action::PinProcess {
                proc: crate::sample::ProcKey {
                    pid: 1,
                    start_time_ticks: 1,
                },
                comm: "a".into(),
                cpus: CpuSet::first_n(1),
            },
            "why",
        );
        let r = host.apply(&plan, false);
        assert_eq!(r.len(), 1);
        assert!(matches!(r[0].outcome, Outcome::Skipped(_)));
    }

    #[test]
    fn replaying_twice_gives_the_same_plans_and_a_recording_host_records_what_it_serves() {
        let mut h = RecordHeader::new("h", 0, 1000, SourceStatus::default());
        h.topology = Some(machine());
        let samples: Vec<Sample> = (1..6).map(|t| sample(t, t * 100)).collect();
        let mut replay = ReplayHost::new(&h, samples.clone()).unwrap();
        let mut seen = Vec::new();
        let mut rec = |s: &Sample| seen.push(s.clone());
        let mut tee = RecordingHost {
            inner: &mut replay,
            record: &mut rec,
        };
        let mut engine = crate::engine::Engine::from_config(crate::config::Config::default(), 1);
        let mut live = Vec::new();
        for _ in 0..samples.len() {
            live.push(engine.step(&mut tee, true).plan);
        }
        assert_eq!(seen, samples);
        let again = plans(&h, seen, crate::config::Config::default()).unwrap();
        assert_eq!(again, live);
    }
}
