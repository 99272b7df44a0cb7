//! Nothing by default: the crate loads the shim at run time and needs no build step.
//!
//! With the opt-in `build-nvshmem-shim` or `build-rocshmem-shim` feature, CMake builds the shim
//! for that backend here (the `cmake` crate: this is the build script it is made for), for
//! users of the crate outside this workspace, who have no `cargo xtask build-shim`. The
//! library's path reaches the crate as [`BUILT_NVSHMEM_SHIM`] / [`BUILT_ROCSHMEM_SHIM`].
//!
//! Inputs (environment): `NVSHMEM_HOME` (nvshmem; nvcc from `CUDACXX` or PATH, as CMake finds
//! it), `ROCSHMEM_HOME` (rocshmem; ROCm as CMake finds it, or on `CMAKE_PREFIX_PATH`), and
//! `SYMMEM_SHIM_ARCHS` (comma-separated; default 90 or gfx942).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "build-nvshmem-shim")]
    shim::build(
        "nvshmem",
        "NVSHMEM_HOME",
        "NVSHMEM's install (the folder with include/nvshmem.h and lib/; pip's \
         nvidia-nvshmem-cu13 has it as site-packages/nvidia/nvshmem)",
    );
    #[cfg(feature = "build-rocshmem-shim")]
    shim::build(
        "rocshmem",
        "ROCSHMEM_HOME",
        "rocSHMEM's install (the prefix `cargo xtask build-rocshmem` prints)",
    );
}

#[cfg(any(feature = "build-nvshmem-shim", feature = "build-rocshmem-shim"))]
mod shim {
    use std::path::PathBuf;

    /// Builds the `backend` shim from shim/ into `$OUT_DIR/<backend>`; `home` names the
    /// variable with the SHMEM library's install, which `install` describes.
    pub fn build(backend: &str, home: &str, install: &str) {
        println!("cargo:rerun-if-changed=shim");
        for var in [home, "SYMMEM_SHIM_ARCHS", "CUDACXX", "CMAKE_PREFIX_PATH"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let Some(prefix) = std::env::var_os(home).filter(|v| !v.is_empty()) else {
            panic!(
                "the build-{backend}-shim feature builds the {backend} shim, which needs {home}: \
                 set it to {install}, or build without the feature"
            );
        };
        let out =
            PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(backend);
        let mut config = cmake::Config::new("shim");
        config
            .out_dir(&out)
            .profile("Release")
            .define("SYMMEM_SHIM_BACKEND", backend);
        if let Some(archs) = std::env::var_os("SYMMEM_SHIM_ARCHS").filter(|v| !v.is_empty()) {
            config.define(
                "SYMMEM_SHIM_ARCHS",
                archs.to_string_lossy().replace(',', ";"),
            );
        }
        match backend {
            "nvshmem" => config.define("NVSHMEM_HOME", &prefix),
            _ => config.define("CMAKE_PREFIX_PATH", &prefix),
        };
        let installed = config.build();
        let library = installed
            .join("lib")
            .join(format!("libsymmem_shim_{backend}.so"));
        assert!(
            library.is_file(),
            "CMake installed into {} but {} is missing",
            installed.display(),
            library.display()
        );
        println!(
            "cargo:rustc-env=SYMMEM_SHIM_BUILT_{}={}",
            backend.to_uppercase(),
            library.display()
        );
    }
}
