//! Generates the Rust declarations of the C glue boundary from `wrapper.h`.
//!
//! Only `ompi-glue/ipmc_glue.h` is read: Open MPI's own headers never reach
//! bindgen, so struct layouts of Open MPI stay on the C side.

use std::env;
use std::path::PathBuf;

fn main() {
    for input in [
        "wrapper.h",
        "ompi-glue/ipmc_glue.h",
        "mca-params/ipmc_params.def",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    // Declarations for the oldest Rust the package supports (`rust-version`),
    // not bindgen's newest (1.82's `unsafe extern` blocks fail on older ones).
    let msrv = env::var("CARGO_PKG_RUST_VERSION").expect("Cargo.toml sets rust-version");
    let minor = msrv
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .expect("rust-version is 1.MINOR");
    let target = bindgen::RustTarget::stable(minor, 0)
        .unwrap_or_else(|e| panic!("bindgen cannot target rust-version {msrv}: {e}"));
    let bindings = bindgen::Builder::default()
        .rust_target(target)
        .header("wrapper.h")
        .allowlist_function("ipmc_.*")
        .allowlist_type("ipmc_config_t")
        .allowlist_var("IPMC_.*")
        .opaque_type("ompi_.*")
        .opaque_type("mca_.*")
        .layout_tests(false)
        .generate()
        .expect("bindgen could not read wrapper.h (is libclang installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("glue.rs");
    bindings
        .write_to_file(&out)
        .expect("could not write the generated bindings");
}
