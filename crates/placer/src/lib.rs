//! placer's library half: the helpers every command shares (`common`: stdout that survives
//! a closed pipe, the one duration grammar, logging, the machine choice), what the daemon
//! says to systemd (`systemd`: the journal's native protocol, sd_notify), the observer
//! behind `placer top` and `placer ab` (`observer`, re-exported from `placer-agent`), and the benchmarks (`bench`). The
//! binary (`main.rs`, `cmd/`) is arguments and wiring around this and the other crates.
#![forbid(unsafe_code)]

#[macro_use]
pub mod common;
pub mod bench;
pub mod systemd;
pub use placer_agent::observer;
