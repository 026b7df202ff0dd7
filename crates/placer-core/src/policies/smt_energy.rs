//! Policy: seed 001: SMT-aware allocation for speed or energy.
//! (Placeholder: the issue that builds this policy fills it in.)

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SmtEnergyConfig {}
