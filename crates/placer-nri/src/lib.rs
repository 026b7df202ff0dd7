//! placer as a Kubernetes node agent through the container runtime's Node Resource Interface
//! (NRI, docs/kubernetes.md).

pub mod host;
pub mod mux;
pub mod placement;
pub mod plugin;
pub mod proto;
pub mod wire;
