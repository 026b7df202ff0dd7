//! Policy: seed 004: network apps' CPUs and memory on their NIC's NUMA node.
//! (Placeholder: the issue that builds this policy fills it in.)

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NumaLocalConfig {}
