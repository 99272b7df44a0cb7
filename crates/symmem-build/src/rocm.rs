//! ROCm discovery, the one way every command finds ROCm: the install, its version, hipcc and
//! HIP's LLVM tools; each miss names the fix.
//!
//! ROCm comes in three layouts, and each broke an `/opt/rocm`-only search:
//! - AMD's packages: `/opt/rocm`, with `.info/version`, `llvm/bin` and `bin/hipcc`.
//! - Debian's and Ubuntu's: `/usr`, with only `include/hip/hip_version.h` for a version, no
//!   `llvm/bin` (HIP's clang is `/usr/lib/llvm-<N>/bin`, which `hipconfig --hipclangpath`
//!   reports), and a clang that BREAKS when ROCM_PATH is exported: so the fixes here never tell
//!   Debian users to export it, and `hipconfig --rocmpath` finds `/usr` without it.
//! - The Nix ROCm path (flake.nix's `rocmPath`): `llvm/bin`, `bin/hipcc` and `bin/hipconfig`
//!   wrappers, maybe no `.info/version`; the `nix develop .#rocm` shell exports ROCM_PATH.
//!
//! The ROCm parts take what they read from the process as a [`Search`], so that tests run them
//! over fixture trees without touching the process's PATH or environment.
use anyhow::bail;
use std::path::{Path, PathBuf};
use symmem_process::{SearchPath, find_program, is_executable};
use xshell::{Shell, cmd};

/// The fix for a missing or unusable ROCm. Exporting ROCM_PATH is offered for AMD's installs
/// only: Debian's clang then looks for its device libraries there and fails.
const ROCM_FIX: &str = "pass --rocm-path DIR (what `hipconfig --rocmpath` prints: /opt/rocm for \
                        AMD's packages, /usr for Debian/Ubuntu's) or run inside `nix develop \
                        .#rocm`; for AMD's installs `export ROCM_PATH=DIR` works too (on \
                        Debian/Ubuntu it breaks hipcc)";

/// What ROCm discovery reads from the process.
#[derive(Clone, Debug)]
pub struct Search {
    /// `$ROCM_PATH`, when set and not empty.
    pub rocm_path_env: Option<PathBuf>,
    /// `$HIPCC`, when set and not empty.
    pub hipcc_env: Option<PathBuf>,
    /// The folders of `$PATH`.
    pub path: SearchPath,
    /// The last resort: `/opt/rocm`.
    pub default_rocm: PathBuf,
}

impl Search {
    pub fn from_process() -> Self {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            rocm_path_env: var("ROCM_PATH"),
            hipcc_env: var("HIPCC"),
            path: SearchPath::from_env(),
            default_rocm: PathBuf::from("/opt/rocm"),
        }
    }

    /// `name` on PATH: a candidate, whose absence the caller words.
    fn on_path(&self, name: &str) -> Option<PathBuf> {
        find_program(name, &self.path, "").ok()
    }
}

/// The ROCm version, as rocSHMEM needs it (`x.y.z`; it only compares the major version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RocmVersion {
    pub version: String,
    pub source: VersionSource,
}

/// Where the ROCm version was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionSource {
    /// `${ROCM_PATH}/.info/version` (AMD's packages): rocSHMEM reads it itself.
    InfoFile,
    /// `rocm-core/rocm_version.h` (ROCM_VERSION_MAJOR/MINOR/PATCH): that header, relative to
    /// the ROCm folder.
    RocmVersionHeader(String),
    /// `include/hip/hip_version.h` only (Debian's and Ubuntu's packages). HIP's major and minor
    /// versions are the ROCm series (HIP 6.4 ships with ROCm 6.4), but HIP_VERSION_PATCH is a
    /// build number (43484), not ROCm's patch release, so the version is `major.minor.0` and
    /// the full HIP version goes into the stamp and the hash.
    HipVersionHeader { hip: String },
    /// None of those, but `--cmake-arg -DEXPLICIT_ROCM_VERSION=` says it.
    Given,
    /// No ROCm was found: a `--dry-run` shows the rest of the plan.
    Unknown,
}

impl RocmVersion {
    /// rocSHMEM finds the version by itself only in `.info/version`.
    pub fn needs_explicit(&self) -> bool {
        self.source != VersionSource::InfoFile
    }

    pub fn describe(&self, rocm: &Path) -> String {
        match &self.source {
            VersionSource::InfoFile => {
                format!(
                    "{} (from {})",
                    self.version,
                    rocm.join(".info/version").display()
                )
            }
            VersionSource::RocmVersionHeader(header) => {
                format!("{} (from {})", self.version, rocm.join(header).display())
            }
            VersionSource::HipVersionHeader { hip } => format!(
                "{}: the ROCm {} series, from {} (HIP {hip}; its patch number is a build \
                 number, not ROCm's patch release)",
                self.version,
                self.version
                    .rsplit_once('.')
                    .map_or(self.version.as_str(), |(s, _)| s),
                rocm.join("include/hip/hip_version.h").display()
            ),
            VersionSource::Given => format!(
                "{} (given with --cmake-arg -DEXPLICIT_ROCM_VERSION)",
                self.version
            ),
            VersionSource::Unknown => format!(
                "{} (read from the ROCm install: .info/version, rocm-core/rocm_version.h or \
                 hip/hip_version.h)",
                self.version
            ),
        }
    }
}

/// clang++, llvm-link and opt, which rocSHMEM's cmake/DeviceBitcode.cmake needs for the
/// device bitcode. It looks only in `${ROCM_PATH}/llvm/bin` and, when they are not there,
/// merely warns and installs no bitcode, which fails verification minutes later: so they are
/// found before the build, and passed explicitly when they live elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LlvmTools {
    /// All three in `${ROCM_PATH}/llvm/bin` (AMD's /opt/rocm, the Nix ROCm path): rocSHMEM
    /// finds them itself.
    InRocm(PathBuf),
    /// In HIP's clang folder, as `hipconfig --hipclangpath` reports it (Debian's
    /// /usr/lib/llvm-21/bin): passed as LLVM_CLANG, LLVM_LINK and LLVM_OPT.
    FromHipconfig {
        dir: PathBuf,
        hipconfig: PathBuf,
        /// Why `${ROCM_PATH}/llvm/bin` was not used, e.g. "/usr/llvm/bin has no opt".
        why: String,
    },
    /// All three given with `--cmake-arg -DLLVM_...=`.
    Given,
    /// No ROCm was found: a `--dry-run` shows the rest of the plan.
    Unknown,
}

/// The CMake variables rocSHMEM's DeviceBitcode.cmake reads, and the tool each names.
pub const LLVM_TOOLS: [(&str, &str); 3] = [
    ("LLVM_CLANG", "clang++"),
    ("LLVM_LINK", "llvm-link"),
    ("LLVM_OPT", "opt"),
];

/// Runs `hipconfig <flag>` and returns the folder it prints (build-shim asks it too).
pub fn hipconfig_dir(sh: &Shell, hipconfig: &Path, flag: &str) -> Result<PathBuf, String> {
    let out = cmd!(sh, "{hipconfig} {flag}")
        .quiet()
        .ignore_status()
        .output()
        .map_err(|e| format!("`{} {flag}` did not run: {e}", hipconfig.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.is_empty() {
        return Err(format!(
            "`{} {flag}` failed ({}): {}",
            hipconfig.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(text))
}

/// The folder of `path`, unless it is a bare name (`hipcc`, whose "parent" is "").
fn non_empty_parent(path: &Path) -> Option<&Path> {
    path.parent().filter(|p| !p.as_os_str().is_empty())
}

/// The hipconfig that belongs to the hipcc the user would get (`--hipcc`, `$HIPCC` or hipcc on
/// PATH: the one next to it), else hipconfig on PATH.
fn hipconfig_on_path(hipcc_given: Option<&Path>, s: &Search) -> Option<PathBuf> {
    hipcc_given
        .map(Path::to_path_buf)
        .or_else(|| s.hipcc_env.clone())
        .or_else(|| s.on_path("hipcc"))
        .and_then(|hipcc| Some(non_empty_parent(&hipcc)?.join("hipconfig")))
        .filter(|p| is_executable(p))
        .or_else(|| s.on_path("hipconfig"))
}

/// A ROCm install and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRocm {
    pub path: PathBuf,
    /// How, for the plan and the log: "from --rocm-path", "from `<hipconfig> --rocmpath`", ...
    pub how: String,
    /// The hipconfig that named it, when one did (it knows where HIP's clang is).
    pub named_by: Option<PathBuf>,
}

/// The ROCm install and how it was found: `--rocm-path`, else `$ROCM_PATH`, else the ROCm
/// that `hipconfig --rocmpath` reports (so Debian's `/usr` is found without exporting
/// ROCM_PATH, which would break its clang), else `/opt/rocm`. A given folder that does not
/// exist is an error; `Ok(Err(tried))` says what was tried when none was found.
pub fn find_rocm(
    sh: &Shell,
    given: Option<&Path>,
    hipcc_given: Option<&Path>,
    s: &Search,
) -> anyhow::Result<Result<FoundRocm, Vec<String>>> {
    let explicit = match (given, &s.rocm_path_env) {
        (Some(p), _) => Some((p.to_path_buf(), "from --rocm-path")),
        (None, Some(p)) => Some((p.clone(), "from $ROCM_PATH")),
        (None, None) => None,
    };
    if let Some((path, from)) = explicit {
        if !path.is_dir() {
            bail!("no ROCm at {} ({from}): {ROCM_FIX}", path.display());
        }
        return Ok(Ok(FoundRocm {
            path,
            how: from.into(),
            named_by: None,
        }));
    }
    let mut tried = vec!["--rocm-path is not given, ROCM_PATH is unset".to_string()];
    match hipconfig_on_path(hipcc_given, s) {
        Some(hipconfig) => match hipconfig_dir(sh, &hipconfig, "--rocmpath") {
            Ok(dir) if dir.is_dir() => {
                let how = format!("from `{} --rocmpath`", hipconfig.display());
                return Ok(Ok(FoundRocm {
                    path: dir,
                    how,
                    named_by: Some(hipconfig),
                }));
            }
            Ok(dir) => tried.push(format!(
                "`{} --rocmpath` says {}, which is not a folder",
                hipconfig.display(),
                dir.display()
            )),
            Err(why) => tried.push(why),
        },
        None => tried.push("no hipcc or hipconfig on PATH".into()),
    }
    if s.default_rocm.is_dir() {
        return Ok(Ok(FoundRocm {
            path: s.default_rocm.clone(),
            how: format!("the default; {}", tried.join("; ")),
            named_by: None,
        }));
    }
    tried.push(format!("{} does not exist", s.default_rocm.display()));
    Ok(Err(tried))
}

/// [`find_rocm`], where finding none is an error naming what was tried and the fix.
pub fn rocm_path(
    sh: &Shell,
    given: Option<&Path>,
    hipcc_given: Option<&Path>,
    s: &Search,
) -> anyhow::Result<(PathBuf, String)> {
    match find_rocm(sh, given, hipcc_given, s)? {
        Ok(found) => Ok((found.path, found.how)),
        Err(tried) => bail!("no ROCm found ({}): {ROCM_FIX}", tried.join("; ")),
    }
}

/// Reads `#define <NAME> <number>` from a header.
fn header_field(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("#define")?.trim();
        let value = rest.strip_prefix(name)?;
        // `ROCM_VERSION_MAJOR` must not match `ROCM_VERSION_MAJOR_X`.
        if !value.starts_with(char::is_whitespace) {
            return None;
        }
        value.trim().parse::<u32>().ok()
    })
}

/// The ROCm version: from `.info/version` (AMD's packages), else `rocm-core/rocm_version.h`
/// (AMD's and Nix's rocm-core), else `hip/hip_version.h` (the only one Debian and Ubuntu
/// ship). From the HIP header it is `major.minor.0`: HIP's major.minor is the ROCm series it
/// ships with, its patch is a build number (see [`VersionSource::HipVersionHeader`]).
pub fn rocm_version(rocm: &Path) -> anyhow::Result<RocmVersion> {
    if let Ok(text) = std::fs::read_to_string(rocm.join(".info/version")) {
        let version: String = text
            .trim()
            .split(|c: char| c == '-' || c.is_whitespace())
            .next()
            .unwrap_or_default()
            .to_string();
        if version.split('.').count() >= 2 {
            return Ok(RocmVersion {
                version,
                source: VersionSource::InfoFile,
            });
        }
    }
    for header in ["include/rocm-core/rocm_version.h", "include/rocm_version.h"] {
        if let Ok(text) = std::fs::read_to_string(rocm.join(header))
            && let (Some(major), Some(minor), Some(patch)) = (
                header_field(&text, "ROCM_VERSION_MAJOR"),
                header_field(&text, "ROCM_VERSION_MINOR"),
                header_field(&text, "ROCM_VERSION_PATCH"),
            )
        {
            return Ok(RocmVersion {
                version: format!("{major}.{minor}.{patch}"),
                source: VersionSource::RocmVersionHeader(header.into()),
            });
        }
    }
    if let Ok(text) = std::fs::read_to_string(rocm.join("include/hip/hip_version.h"))
        && let (Some(major), Some(minor), Some(patch)) = (
            header_field(&text, "HIP_VERSION_MAJOR"),
            header_field(&text, "HIP_VERSION_MINOR"),
            header_field(&text, "HIP_VERSION_PATCH"),
        )
    {
        return Ok(RocmVersion {
            version: format!("{major}.{minor}.0"),
            source: VersionSource::HipVersionHeader {
                hip: format!("{major}.{minor}.{patch}"),
            },
        });
    }
    bail!(
        "cannot tell the ROCm version under {}: none of .info/version, \
         include/rocm-core/rocm_version.h, include/hip/hip_version.h is there. Is it a ROCm \
         install? {ROCM_FIX}; or pass --cmake-arg -DEXPLICIT_ROCM_VERSION=X.Y.Z",
        rocm.display()
    )
}

/// hipcc and how it was found: `--hipcc`, else `$HIPCC`, else `<rocm>/bin/hipcc`, else PATH.
pub fn hipcc(given: Option<&Path>, rocm: &Path, s: &Search) -> anyhow::Result<(PathBuf, String)> {
    let candidate = given
        .map(|p| (p.to_path_buf(), "from --hipcc"))
        .or_else(|| s.hipcc_env.clone().map(|p| (p, "from $HIPCC")))
        .or_else(|| {
            Some(rocm.join("bin/hipcc"))
                .filter(|p| is_executable(p))
                .map(|p| (p, "in the ROCm folder"))
        })
        .or_else(|| s.on_path("hipcc").map(|p| (p, "on PATH")));
    match candidate {
        Some((p, how)) if is_executable(&p) => {
            Ok((std::path::absolute(&p).unwrap_or(p), how.into()))
        }
        Some((p, how)) => bail!(
            "hipcc at {} ({how}) is not an executable file: {ROCM_FIX}",
            p.display()
        ),
        None => bail!(
            "hipcc not found (looked in {}/bin and on PATH): {ROCM_FIX}",
            rocm.display()
        ),
    }
}

/// clang++, llvm-link and opt for rocSHMEM's device bitcode (see [`LlvmTools`]): in
/// `<rocm>/llvm/bin`, else in the folder `hipconfig --hipclangpath` reports (the hipconfig
/// next to `hipcc`, else `<rocm>/bin/hipconfig`; never one on PATH, which may belong to another
/// ROCm). `given` says which of LLVM_CLANG/LLVM_LINK/LLVM_OPT the user set with --cmake-arg.
/// Fails when one is in neither place: rocSHMEM would warn, build without the bitcode, and
/// verification would fail minutes later.
pub fn llvm_tools(
    sh: &Shell,
    rocm: &Path,
    hipcc: &Path,
    given: &dyn Fn(&str) -> bool,
) -> anyhow::Result<LlvmTools> {
    if LLVM_TOOLS.iter().all(|(var, _)| given(var)) {
        return Ok(LlvmTools::Given);
    }
    let missing_in = |dir: &Path| -> Vec<&str> {
        LLVM_TOOLS
            .iter()
            .filter(|(var, tool)| !given(var) && !is_executable(&dir.join(tool)))
            .map(|(_, tool)| *tool)
            .collect()
    };
    let in_rocm = rocm.join("llvm/bin");
    let rocm_missing = missing_in(&in_rocm);
    if rocm_missing.is_empty() {
        return Ok(LlvmTools::InRocm(in_rocm));
    }
    let why = if in_rocm.is_dir() {
        format!("{} has no {}", in_rocm.display(), rocm_missing.join(", "))
    } else {
        format!("{} has no llvm/bin", rocm.display())
    };
    let fix = "install LLVM's tools for HIP's clang (Debian/Ubuntu: apt-get install llvm-<N> \
               for the clang-<N> hipcc uses), or pass their paths with --cmake-arg \
               -DLLVM_CLANG=... -DLLVM_LINK=... -DLLVM_OPT=...";
    let hipconfig = non_empty_parent(hipcc)
        .map(|d| d.join("hipconfig"))
        .filter(|p| is_executable(p))
        .or_else(|| Some(rocm.join("bin/hipconfig")).filter(|p| is_executable(p)));
    let Some(hipconfig) = hipconfig else {
        bail!(
            "rocSHMEM's device bitcode needs clang++, llvm-link and opt, but {why} and there is \
             no hipconfig next to {} to ask where HIP's clang is: {fix}",
            hipcc.display()
        );
    };
    let dir = hipconfig_dir(sh, &hipconfig, "--hipclangpath").map_err(|e| {
        anyhow::anyhow!(
            "rocSHMEM's device bitcode needs clang++, llvm-link and opt, but {why} and {e}: {fix}"
        )
    })?;
    let missing = missing_in(&dir);
    if !missing.is_empty() {
        bail!(
            "rocSHMEM's device bitcode needs clang++, llvm-link and opt, but {why} and {} (from \
             `{} --hipclangpath`) has no {}: {fix}",
            dir.display(),
            hipconfig.display(),
            missing.join(", ")
        );
    }
    Ok(LlvmTools::FromHipconfig {
        dir,
        hipconfig,
        why,
    })
}

/// A ROCm install for compiling HIP with CMake (the shim), and HIP's clang in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HipRoot {
    pub root: PathBuf,
    /// How it was found, for the log.
    pub found: String,
    /// HIP's clang++, when found: CMake looks for it only through the hipconfig on PATH.
    pub hip_clang: Option<PathBuf>,
}

/// The ROCm install as [`find_rocm`] finds it (`--rocm-path`, else `$ROCM_PATH`, else what
/// hipconfig reports, else /opt/rocm), with HIP's clang++ found in [`llvm_tools`]' order:
/// `<rocm>/llvm/bin`, else what `hipconfig --hipclangpath` reports (this ROCm's own hipconfig,
/// or the one that named it; never another on PATH, which may belong to another install).
/// `None` when no ROCm is found: CMake then looks on its own, and says what it could not find.
pub fn hip_root(sh: &Shell, given: Option<&Path>, s: &Search) -> anyhow::Result<Option<HipRoot>> {
    let Ok(found) = find_rocm(sh, given, None, s)? else {
        return Ok(None);
    };
    let root = std::path::absolute(&found.path).unwrap_or(found.path);
    let hip_clang = Some(root.join("llvm/bin/clang++"))
        .filter(|p| is_executable(p))
        .or_else(|| {
            Some(root.join("bin/hipconfig"))
                .filter(|p| is_executable(p))
                .into_iter()
                .chain(found.named_by)
                .find_map(|h| hipconfig_dir(sh, &h, "--hipclangpath").ok())
                .map(|dir| dir.join("clang++"))
                .filter(|p| is_executable(p))
        });
    Ok(Some(HipRoot {
        root,
        found: found.how,
        hip_clang,
    }))
}

/// The ROCm half of the toolchain (ROCm, its version, hipcc, the LLVM tools), each with how it
/// was found (printed in the plan, so that a wrong pick shows before minutes of building).
#[derive(Clone, Debug)]
pub struct RocmParts {
    pub rocm_path: PathBuf,
    pub rocm_found: String,
    pub rocm_version: RocmVersion,
    pub hipcc: PathBuf,
    pub hipcc_found: String,
    pub llvm: LlvmTools,
}

pub fn rocm_parts(
    sh: &Shell,
    rocm: Option<&Path>,
    hipcc_path: Option<&Path>,
    explicit_version: Option<&str>,
    given: &dyn Fn(&str) -> bool,
    s: &Search,
) -> anyhow::Result<RocmParts> {
    let (rocm_path, rocm_found) = rocm_path(sh, rocm, hipcc_path, s)?;
    let rocm_version = match (rocm_version(&rocm_path), explicit_version) {
        (Ok(v), _) => v,
        // The user said which version; the define reaches CMake (and the hash) as given.
        (Err(_), Some(version)) => RocmVersion {
            version: version.to_string(),
            source: VersionSource::Given,
        },
        (Err(e), None) => return Err(e),
    };
    let (hipcc, hipcc_found) = hipcc(hipcc_path, &rocm_path, s)?;
    let llvm = llvm_tools(sh, &rocm_path, &hipcc, given)?;
    Ok(RocmParts {
        rocm_path,
        rocm_found,
        rocm_version,
        hipcc,
        hipcc_found,
        llvm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a tool that is only looked at, never run.
    fn exe(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    use symmem_test_support::command::write_script as script;

    /// A hipconfig stand-in answering --rocmpath and --hipclangpath (without a newline, as
    /// hipcc 7's does).
    fn hipconfig(path: &Path, rocm: &Path, clang: &Path) {
        script(
            path,
            &format!(
                "#!/bin/sh\ncase \"$1\" in\n  --rocmpath|-R) printf %s '{}' ;;\n  \
                 --hipclangpath|-l) printf %s '{}' ;;\n  *) echo \"bad flag $1\" >&2; exit 2 ;;\nesac\n",
                rocm.display(),
                clang.display()
            ),
        );
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    const HIP_VERSION_H: &str = "#define HIP_VERSION_H\n#define HIP_VERSION_MAJOR 6\n\
         #define HIP_VERSION_MINOR 4\n#define HIP_VERSION_PATCH 43484\n\
         #define HIP_VERSION_GITHASH \"\"\n\
         #define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)\n";

    fn llvm_bin(dir: &Path) {
        for tool in ["clang++", "llvm-link", "opt", "clang"] {
            exe(&dir.join(tool));
        }
    }

    /// AMD's /opt/rocm under `root`: .info/version, both version headers, llvm/bin,
    /// bin/hipcc and bin/hipconfig.
    fn amd_tree(root: &Path) -> PathBuf {
        let rocm = root.join("opt/rocm");
        write(&rocm.join(".info/version"), "6.4.3-127\n");
        write(
            &rocm.join("include/rocm-core/rocm_version.h"),
            "#define ROCM_VERSION_MAJOR 6\n#define ROCM_VERSION_MINOR 4\n#define ROCM_VERSION_PATCH 3\n",
        );
        write(&rocm.join("include/hip/hip_version.h"), HIP_VERSION_H);
        llvm_bin(&rocm.join("llvm/bin"));
        exe(&rocm.join("bin/hipcc"));
        hipconfig(&rocm.join("bin/hipconfig"), &rocm, &rocm.join("llvm/bin"));
        rocm
    }

    /// Debian's /usr under `root`: hip_version.h only, no llvm/bin, HIP's clang in
    /// lib/llvm-21/bin, which only hipconfig knows.
    fn debian_tree(root: &Path) -> PathBuf {
        let usr = root.join("usr");
        write(&usr.join("include/hip/hip_version.h"), HIP_VERSION_H);
        llvm_bin(&usr.join("lib/llvm-21/bin"));
        exe(&usr.join("bin/hipcc"));
        hipconfig(
            &usr.join("bin/hipconfig"),
            &usr,
            &usr.join("lib/llvm-21/bin"),
        );
        usr
    }

    /// flake.nix's composed ROCm path: llvm/bin, bin/hipcc and bin/hipconfig wrappers,
    /// rocm-core's header, no .info/version. Its hipconfig reports clr's own folder.
    fn nix_tree(root: &Path) -> PathBuf {
        let path = root.join("nix/store/xxx-symmem-rocm-path-7.2.3");
        let clr = root.join("nix/store/yyy-clr-7.2.3");
        std::fs::create_dir_all(&clr).unwrap();
        write(
            &path.join("include/rocm-core/rocm_version.h"),
            "#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 3\n",
        );
        llvm_bin(&path.join("llvm/bin"));
        exe(&path.join("bin/hipcc"));
        hipconfig(&path.join("bin/hipconfig"), &clr, &clr.join("llvm/bin"));
        path
    }

    fn search(root: &Path, path: &[PathBuf], rocm_env: Option<&Path>) -> Search {
        Search {
            rocm_path_env: rocm_env.map(Path::to_path_buf),
            hipcc_env: None,
            path: SearchPath::dirs(path.to_vec()),
            default_rocm: root.join("opt/rocm"),
        }
    }

    fn parts(given: Option<&Path>, s: &Search) -> anyhow::Result<RocmParts> {
        rocm_parts(&Shell::new().unwrap(), given, None, None, &|_| false, s)
    }

    #[test]
    fn amd_opt_rocm_is_the_default_and_needs_nothing_passed() {
        let dir = tempfile::tempdir().unwrap();
        let rocm = amd_tree(dir.path());
        let p = parts(None, &search(dir.path(), &[], None)).unwrap();
        assert_eq!(p.rocm_path, rocm);
        assert!(p.rocm_found.starts_with("the default"), "{}", p.rocm_found);
        assert!(
            p.rocm_found.contains("no hipcc or hipconfig on PATH"),
            "{}",
            p.rocm_found
        );
        assert_eq!(
            p.rocm_version,
            RocmVersion {
                version: "6.4.3".into(),
                source: VersionSource::InfoFile
            }
        );
        assert_eq!(p.hipcc, rocm.join("bin/hipcc"));
        assert_eq!(p.llvm, LlvmTools::InRocm(rocm.join("llvm/bin")));

        // With its bin on PATH, its hipconfig says where it is.
        let p = parts(None, &search(dir.path(), &[rocm.join("bin")], None)).unwrap();
        assert_eq!(p.rocm_path, rocm);
        assert_eq!(
            p.rocm_found,
            format!("from `{} --rocmpath`", rocm.join("bin/hipconfig").display())
        );
    }

    /// Debian: nothing at /opt/rocm, no ROCM_PATH: hipconfig finds /usr, hip_version.h gives
    /// the ROCm series, and HIP's clang folder gives the LLVM tools.
    #[test]
    fn debian_usr_is_found_by_hipconfig_with_version_and_llvm_tools() {
        let dir = tempfile::tempdir().unwrap();
        let usr = debian_tree(dir.path());
        let s = search(dir.path(), &[usr.join("bin")], None);
        let p = parts(None, &s).unwrap();
        assert_eq!(p.rocm_path, usr);
        assert_eq!(
            p.rocm_found,
            format!("from `{} --rocmpath`", usr.join("bin/hipconfig").display())
        );
        assert_eq!(
            p.rocm_version,
            RocmVersion {
                version: "6.4.0".into(),
                source: VersionSource::HipVersionHeader {
                    hip: "6.4.43484".into()
                }
            }
        );
        assert_eq!(p.hipcc, usr.join("bin/hipcc"));
        assert_eq!(
            p.llvm,
            LlvmTools::FromHipconfig {
                dir: usr.join("lib/llvm-21/bin"),
                hipconfig: usr.join("bin/hipconfig"),
                why: format!("{} has no llvm/bin", usr.display()),
            }
        );

        // Found by hipconfig even when /opt/rocm also exists: the hipcc on PATH wins.
        amd_tree(dir.path());
        assert_eq!(parts(None, &s).unwrap().rocm_path, usr);
        // --rocm-path beats $ROCM_PATH, which beats hipconfig.
        let amd = dir.path().join("opt/rocm");
        let with_env = search(dir.path(), &[usr.join("bin")], Some(&amd));
        let p = parts(None, &with_env).unwrap();
        assert_eq!(
            (p.rocm_path.as_path(), p.rocm_found.as_str()),
            (amd.as_path(), "from $ROCM_PATH")
        );
        let p = parts(Some(&usr), &with_env).unwrap();
        assert_eq!(
            (p.rocm_path.as_path(), p.rocm_found.as_str()),
            (usr.as_path(), "from --rocm-path")
        );
    }

    #[test]
    fn nix_rocm_path_from_its_shell_or_its_hipconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = nix_tree(dir.path());
        let p = parts(None, &search(dir.path(), &[], Some(&path))).unwrap();
        assert_eq!(p.rocm_path, path);
        assert_eq!(p.rocm_found, "from $ROCM_PATH");
        assert_eq!(
            p.rocm_version,
            RocmVersion {
                version: "7.2.3".into(),
                source: VersionSource::RocmVersionHeader("include/rocm-core/rocm_version.h".into())
            }
        );
        assert_eq!(p.hipcc, path.join("bin/hipcc"));
        assert_eq!(p.llvm, LlvmTools::InRocm(path.join("llvm/bin")));
        // Outside the shell its hipconfig answers for clr, which is no complete ROCm: the
        // version lookup says so, with the fix.
        let e = parts(None, &search(dir.path(), &[path.join("bin")], None))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("cannot tell the ROCm version") && e.contains("--rocm-path"),
            "{e}"
        );
    }

    /// Where no place has the LLVM tools, the plan fails before any build, naming what is
    /// missing where and the fix; tools given with --cmake-arg count as found.
    #[test]
    fn missing_llvm_tools_fail_before_the_build() {
        let dir = tempfile::tempdir().unwrap();
        let usr = debian_tree(dir.path());
        std::fs::remove_file(usr.join("lib/llvm-21/bin/opt")).unwrap();
        let s = search(dir.path(), &[usr.join("bin")], None);
        let e = parts(None, &s).err().unwrap().to_string();
        assert!(
            e.contains(&format!("{} has no llvm/bin", usr.display()))
                && e.contains("lib/llvm-21/bin (from `")
                && e.contains("has no opt")
                && e.contains("--cmake-arg -DLLVM_CLANG="),
            "{e}"
        );
        let given = |var: &str| var == "LLVM_OPT";
        let p = rocm_parts(&Shell::new().unwrap(), None, None, None, &given, &s).unwrap();
        assert!(
            matches!(p.llvm, LlvmTools::FromHipconfig { .. }),
            "{:?}",
            p.llvm
        );

        // No hipconfig to ask at all.
        std::fs::remove_file(usr.join("bin/hipconfig")).unwrap();
        let e = parts(Some(&usr), &s).err().unwrap().to_string();
        assert!(e.contains("no hipconfig next to"), "{e}");
        let all = |var: &str| LLVM_TOOLS.iter().any(|(v, _)| *v == var);
        let p = rocm_parts(&Shell::new().unwrap(), Some(&usr), None, None, &all, &s).unwrap();
        assert_eq!(p.llvm, LlvmTools::Given);

        // A ROCm folder with a partial llvm/bin goes to hipconfig too.
        let amd = amd_tree(dir.path());
        std::fs::remove_file(amd.join("llvm/bin/llvm-link")).unwrap();
        let e = parts(Some(&amd), &s).err().unwrap().to_string();
        assert!(e.contains("llvm/bin has no llvm-link"), "{e}");
    }

    #[test]
    fn rocm_version_from_info_file_or_headers() {
        let dir = tempfile::tempdir().unwrap();
        let e = rocm_version(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("cannot tell the ROCm version")
                && e.contains("include/hip/hip_version.h")
                && e.contains("-DEXPLICIT_ROCM_VERSION"),
            "{e}"
        );
        write(&dir.path().join("include/hip/hip_version.h"), HIP_VERSION_H);
        assert_eq!(rocm_version(dir.path()).unwrap().version, "6.4.0");
        write(
            &dir.path().join("include/rocm-core/rocm_version.h"),
            "#define ROCM_VERSION_MAJOR_X 9\n#define ROCM_VERSION_MAJOR   7\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 4\n",
        );
        assert_eq!(
            rocm_version(dir.path()).unwrap(),
            RocmVersion {
                version: "7.2.4".into(),
                source: VersionSource::RocmVersionHeader("include/rocm-core/rocm_version.h".into())
            }
        );
        write(&dir.path().join(".info/version"), "7.2.1-81\n");
        assert_eq!(
            rocm_version(dir.path()).unwrap(),
            RocmVersion {
                version: "7.2.1".into(),
                source: VersionSource::InfoFile
            }
        );
    }

    /// Every "no ROCm" error names --rocm-path; exporting ROCM_PATH is offered for AMD's
    /// installs only, with the warning for Debian's.
    #[test]
    fn missing_rocm_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Shell::new().unwrap();
        let e = rocm_path(
            &sh,
            Some(Path::new("/nonexistent/rocm")),
            None,
            &search(dir.path(), &[], None),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no ROCm at /nonexistent/rocm (from --rocm-path)")
                && e.contains("--rocm-path DIR"),
            "{e}"
        );
        // A hipconfig that answers with a missing folder, and no /opt/rocm.
        let bin = dir.path().join("bin");
        hipconfig(
            &bin.join("hipconfig"),
            &dir.path().join("gone"),
            &dir.path().join("gone"),
        );
        let e = rocm_path(
            &sh,
            None,
            None,
            &search(dir.path(), std::slice::from_ref(&bin), None),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("no ROCm found (--rocm-path is not given, ROCM_PATH is unset; `")
                && e.contains("gone, which is not a folder")
                && e.contains("opt/rocm does not exist")
                && e.contains("pass --rocm-path DIR")
                && e.contains("on Debian/Ubuntu it breaks hipcc"),
            "{e}"
        );
        // A failing hipconfig falls back to /opt/rocm, and the plan says why.
        script(
            &bin.join("hipconfig"),
            "#!/bin/sh\necho broken >&2\nexit 1\n",
        );
        let amd = amd_tree(dir.path());
        let (found, how) = rocm_path(&sh, None, None, &search(dir.path(), &[bin], None)).unwrap();
        assert_eq!(found, amd);
        assert!(
            how.starts_with("the default;") && how.contains("broken"),
            "{how}"
        );
    }
}
