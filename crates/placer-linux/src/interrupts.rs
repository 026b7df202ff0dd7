//! Pure parsers for /proc/interrupts and /proc/softirqs.
//!
//! Both files have a header of CPU columns (`CPU0 CPU1 CPU3` — only online CPUs, so the
//! column position is not the CPU id after hotplug) and one row per source. Rows with fewer
//! counts than columns (`ERR:`, `MIS:`) keep the counts they have; junk rows are skipped.

use placer_core::sample::{IrqSample, SoftirqCounts};

/// CPU ids of a header line such as `           CPU0       CPU1       CPU3`.
pub fn parse_cpu_header(line: &str) -> Vec<u32> {
    line.split_ascii_whitespace()
        .filter_map(|t| t.strip_prefix("CPU")?.parse().ok())
        .collect()
}

/// Parses /proc/interrupts.
pub fn parse_interrupts(text: &str) -> Vec<IrqSample> {
    let mut lines = text.lines();
    let cpu_ids = match lines.next() {
        Some(h) => parse_cpu_header(h),
        None => return Vec::new(),
    };
    let ncpu = cpu_ids.len();
    let mut out = Vec::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let irq = irq.trim();
        if irq.is_empty() || irq.contains(char::is_whitespace) {
            continue;
        }
        let mut tokens = rest.split_ascii_whitespace().peekable();
        let mut counts = Vec::with_capacity(ncpu);
        while counts.len() < ncpu {
            match tokens.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    counts.push(v);
                    tokens.next();
                }
                None => break,
            }
        }
        let desc: Vec<&str> = tokens.collect();
        let name = if irq.bytes().all(|b| b.is_ascii_digit()) {
            // `chip hwirq-edge action[, action]`: the actions follow the trigger token.
            match desc
                .iter()
                .position(|t| t.ends_with("-edge") || t.ends_with("-level") || *t == "edge")
            {
                Some(p) if p + 1 < desc.len() => desc[p + 1..].join(" "),
                _ => desc.last().map(|s| s.to_string()).unwrap_or_default(),
            }
        } else {
            desc.join(" ")
        };
        out.push(IrqSample {
            irq: irq.to_string(),
            cpu_ids: cpu_ids[..counts.len()].to_vec(),
            counts,
            name,
        });
    }
    out
}

/// Parses the NET_RX and NET_TX rows of /proc/softirqs into per-CPU counts.
pub fn parse_softirqs(text: &str) -> Vec<SoftirqCounts> {
    let mut lines = text.lines();
    let cpu_ids = match lines.next() {
        Some(h) => parse_cpu_header(h),
        None => return Vec::new(),
    };
    let mut out: Vec<SoftirqCounts> = cpu_ids
        .iter()
        .map(|&cpu| SoftirqCounts {
            cpu,
            ..Default::default()
        })
        .collect();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let which = match name.trim() {
            "NET_RX" => 0,
            "NET_TX" => 1,
            _ => continue,
        };
        for (slot, v) in out.iter_mut().zip(rest.split_ascii_whitespace()) {
            let Ok(v) = v.parse::<u64>() else { break };
            if which == 0 {
                slot.net_rx = v;
            } else {
                slot.net_tx = v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       CPU3       \n\
  24:          1          0          0  IO-APIC   5-edge      ACPI:Ged\n\
  29:      12345          7          3  PCI-MSIX-0000:00:02.0   1-edge      virtio2-input.0\n\
  31:          0          0          0  PCI-MSI 1-edge      eth0-rx-0, eth0-tx-0\n\
 NMI:          0          0          0   Non-maskable interrupts\n\
 LOC:     123456     654321          9   Local timer interrupts\n\
 ERR:          0\n\
 junk line without colon\n\
  40:        1x\n";

    #[test]
    fn interrupts_rows() {
        let v = parse_interrupts(INTERRUPTS);
        let row = |irq: &str| v.iter().find(|r| r.irq == irq).unwrap();
        assert_eq!(row("29").counts, vec![12345, 7, 3]);
        assert_eq!(row("29").cpu_ids, vec![0, 1, 3]);
        assert_eq!(row("29").name, "virtio2-input.0");
        assert_eq!(row("31").name, "eth0-rx-0, eth0-tx-0");
        assert_eq!(row("24").name, "ACPI:Ged");
        assert_eq!(row("LOC").counts, vec![123456, 654321, 9]);
        assert_eq!(row("LOC").name, "Local timer interrupts");
        assert_eq!(row("ERR").counts, vec![0]);
        assert_eq!(row("ERR").cpu_ids, vec![0]);
        // A row whose first count is junk keeps no counts but does not stop the parse.
        assert!(row("40").counts.is_empty());
        assert_eq!(parse_interrupts(""), vec![]);
    }

    #[test]
    fn softirqs_net() {
        let t = "                    CPU0       CPU1       \n\
          HI:          0          0\n\
       TIMER:       7432       8946\n\
      NET_TX:         10         20\n\
      NET_RX:        300        400\n\
       BLOCK:          1          2\n";
        let s = parse_softirqs(t);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].cpu, s[0].net_rx, s[0].net_tx), (0, 300, 10));
        assert_eq!((s[1].cpu, s[1].net_rx, s[1].net_tx), (1, 400, 20));
        // Truncated row: counts it has, zeros elsewhere.
        let s = parse_softirqs("CPU0 CPU1\nNET_RX: 5\n");
        assert_eq!((s[0].net_rx, s[1].net_rx), (5, 0));
        assert!(parse_softirqs("").is_empty());
    }
}
