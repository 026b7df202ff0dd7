//! Policy `net-affinity` (seed 002): communication-intensive processes run on the CPU that
//! does their NIC's receive processing, or on a cache-sharing CPU when it is busy, and get
//! their original affinity back when they go quiet.
//! (Placeholder: the placement-loop issue fills it in.)

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NetAffinityConfig {}

impl NetAffinityConfig {
    /// Checks values; Err((field, message)).
    pub fn validate(&self) -> Result<(), (String, String)> {
        Ok(())
    }
}
