//! Energy and power sources: powercap RAPL energy counters and hwmon power sensors.
//!
//! - `sys/class/powercap/intel-rapl:*` (and `amd-rapl:*`... any `*-rapl:*` zone):
//!   `energy_uj` is cumulative and wraps at `max_energy_range_uj`. The domain is the zone's
//!   directory name (`intel-rapl:0`, sub-zone `intel-rapl:0:0`), so the observation can sum
//!   top-level zones without counting sub-zones twice.
//! - `sys/class/hwmon/hwmon*/power*_input`: instantaneous microwatts; the sensor is named
//!   `hwmonN/<name>/powerK`.
//!
//! The files are found once by [`EnergySource::probe`] and read each sample; a file that
//! stops being readable just drops out of that sample.

use placer_core::sample::{EnergyCounter, PowerReading, Source, SourceKind};
use std::fs;
use std::path::{Path, PathBuf};

/// Parses a sysfs number file (`12345\n`).
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

#[derive(Debug, Default)]
pub struct EnergySource {
    rapl: Vec<(String, PathBuf, Option<u64>)>,
    hwmon: Vec<(String, PathBuf)>,
}

fn sorted_dir(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    v.sort();
    v
}

impl EnergySource {
    /// Finds the energy and power files under `root`, and says what it found or why not.
    pub fn probe(root: &Path) -> (EnergySource, Vec<Source>) {
        let mut src = EnergySource::default();
        let pc = root.join("sys/class/powercap");
        let mut unreadable = None;
        for (name, path) in sorted_dir(&pc) {
            if !name.contains("-rapl:") {
                continue;
            }
            let e = path.join("energy_uj");
            match crate::attr::read_capped(&e, crate::attr::MAX_ATTR_BYTES) {
                Ok(t) if parse_u64(&t).is_some() => {
                    let range = crate::attr::read(&path.join("max_energy_range_uj"))
                        .and_then(|t| parse_u64(&t));
                    src.rapl.push((name, e, range));
                }
                Ok(_) => unreadable = Some(format!("{}: not a number", e.display())),
                Err(err) => unreadable = Some(format!("{}: {err}", e.display())),
            }
        }
        let rapl = if !src.rapl.is_empty() {
            Source {
                name: SourceKind::Rapl,
                available: true,
                detail: format!(
                    "{} powercap zone(s): {}",
                    src.rapl.len(),
                    src.rapl
                        .iter()
                        .map(|r| r.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        } else {
            Source {
                name: SourceKind::Rapl,
                available: false,
                detail: match unreadable {
                    Some(u) => format!("RAPL zones present but unreadable ({u})"),
                    None => format!("no RAPL powercap zones under {}", pc.display()),
                },
            }
        };
        let hw = root.join("sys/class/hwmon");
        for (hname, hpath) in sorted_dir(&hw) {
            let label = crate::attr::read(&hpath.join("name")).unwrap_or_default();
            for (fname, fpath) in sorted_dir(&hpath) {
                if let Some(k) = fname
                    .strip_prefix("power")
                    .and_then(|s| s.strip_suffix("_input"))
                {
                    if crate::attr::read(&fpath)
                        .and_then(|t| parse_u64(&t))
                        .is_some()
                    {
                        src.hwmon.push((format!("{hname}/{label}/power{k}"), fpath));
                    }
                }
            }
        }
        let hwmon = Source {
            name: SourceKind::Hwmon,
            available: !src.hwmon.is_empty(),
            detail: if src.hwmon.is_empty() {
                format!("no readable power*_input sensors under {}", hw.display())
            } else {
                format!("{} power sensor(s)", src.hwmon.len())
            },
        };
        (src, vec![rapl, hwmon])
    }

    pub fn read_energy(&self) -> Vec<EnergyCounter> {
        self.rapl
            .iter()
            .filter_map(|(domain, path, range)| {
                let v = parse_u64(&crate::attr::read(path)?)?;
                Some(EnergyCounter {
                    domain: domain.clone(),
                    energy_uj: v,
                    max_range_uj: *range,
                })
            })
            .collect()
    }

    pub fn read_power(&self) -> Vec<PowerReading> {
        self.hwmon
            .iter()
            .filter_map(|(sensor, path)| {
                Some(PowerReading {
                    sensor: sensor.clone(),
                    power_uw: parse_u64(&crate::attr::read(path)?)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_a_fixture_tree() {
        let root = placer_testkit::FakeRoot::new("energy");
        // The tree under the root (removed whole below, while the root stays for cleanup).
        let d = root.join("tree");
        let z = d.join("sys/class/powercap/intel-rapl:0");
        let sz = d.join("sys/class/powercap/intel-rapl:0:0");
        let h = d.join("sys/class/hwmon/hwmon1");
        for p in [&z, &sz, &h] {
            fs::create_dir_all(p).unwrap();
        }
        fs::create_dir_all(d.join("sys/class/powercap/intel-rapl")).unwrap();
        fs::write(z.join("energy_uj"), "1000\n").unwrap();
        fs::write(z.join("max_energy_range_uj"), "262143328850\n").unwrap();
        fs::write(sz.join("energy_uj"), "junk\n").unwrap();
        fs::write(h.join("name"), "acpi_power\n").unwrap();
        fs::write(h.join("power1_input"), "95000000\n").unwrap();
        fs::write(h.join("power1_average"), "1\n").unwrap();
        let (src, status) = EnergySource::probe(&d);
        assert!(status[0].available, "{status:?}");
        assert!(status[1].available);
        let e = src.read_energy();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].domain, "intel-rapl:0");
        assert_eq!(e[0].energy_uj, 1000);
        assert_eq!(e[0].max_range_uj, Some(262143328850));
        let p = src.read_power();
        assert_eq!(p[0].sensor, "hwmon1/acpi_power/power1");
        assert_eq!(p[0].power_uw, 95_000_000);
        fs::remove_dir_all(&d).unwrap();
        let (_, status) = EnergySource::probe(&d);
        assert!(!status[0].available && status[0].detail.contains("no RAPL"));
        assert!(!status[1].available);
    }
}
