//! Policy: seed 003: contention-aware placement from hardware counters.
//! (Placeholder: the issue that builds this policy fills it in.)

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ContentionConfig {}
