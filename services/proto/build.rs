//! Compiles `proto/trawl/v1/*.proto` with protox (pure Rust, no system `protoc`)
//! and generates the prost types into `OUT_DIR/trawl.v1.rs`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = ["trawl/v1/slice.proto", "trawl/v1/event.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={}", root.join(file).display());
    }
    let descriptors = protox::compile(files, [&root])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
