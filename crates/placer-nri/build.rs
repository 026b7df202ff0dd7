//! Generates the NRI bindings (messages and ttrpc services) from `proto/api.proto`, NRI's
//! `pkg/api/api.proto` at tag v0.8.0, with the pure-Rust protobuf parser: no `protoc` is
//! needed on the build machine.
//!
//! The generated files start with inner attributes (`#![allow(...)]`), which `include!`
//! refuses; they are dropped here and `src/proto.rs` allows the same lints on the modules
//! that hold the generated code, and only there.

use std::path::Path;

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=build.rs");
    ttrpc_codegen::Codegen::new()
        .out_dir(&out)
        .inputs(["proto/api.proto"])
        .include("proto")
        .rust_protobuf()
        .customize(ttrpc_codegen::Customize::default())
        .run()
        .expect("generating the NRI bindings from proto/api.proto");
    for f in ["api.rs", "api_ttrpc.rs"] {
        strip_inner_attributes(&out.join(f));
    }
}

fn strip_inner_attributes(path: &Path) {
    let text = std::fs::read_to_string(path).expect("reading generated bindings");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with("#![") && !l.starts_with("//!")
        })
        .collect();
    std::fs::write(path, kept.join("\n")).expect("writing generated bindings");
}
