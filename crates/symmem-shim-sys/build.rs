//! Nothing by default: the crate loads the shim at run time and needs no build step.
//!
//! With the opt-in `build-nvshmem-shim` or `build-rocshmem-shim` feature, the shim for that
//! backend is built here by `symmem_build::shim`, the same build as `cargo xtask build-shim`
//! (one CMake driver, a build folder per set of inputs, the rocSHMEM version and target checks,
//! the stamp), into `$OUT_DIR/<backend>`. The library's path reaches the crate as
//! [`BUILT_NVSHMEM_SHIM`] / [`BUILT_ROCSHMEM_SHIM`].
//!
//! Inputs (environment), as `cargo xtask build-shim` reads them: `NVSHMEM_HOME` and `CUDACXX`
//! (nvshmem), `ROCSHMEM_HOME` and `ROCM_PATH` (rocshmem; else hipconfig, else /opt/rocm), and
//! `SYMMEM_SHIM_ARCHS` (comma-separated; default 90 or gfx942).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "build-nvshmem-shim")]
    shim::build(symmem_build::shim::ProviderKind::Nvshmem);
    #[cfg(feature = "build-rocshmem-shim")]
    shim::build(symmem_build::shim::ProviderKind::Rocshmem);
}

#[cfg(any(feature = "build-nvshmem-shim", feature = "build-rocshmem-shim"))]
mod shim {
    use std::path::PathBuf;
    use symmem_build::shim::ProviderKind;

    /// Builds the `backend` shim from shim/ into `$OUT_DIR/<backend>`; a failure is one
    /// `cargo::error` naming the fix (the build's own message).
    pub fn build(backend: ProviderKind) {
        println!("cargo:rerun-if-changed=shim");
        for var in [
            "NVSHMEM_HOME",
            "ROCSHMEM_HOME",
            "ROCM_PATH",
            "SYMMEM_SHIM_ARCHS",
            "CUDACXX",
        ] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let manifest =
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let out = out_dir.join(backend.name());
        let archs = std::env::var("SYMMEM_SHIM_ARCHS")
            .ok()
            .filter(|v| !v.is_empty());
        match symmem_build::shim::build_into(
            backend,
            &manifest.join("shim"),
            &out,
            archs.as_deref(),
        ) {
            Ok(library) => println!(
                "cargo:rustc-env=SYMMEM_SHIM_BUILT_{}={}",
                backend.name().to_uppercase(),
                library.display()
            ),
            Err(e) => {
                let message = format!("{e:#}").replace('\n', " ");
                println!(
                    "cargo::error=the build-{}-shim feature: {message}",
                    backend.name()
                );
            }
        }
    }
}
