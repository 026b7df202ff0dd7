//! placer's policies. Each module documents its algorithm and invariants at the top, cites
//! the seed paper it comes from, and tests those invariants.

pub mod contention;
pub mod energy_qos;
pub mod net_affinity;
pub mod numa_local;
pub mod smt_energy;

pub use crate::policy_kind::PolicyKind;
