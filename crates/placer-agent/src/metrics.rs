//! Prometheus text-format metrics (exposition format 0.0.4) on a tiny HTTP server built on
//! std::net: one thread, one short request at a time, `GET /metrics` only. Loopback by
//! default (config `metrics.listen`).

use placer_core::engine::CycleReport;
use placer_core::policies::PolicyKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the effect-ratio histogram (after / before mean of a judged metric).
const EFFECT_BUCKETS: &[f64] = &[0.5, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 2.0];

/// A cumulative histogram over [`EFFECT_BUCKETS`].
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn add(&mut self, x: f64) {
        self.buckets.resize(EFFECT_BUCKETS.len(), 0);
        for (i, b) in EFFECT_BUCKETS.iter().enumerate() {
            if x <= *b {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += x;
    }
}

/// Upper bounds of the cycle-time histogram, seconds.
const BUCKETS_S: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

#[derive(Debug, Default)]
struct State {
    cycles: u64,
    cycle_sum_s: f64,
    last_cycle_s: f64,
    bucket_counts: Vec<u64>,
    actions: BTreeMap<(String, String), u64>,
    managed: usize,
    cpu_util: BTreeMap<u32, f64>,
    lease_breaks: u64,
    /// (policy, verdict) -> moves judged so.
    verdicts: BTreeMap<(String, String), u64>,
    /// (policy, metric) -> judged moves' after/before ratios, bucketed.
    effects: BTreeMap<(String, String), Histogram>,
    errors: u64,
    policies: BTreeMap<String, bool>,
    dry_run: bool,
    /// With `--nri`: containers placer manages; with `[kubernetes] metrics_labels`, each as
    /// (namespace, pod, container, policy).
    nri_managed: Option<usize>,
    nri_labels: Vec<[String; 4]>,
}

/// Shared between the loop (writer) and the server thread (reader).
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<State>>,
}

impl Metrics {
    pub fn new(policies: &[(PolicyKind, bool)], dry_run: bool) -> Metrics {
        let m = Metrics::default();
        {
            let mut s = m.lock();
            s.bucket_counts = vec![0; BUCKETS_S.len()];
            s.dry_run = dry_run;
            for (kind, on) in policies {
                s.policies.insert(kind.name().to_string(), *on);
            }
        }
        m
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic in the server thread must not stop the daemon from recording.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_policy(&self, kind: PolicyKind, enabled: bool) {
        self.lock()
            .policies
            .insert(kind.name().to_string(), enabled);
    }

    /// Records one cycle.
    pub fn record(&self, r: &CycleReport, cycle_s: f64) {
        let mut s = self.lock();
        s.cycles += 1;
        s.cycle_sum_s += cycle_s;
        s.last_cycle_s = cycle_s;
        if s.bucket_counts.len() != BUCKETS_S.len() {
            s.bucket_counts = vec![0; BUCKETS_S.len()];
        }
        for (i, b) in BUCKETS_S.iter().enumerate() {
            if cycle_s <= *b {
                s.bucket_counts[i] += 1;
            }
        }
        for ((kind, outcome), n) in r.action_counts() {
            *s.actions
                .entry((kind.to_string(), outcome.to_string()))
                .or_default() += n;
        }
        s.managed = r.managed;
        s.lease_breaks += r.lease_breaks.len() as u64;
        for v in &r.verdicts {
            *s.verdicts
                .entry((v.policy.to_string(), v.judgement.kind.name().to_string()))
                .or_default() += 1;
            for c in v.judgement.main.iter().chain(v.judgement.guard.iter()) {
                if c.before_mean > 0.0 && c.after_mean.is_finite() {
                    s.effects
                        .entry((v.policy.to_string(), c.metric.key().to_string()))
                        .or_default()
                        .add(c.after_mean / c.before_mean);
                }
            }
        }
        if r.error.is_some() {
            s.errors += 1;
        }
        if let Some(o) = &r.observation {
            s.cpu_util = o.cpus.iter().map(|c| (c.cpu, c.util)).collect();
        }
    }

    /// The NRI plugin's containers (`--nri`); one series each only with `labels` (bounded
    /// cardinality by default).
    pub fn set_containers(&self, views: &[placer_nri::placement::ContainerView], labels: bool) {
        use placer_nri::placement::Managed;
        let mut s = self.lock();
        let managed: Vec<_> = views
            .iter()
            .filter_map(|v| match &v.managed {
                Managed::Yes { policy, .. } => Some([
                    v.namespace.clone(),
                    v.pod.clone(),
                    v.container.clone(),
                    policy.name().to_string(),
                ]),
                Managed::No { .. } => None,
            })
            .collect();
        s.nri_managed = Some(managed.len());
        s.nri_labels = if labels { managed } else { Vec::new() };
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let s = self.lock();
        let mut o = String::new();
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(
            &mut o,
            "placer_cycle_seconds",
            "histogram",
            "Time one daemon cycle took (sample, observe, plan, apply).",
        );
        for (i, b) in BUCKETS_S.iter().enumerate() {
            let n = s.bucket_counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(o, "placer_cycle_seconds_bucket{{le=\"{b}\"}} {n}");
        }
        let _ = writeln!(o, "placer_cycle_seconds_bucket{{le=\"+Inf\"}} {}", s.cycles);
        let _ = writeln!(o, "placer_cycle_seconds_sum {}", s.cycle_sum_s);
        let _ = writeln!(o, "placer_cycle_seconds_count {}", s.cycles);
        head(
            &mut o,
            "placer_last_cycle_seconds",
            "gauge",
            "Time the latest cycle took.",
        );
        let _ = writeln!(o, "placer_last_cycle_seconds {}", s.last_cycle_s);
        head(
            &mut o,
            "placer_actions_total",
            "counter",
            "Actions applied, by kind and outcome (done, skipped, transient, permanent).",
        );
        for ((kind, outcome), n) in &s.actions {
            let _ = writeln!(
                o,
                "placer_actions_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        head(
            &mut o,
            "placer_action_verdicts_total",
            "counter",
            "Moves judged after their horizon, by policy and verdict (kept, undone, inconclusive).",
        );
        for ((policy, verdict), n) in &s.verdicts {
            let _ = writeln!(
                o,
                "placer_action_verdicts_total{{policy=\"{policy}\",verdict=\"{verdict}\"}} {n}"
            );
        }
        head(
            &mut o,
            "placer_action_effect_ratio",
            "histogram",
            "Judged moves' measured effect: after / before mean of each metric they were judged by, by policy and metric.",
        );
        for ((policy, metric), h) in &s.effects {
            let labels = format!("policy=\"{policy}\",metric=\"{metric}\"");
            for (i, b) in EFFECT_BUCKETS.iter().enumerate() {
                let n = h.buckets.get(i).copied().unwrap_or(0);
                let _ = writeln!(
                    o,
                    "placer_action_effect_ratio_bucket{{{labels},le=\"{b}\"}} {n}"
                );
            }
            let _ = writeln!(
                o,
                "placer_action_effect_ratio_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(o, "placer_action_effect_ratio_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(
                o,
                "placer_action_effect_ratio_count{{{labels}}} {}",
                h.count
            );
        }
        head(
            &mut o,
            "placer_managed_processes",
            "gauge",
            "Processes placer currently holds (pinned and not yet restored).",
        );
        let _ = writeln!(o, "placer_managed_processes {}", s.managed);
        head(
            &mut o,
            "placer_cpu_utilisation_ratio",
            "gauge",
            "Busy fraction of each CPU over the latest interval.",
        );
        for (cpu, u) in &s.cpu_util {
            let _ = writeln!(o, "placer_cpu_utilisation_ratio{{cpu=\"{cpu}\"}} {u:.4}");
        }
        head(
            &mut o,
            "placer_lease_breaks_total",
            "counter",
            "Processes released because something else changed their affinity.",
        );
        let _ = writeln!(o, "placer_lease_breaks_total {}", s.lease_breaks);
        head(
            &mut o,
            "placer_cycle_errors_total",
            "counter",
            "Cycles that could not sample or read the topology.",
        );
        let _ = writeln!(o, "placer_cycle_errors_total {}", s.errors);
        head(
            &mut o,
            "placer_policy_enabled",
            "gauge",
            "1 if the policy runs, 0 if disabled on this machine.",
        );
        for (p, on) in &s.policies {
            let _ = writeln!(
                o,
                "placer_policy_enabled{{policy=\"{p}\"}} {}",
                u8::from(*on)
            );
        }
        head(
            &mut o,
            "placer_dry_run",
            "gauge",
            "1 if the daemon only prints its plans.",
        );
        let _ = writeln!(o, "placer_dry_run {}", u8::from(s.dry_run));
        if let Some(n) = s.nri_managed {
            head(
                &mut o,
                "placer_nri_managed_containers",
                "gauge",
                "Containers the NRI plugin manages (placer daemon --nri).",
            );
            let _ = writeln!(o, "placer_nri_managed_containers {n}");
        }
        if !s.nri_labels.is_empty() {
            head(
                &mut o,
                "placer_nri_container_managed",
                "gauge",
                "1 for each container the NRI plugin manages ([kubernetes] metrics_labels).",
            );
            for [ns, pod, c, policy] in &s.nri_labels {
                let _ = writeln!(
                    o,
                    "placer_nri_container_managed{{namespace=\"{}\",pod=\"{}\",container=\"{}\",policy=\"{}\"}} 1",
                    escape(ns),
                    escape(pod),
                    escape(c),
                    escape(policy)
                );
            }
        }
        o
    }
}

/// A label value as the exposition format wants it (backslash, quote, newline escaped).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The most bytes of a request read (request line and headers together): a scrape needs a
/// few hundred; an endless line must not grow the daemon.
pub const MAX_REQUEST_BYTES: u64 = 8 * 1024;
/// Connections answered at once; more are closed at once. A slow client holds one slot.
pub const MAX_CONNECTIONS: usize = 16;
/// Connections one peer address may hold at once, so that one client (a local user, a pod)
/// cannot take every slot from the scraper.
pub const MAX_CONNECTIONS_PER_PEER: usize = 4;
/// The time a client has to send its whole request (not per read: a client trickling a
/// byte at a time is cut off here). A scraper sends its few hundred bytes at once.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);

/// Connections held, in all and per peer address.
#[derive(Default)]
struct Slots {
    total: usize,
    per_peer: std::collections::HashMap<std::net::IpAddr, usize>,
}

impl Slots {
    /// Takes a slot for `peer`, unless the server or the peer is at its limit.
    fn take(&mut self, peer: std::net::IpAddr) -> bool {
        let n = self.per_peer.entry(peer).or_default();
        if self.total >= MAX_CONNECTIONS || *n >= MAX_CONNECTIONS_PER_PEER {
            return false;
        }
        *n += 1;
        self.total += 1;
        true
    }

    /// The slots under their lock (a panicked holder poisons nothing that matters here).
    fn of(s: &std::sync::Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
        s.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give_back(&mut self, peer: std::net::IpAddr) {
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
        self.total = self.total.saturating_sub(1);
    }
}

/// Binds `listen` and serves `metrics` from a background thread, one short-lived thread
/// per connection (at most [`MAX_CONNECTIONS`], [`MAX_CONNECTIONS_PER_PEER`] from one
/// address). Returns the bound address (useful with port 0).
pub fn serve(listen: &str, metrics: Metrics) -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind(listen)?;
    let addr = l.local_addr()?;
    let slots = std::sync::Arc::new(std::sync::Mutex::new(Slots::default()));
    std::thread::Builder::new()
        .name("placer-metrics".into())
        .spawn(move || {
            for conn in l.incoming().flatten() {
                let Ok(peer) = conn.peer_addr().map(|a| a.ip()) else {
                    continue;
                };
                if !Slots::of(&slots).take(peer) {
                    // Busy: close at once rather than queue behind slow clients.
                    drop(conn);
                    continue;
                }
                let (m, s) = (metrics.clone(), slots.clone());
                let spawned = std::thread::Builder::new()
                    .name("placer-metrics-conn".into())
                    .spawn(move || {
                        let _ = answer(conn, &m);
                        Slots::of(&s).give_back(peer);
                    });
                if spawned.is_err() {
                    Slots::of(&slots).give_back(peer);
                }
            }
        })?;
    Ok(addr)
}

/// A TCP stream whose reads all end by one deadline.
struct DeadlineReader {
    conn: TcpStream,
    until: std::time::Instant,
}

impl std::io::Read for DeadlineReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self
            .until
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.read(buf)
    }
}

fn answer(mut conn: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    use std::io::Read;
    conn.set_write_timeout(Some(Duration::from_secs(2)))?;
    let raw = DeadlineReader {
        conn: conn.try_clone()?,
        until: std::time::Instant::now() + REQUEST_DEADLINE,
    };
    let mut reader = BufReader::new(raw.take(MAX_REQUEST_BYTES));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Drain the headers (bounded by the byte limit) so the client sees a clean close.
    let mut header = String::new();
    loop {
        header.clear();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, body, ctype) = if !line.ends_with('\n') {
        (
            "431 Request Header Fields Too Large",
            "request too large\n".to_string(),
            "text/plain",
        )
    } else if method == "GET" && (path == "/metrics" || path == "/") {
        (
            "200 OK",
            metrics.render(),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    } else {
        ("404 Not Found", "only /metrics\n".to_string(), "text/plain")
    };
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_core::observation::{CpuObs, Observation};
    use placer_core::plan::{Action, ActionReport, Outcome, PlannedAction};
    use std::io::Read;

    #[test]
    fn renders_every_family_and_serves_it() {
        let m = Metrics::new(&[(PolicyKind::NetAffinity, true)], false);
        let r = CycleReport {
            managed: 2,
            reports: vec![ActionReport {
                planned: PlannedAction {
                    action: Action::RestoreIrq { irq: 3 },
                    policy: placer_core::policies::PolicyKind::SmtEnergy,
                    reason: "r".into(),
                },
                outcome: Outcome::Done,
            }],
            observation: Some(Observation {
                cpus: vec![CpuObs {
                    cpu: 1,
                    util: 0.5,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        m.record(&r, 0.003);
        // A verdict: its effect lands in the histogram of its policy and metric.
        let cmp = |metric, before_mean, after_mean| placer_core::verdict::Comparison {
            metric,
            before_mean,
            after_mean,
            change: after_mean / before_mean - 1.0,
            t: 0.0,
            rho: 0.0,
            significant: false,
            beyond_noise: false,
            paired: None,
        };
        let judged = CycleReport {
            verdicts: vec![placer_core::verdict::Verdict {
                policy: placer_core::policies::PolicyKind::NetAffinity,
                proc: placer_core::sample::ProcKey {
                    pid: 9,
                    start_time_ticks: 1,
                },
                comm: "rx".into(),
                judgement: placer_core::verdict::Judgement {
                    kind: placer_core::verdict::VerdictKind::Kept,
                    main: Some(cmp(placer_core::verdict::Metric::CpuPerByte, 1.0, 0.7)),
                    guard: Some(cmp(placer_core::verdict::Metric::Throughput, 1.0, 1.02)),
                    why: String::new(),
                },
                backoff_intervals: None,
                trial: None,
            }],
            managed: 2,
            ..Default::default()
        };
        m.record(&judged, 0.003);
        let text = m.render();
        for want in [
            "placer_action_verdicts_total{policy=\"net-affinity\",verdict=\"kept\"} 1",
            "placer_action_effect_ratio_bucket{policy=\"net-affinity\",metric=\"cpu_per_byte\",le=\"0.5\"} 0",
            "placer_action_effect_ratio_bucket{policy=\"net-affinity\",metric=\"cpu_per_byte\",le=\"0.8\"} 1",
            "placer_action_effect_ratio_bucket{policy=\"net-affinity\",metric=\"throughput\",le=\"1\"} 0",
            "placer_action_effect_ratio_bucket{policy=\"net-affinity\",metric=\"throughput\",le=\"1.05\"} 1",
            "placer_action_effect_ratio_count{policy=\"net-affinity\",metric=\"throughput\"} 1",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        for want in [
            "placer_cycle_seconds_bucket{le=\"0.005\"} 2",
            "placer_cycle_seconds_bucket{le=\"0.0025\"} 0",
            "placer_cycle_seconds_count 2",
            "placer_actions_total{kind=\"restore_irq\",outcome=\"done\"} 1",
            "placer_managed_processes 2",
            "placer_cpu_utilisation_ratio{cpu=\"1\"} 0.5000",
            "placer_policy_enabled{policy=\"net-affinity\"} 1",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        use placer_nri::placement::{ContainerView, Managed};
        let view = |pod: &str, managed| ContainerView {
            namespace: "web".into(),
            pod: pod.into(),
            container: "app".into(),
            container_id: "c".into(),
            managed,
            cpus: None,
        };
        let views = [
            view(
                "a\"b",
                Managed::Yes {
                    policy: placer_core::policies::PolicyKind::SmtEnergy,
                    from: "x".into(),
                },
            ),
            view("b", Managed::No { why: "y".into() }),
        ];
        m.set_containers(&views, false);
        let text = m.render();
        assert!(text.contains("placer_nri_managed_containers 1"), "{text}");
        assert!(!text.contains("placer_nri_container_managed{"), "{text}");
        m.set_containers(&views, true);
        let text = m.render();
        assert!(
            text.contains("placer_nri_container_managed{namespace=\"web\",pod=\"a\\\"b\",container=\"app\",policy=\"smt-energy\"} 1"),
            "{text}"
        );
        let addr = serve("127.0.0.1:0", m).expect("bind");
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send");
        let mut resp = String::new();
        c.read_to_string(&mut resp).expect("read");
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(resp.contains("placer_managed_processes 2"));
    }
}
