//! Policy: seed 000 (EANeM): cheapest system state meeting every app's QoS.
//! (Placeholder: the issue that builds this policy fills it in.)

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct EnergyQosConfig {}
