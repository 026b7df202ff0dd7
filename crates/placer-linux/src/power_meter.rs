//! Power meter (seed 000): power per system state (cluster, frequency), measured from
//! energy counters or power sensors when the machine has them, else predicted by the
//! machine's model ([`StatePowerTable::for_topology`], CALIBRATION A: IPA table for watts, EM
//! for ratios, `V^2 f` between points).
//!
//! Sources, all under a root path:
//! - RAPL: `sys/class/powercap/intel-rapl:N/energy_uj` (package zones; wraps at
//!   `max_energy_range_uj`);
//! - hwmon: `sys/class/hwmon/hwmonN/powerM_input` (microwatts);
//! - board sensors: INA231 on the Odroid-XU3 (`sys/bus/i2c/drivers/INA231/*/sensor_W`,
//!   watts as text; the XU4 has none, CALIBRATION A6).
//!
//! [`calibrate`] steps through states -- idle; then for each domain and frequency, one CPU
//! busy and all CPUs busy -- and derives per state the watts of a busy CPU and of the
//! active cluster: `busy = (P_all - P_one) / (K - 1)`, `cluster = P_one - P_idle - busy`,
//! `base = P_idle`. The result is a [`StatePowerTable`], written as a table
//! ([`StatePowerTable::to_table`]) that the energy-qos policy reads (`power_table`) in place of
//! the model.

use crate::error::{LinuxError, Result};
use crate::knobs::cpufreq;
use placer_core::power_table::{DomainPower, PowerPoint, StatePowerTable};
use placer_core::{CpuSet, Topology};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SensorKind {
    /// Cumulative microjoules.
    EnergyUj { max_range_uj: Option<u64> },
    /// Instantaneous microwatts.
    PowerUw,
    /// Instantaneous watts as decimal text.
    PowerW,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sensor {
    /// `rapl:package-0`, `hwmon:ina3221/power1`, `board:INA231/4-0040`.
    pub name: String,
    pub path: PathBuf,
    pub kind: SensorKind,
}

fn sorted_dir(p: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Finds the power sources under `root`.
pub fn discover(root: &Path) -> Vec<Sensor> {
    let mut v = Vec::new();
    for z in sorted_dir(&root.join("sys/class/powercap")) {
        let name = z.file_name().map(|n| n.to_string_lossy().into_owned());
        // Top-level zones only (intel-rapl:0, not intel-rapl:0:1): sub-zones are inside.
        let top = name
            .as_deref()
            .is_some_and(|n| n.starts_with("intel-rapl:") && n.matches(':').count() == 1);
        if top && z.join("energy_uj").exists() {
            v.push(Sensor {
                name: format!(
                    "rapl:{}",
                    crate::attr::read(&z.join("name"))
                        .unwrap_or_else(|| name.clone().unwrap_or_default())
                ),
                path: z.join("energy_uj"),
                kind: SensorKind::EnergyUj {
                    max_range_uj: crate::attr::read(&z.join("max_energy_range_uj"))
                        .and_then(|s| s.parse().ok()),
                },
            });
        }
    }
    for h in sorted_dir(&root.join("sys/class/hwmon")) {
        let chip = crate::attr::read(&h.join("name")).unwrap_or_default();
        for f in sorted_dir(&h) {
            let fname = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if fname.starts_with("power") && fname.ends_with("_input") {
                v.push(Sensor {
                    name: format!("hwmon:{chip}/{}", fname.trim_end_matches("_input")),
                    path: f,
                    kind: SensorKind::PowerUw,
                });
            }
        }
    }
    for d in sorted_dir(&root.join("sys/bus/i2c/drivers/INA231")) {
        if d.join("sensor_W").exists() {
            v.push(Sensor {
                name: format!(
                    "board:INA231/{}",
                    d.file_name().unwrap_or_default().to_string_lossy()
                ),
                path: d.join("sensor_W"),
                kind: SensorKind::PowerW,
            });
        }
    }
    v
}

/// Why no measured power exists under `root`, if so.
pub fn unavailable_reason(root: &Path) -> Option<String> {
    if discover(root).is_empty() {
        Some(format!(
            "no power sensor under {}: no RAPL (sys/class/powercap), no hwmon power*_input, \
             no board sensor (INA231)",
            root.display()
        ))
    } else {
        None
    }
}

fn read_num(p: &Path) -> Result<f64> {
    let t = crate::attr::read(p)
        .ok_or_else(|| LinuxError::Other(format!("{}: unreadable", p.display())))?;
    t.parse()
        .map_err(|e| LinuxError::parse(p, format!("{t:?}: {e}")))
}

/// Something that measures average watts over a duration (sensors, or a fake in tests).
pub trait Meter {
    fn watts(&mut self, dur: Duration) -> Result<f64>;
}

/// Sums all discovered sensors (energy counters over the interval, power sensors averaged
/// at 10 Hz).
pub struct SensorMeter {
    pub sensors: Vec<Sensor>,
}

impl Meter for SensorMeter {
    fn watts(&mut self, dur: Duration) -> Result<f64> {
        let start = Instant::now();
        let e0: Vec<Option<f64>> = self
            .sensors
            .iter()
            .map(|s| match s.kind {
                SensorKind::EnergyUj { .. } => read_num(&s.path).ok(),
                _ => None,
            })
            .collect();
        let mut inst_sum = 0.0;
        let mut n = 0u32;
        while start.elapsed() < dur {
            for s in &self.sensors {
                match s.kind {
                    SensorKind::PowerUw => inst_sum += read_num(&s.path)? / 1e6,
                    SensorKind::PowerW => inst_sum += read_num(&s.path)?,
                    SensorKind::EnergyUj { .. } => {}
                }
            }
            n += 1;
            std::thread::sleep(Duration::from_millis(100).min(dur));
        }
        let dt = start.elapsed().as_secs_f64();
        let mut w = if n > 0 { inst_sum / f64::from(n) } else { 0.0 };
        for (s, e0) in self.sensors.iter().zip(e0) {
            if let (SensorKind::EnergyUj { max_range_uj }, Some(e0)) = (&s.kind, e0) {
                let e1 = read_num(&s.path)?;
                let mut d = e1 - e0;
                if d < 0.0 {
                    d += max_range_uj.map_or(0.0, |m| m as f64);
                }
                w += d / 1e6 / dt;
            }
        }
        Ok(w)
    }
}

/// Reads a power table ([`StatePowerTable::to_table`]'s format); a malformed one is an error
/// naming the line at fault.
pub fn read_table(path: &Path) -> std::result::Result<StatePowerTable, String> {
    let t = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    StatePowerTable::parse_table(&t, &path.display().to_string())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Busy-loops on every CPU of `cpus` (one pinned thread each) until `stop` is set.
pub fn spin_load(
    cpus: &CpuSet,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    cpus.iter()
        .map(|cpu| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Best effort: an unpinned spinner still loads the machine.
                let _ = crate::sys::pin_self(cpu);
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect()
}

/// How to put the machine into a state and load it; real: cpufreq + spinning threads.
pub trait StateDriver {
    /// Caps domain `domain` at `khz`.
    fn set_freq(&mut self, domain: u32, khz: u64) -> Result<()>;
    /// Measures watts while `busy` CPUs spin.
    fn measure(&mut self, busy: &CpuSet, dur: Duration) -> Result<f64>;
}

/// The real machine: cpufreq caps under `root` (journaled in `prev`, restored by the
/// caller), spinning threads, and a [`Meter`].
pub struct RealDriver<M: Meter> {
    pub root: PathBuf,
    pub meter: M,
    pub prev: Vec<cpufreq::CpufreqPrev>,
}

impl<M: Meter> StateDriver for RealDriver<M> {
    fn set_freq(&mut self, domain: u32, khz: u64) -> Result<()> {
        let (prev, _) = cpufreq::cap_max(&self.root, domain, khz)?;
        if !self.prev.iter().any(|p| p.domain == domain) {
            self.prev.push(prev);
        }
        Ok(())
    }
    fn measure(&mut self, busy: &CpuSet, dur: Duration) -> Result<f64> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = spin_load(busy, stop.clone());
        // Let the governor and the sensor settle before measuring.
        std::thread::sleep(Duration::from_millis(300));
        let w = self.meter.watts(dur);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        w
    }
}

/// One measured state, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub domain: u32,
    pub khz: u64,
    pub busy_cpus: usize,
    pub watts: f64,
}

/// Steps through every (domain, frequency) state; returns the fitted table and the raw
/// steps. Other domains sit at their lowest frequency, idle, while one is measured.
pub fn calibrate(
    topo: &Topology,
    drv: &mut dyn StateDriver,
    dur: Duration,
    progress: &mut dyn FnMut(&Step),
) -> Result<(StatePowerTable, Vec<Step>)> {
    let doms: Vec<_> = topo
        .freq_domains
        .iter()
        .filter(|d| !d.available_khz.is_empty())
        .collect();
    if doms.is_empty() {
        return Err(LinuxError::Other(
            "no frequency domain with available frequencies: nothing to calibrate".into(),
        ));
    }
    for d in &doms {
        drv.set_freq(d.id, d.available_khz[0])?;
    }
    let idle = drv.measure(&CpuSet::new(), dur)?;
    let mut steps = vec![Step {
        domain: u32::MAX,
        khz: 0,
        busy_cpus: 0,
        watts: idle,
    }];
    progress(&steps[0]);
    let mut domains = Vec::new();
    for d in &doms {
        let cpus = d.cpus.intersection(&topo.allowed());
        let Some(first) = cpus.first() else { continue };
        let k = cpus.len();
        let mut points = Vec::new();
        for &khz in &d.available_khz {
            drv.set_freq(d.id, khz)?;
            let one = drv.measure(&CpuSet::single(first), dur)?;
            let all = if k > 1 { drv.measure(&cpus, dur)? } else { one };
            for (n, w) in [(1, one), (k, all)] {
                let s = Step {
                    domain: d.id,
                    khz,
                    busy_cpus: n,
                    watts: w,
                };
                progress(&s);
                steps.push(s);
            }
            let busy = if k > 1 {
                (all - one) / (k - 1) as f64
            } else {
                one - idle
            };
            points.push(PowerPoint {
                khz,
                busy_cpu_w: busy.max(0.0),
                cluster_active_w: (one - idle - busy).max(0.0),
            });
        }
        drv.set_freq(d.id, d.available_khz[0])?;
        domains.push(DomainPower {
            domain: d.id,
            points,
        });
    }
    Ok((
        StatePowerTable {
            base_w: idle,
            domains,
            source: "measured".into(),
        },
        steps,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_testkit::FakeRoot;
    use std::collections::BTreeMap;

    #[test]
    fn discovers_rapl_hwmon_and_board_sensors() {
        let r = FakeRoot::new("power-disc");
        assert!(discover(r.path()).is_empty());
        assert!(unavailable_reason(r.path())
            .unwrap()
            .contains("no power sensor"));
        r.write("sys/class/powercap/intel-rapl:0/energy_uj", "1000\n");
        r.write("sys/class/powercap/intel-rapl:0/name", "package-0\n");
        r.write(
            "sys/class/powercap/intel-rapl:0/max_energy_range_uj",
            "262143328850\n",
        );
        r.write("sys/class/powercap/intel-rapl:0:0/energy_uj", "5\n");
        r.write("sys/class/hwmon/hwmon1/name", "ina3221\n");
        r.write("sys/class/hwmon/hwmon1/power1_input", "2500000\n");
        r.write("sys/class/hwmon/hwmon1/temp1_input", "40000\n");
        r.write("sys/bus/i2c/drivers/INA231/4-0040/sensor_W", "1.234\n");
        let s = discover(r.path());
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "rapl:package-0",
                "hwmon:ina3221/power1",
                "board:INA231/4-0040"
            ]
        );
        assert!(unavailable_reason(r.path()).is_none());
        // Static readings: 2.5 W + 1.234 W, RAPL counter not moving.
        let w = SensorMeter { sensors: s }
            .watts(Duration::from_millis(150))
            .unwrap();
        assert!((w - 3.734).abs() < 1e-6, "{w}");
    }

    /// A machine whose power is a known function of the state: base 2 W, per active
    /// cluster 0.1 W/GHz, per busy CPU 0.5 W/GHz (domain 0) or 1.5 W/GHz (domain 4).
    struct FakeDriver {
        freq: BTreeMap<u32, u64>,
        sets: usize,
    }
    impl StateDriver for FakeDriver {
        fn set_freq(&mut self, domain: u32, khz: u64) -> Result<()> {
            self.freq.insert(domain, khz);
            self.sets += 1;
            Ok(())
        }
        fn measure(&mut self, busy: &CpuSet, _dur: Duration) -> Result<f64> {
            let mut w = 2.0;
            for (dom, per) in [(0u32, 0.5), (4, 1.5)] {
                let cpus = CpuSet::parse_list(if dom == 0 { "0-3" } else { "4-7" }).unwrap();
                let n = busy.intersection(&cpus).len() as f64;
                let ghz = self.freq[&dom] as f64 / 1e6;
                if n > 0.0 {
                    w += 0.1 * ghz + n * per * ghz;
                }
            }
            Ok(w)
        }
    }

    #[test]
    fn calibration_recovers_a_known_power_function() {
        let topo = placer_core::machines::machine("odroid-xu4").unwrap();
        let mut drv = FakeDriver {
            freq: BTreeMap::new(),
            sets: 0,
        };
        let mut n_steps = 0;
        let (m, steps) = calibrate(&topo, &mut drv, Duration::ZERO, &mut |_| n_steps += 1).unwrap();
        // idle + 2 measurements per state: 13 A7 + 19 A15 states.
        assert_eq!(steps.len(), 1 + 2 * (13 + 19));
        assert_eq!(n_steps, steps.len());
        assert!((m.base_w - 2.0).abs() < 1e-9);
        let p = m.point(4, 1_500_000).unwrap();
        assert!((p.busy_cpu_w - 1.5 * 1.5).abs() < 1e-9, "{p:?}");
        assert!((p.cluster_active_w - 0.15).abs() < 1e-9, "{p:?}");
        let p = m.point(0, 200_000).unwrap();
        assert!((p.busy_cpu_w - 0.1).abs() < 1e-9, "{p:?}");
        // The table is usable by the policy in place of the model.
        assert_eq!(m.domains.len(), 2);
    }

    #[test]
    fn calibration_needs_frequency_domains() {
        let topo = placer_core::machines::machine("pkg:1 core:2 pu:1").unwrap();
        let mut drv = FakeDriver {
            freq: BTreeMap::new(),
            sets: 0,
        };
        let e = calibrate(&topo, &mut drv, Duration::ZERO, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("no frequency domain"));
        assert_eq!(drv.sets, 0);
    }

    #[test]
    fn tables_round_trip_and_malformed_ones_name_their_line() {
        let topo = placer_core::machines::machine("odroid-xu4").unwrap();
        let m = StatePowerTable::for_topology(&topo);
        let r = FakeRoot::new("power-table");
        r.write("t.table", &m.to_table());
        let t = read_table(&r.join("t.table")).unwrap();
        assert!(t.source.starts_with("measured:"), "{}", t.source);
        assert_eq!(t.base_w, m.base_w);
        for (a, b) in t.domains.iter().zip(&m.domains) {
            assert_eq!(a.points.len(), b.points.len());
            for (x, y) in a.points.iter().zip(&b.points) {
                assert_eq!(x.khz, y.khz);
                assert!((x.busy_cpu_w - y.busy_cpu_w).abs() < 1e-12);
                assert!((x.cluster_active_w - y.cluster_active_w).abs() < 1e-12);
            }
        }
        for (text, line, what) in [
            ("base_w 0.5\n0 200000 0.1\n", 2, "found 3 field(s)"),
            (
                "base_w 0.5\n0 200000 0.1 0.2\n0 100000 0.1 0.2\n",
                3,
                "must ascend",
            ),
            ("# c\nbase_w -1\n", 2, "watts >= 0"),
            ("base_w 0.5\n0 200000 NaN 0.2\n", 2, "busy_cpu_w"),
            ("0 200000 0.1 0.2\n", 1, "no base_w"),
            ("base_w 0.5\n", 1, "no rows"),
        ] {
            r.write("bad.table", text);
            let e = read_table(&r.join("bad.table")).unwrap_err();
            assert!(e.contains(&format!("line {line}: ")), "{text:?}: {e}");
            assert!(e.contains(what), "{text:?}: {e}");
        }
        assert!(read_table(&r.join("missing.table")).is_err());
    }
}
