//! NRI's API (`proto/api.proto`, tag v0.8.0), generated at build time by `build.rs`: the
//! messages (`api`) and the ttrpc services (`api_ttrpc`: the `Plugin` trait the runtime
//! calls, the `RuntimeClient` the plugin calls). Lints are relaxed for the generated code
//! only.

pub use generated::{api, api_ttrpc};

#[allow(
    clippy::all,
    clippy::pedantic,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused_imports,
    unused_mut,
    unsafe_code,
    unused_results,
    rustdoc::all
)]
mod generated {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/api.rs"));
    }
    pub mod api_ttrpc {
        include!(concat!(env!("OUT_DIR"), "/api_ttrpc.rs"));
    }
}
