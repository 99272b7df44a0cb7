//! Getting the image a container run needs: the local copy when there is one, else a pull from
//! the registry, checked before it is used (the tag it says it was built for; a SIF's
//! signature). A failed pull names the registry, the reason and the local-build command, and
//! leaves nothing that a later run would use.

use super::engine::{Engine, ImageFormat};
use super::model::{Base, Model, TAG_ARG};
use super::registry::{Failure, Registry, SIF_KEY, SifKey};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use xshell::{Shell, cmd};

/// The label every image carries: the tag it was built for (`model::common_labels`).
pub const TAG_LABEL: &str = "io.github.symmem.image-tag";

/// What a pull needs to know besides the image.
pub struct Source<'a> {
    pub registry: &'a Registry,
    /// How a pulled SIF is checked; `None`: no key given, so a pulled SIF is refused.
    pub sif_key: Option<SifKey>,
}

/// A command's exit and what it said (stdout and stderr), echoed to stderr.
pub struct Said {
    pub ok: bool,
    /// Killed by a signal.
    pub signal: bool,
    pub text: String,
}

/// Runs `exe args`, its output captured, then shown on stderr.
pub fn run_engine(sh: &Shell, exe: &Path, args: &[String]) -> anyhow::Result<Said> {
    let output = cmd!(sh, "{exe} {args...}")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if !text.trim().is_empty() {
        eprintln!("{}", text.trim_end());
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(Said {
        ok: output.status.success(),
        signal: output.status.signal().is_some(),
        text,
    })
}

/// The command that builds the image here instead of pulling it.
pub fn local_build(model: &Model, engine: Engine, tag: &str) -> String {
    let spec = engine.spec();
    match (model.base, spec.format) {
        (Base::Debian, _) => format!(
            "cargo xtask images base && {}",
            engine.debian_build(&model.docker_image(tag))
        ),
        (Base::Amd, ImageFormat::Oci) => {
            let flags: String = spec.build_flags.iter().map(|f| format!(" {f}")).collect();
            format!(
                "{} build{flags} -f containers/Dockerfile --build-arg {TAG_ARG}={tag} -t {} .",
                spec.name,
                model.docker_image(tag)
            )
        }
        (Base::Amd, ImageFormat::Sif) => format!(
            "{} build --notest --build-arg {TAG_ARG}={tag} target/images/{} \
             containers/symmem.def (`--notest` without an AMD GPU: a failing %test writes no \
             image)",
            spec.name,
            model.sif_name(tag)
        ),
    }
}

/// The error of a pull that did not happen or did not pass its checks.
fn refuse(model: &Model, engine: Engine, tag: &str, registry: &Registry, why: &str) -> String {
    format!(
        "cannot get the {} image for tag {tag} from the registry {registry}: {why}. Build it \
         here instead, then run again:\n  {}",
        model.name,
        local_build(model, engine, tag)
    )
}

/// Fails within seconds when the registry is down, naming it and the local build.
fn reachable(model: &Model, engine: Engine, tag: &str, registry: &Registry) -> anyhow::Result<()> {
    if let Err(why) = registry.check_reachable() {
        bail!(
            "{}",
            refuse(
                model,
                engine,
                tag,
                registry,
                &format!(
                    "the registry is down ({why}; --registry or {} names another)",
                    super::registry::IMAGE_REGISTRY.name
                )
            )
        );
    }
    Ok(())
}

/// The tag an OCI image's label says it was built for (empty when it has none).
pub fn oci_label(sh: &Shell, exe: &Path, image: &str) -> Option<String> {
    let format = format!("{{{{index .Config.Labels \"{TAG_LABEL}\"}}}}");
    let output = cmd!(sh, "{exe} image inspect --format {format} {image}")
        .quiet()
        .ignore_status()
        .output()
        .ok()?;
    output.status.success().then(|| {
        let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if text == "<no value>" {
            String::new()
        } else {
            text
        }
    })
}

/// The OCI image to run: the local build, else a copy pulled before, else pulled now.
pub fn oci_image(
    sh: &Shell,
    engine: Engine,
    exe: &Path,
    model: &Model,
    tag: &str,
    source: &Source<'_>,
) -> anyhow::Result<String> {
    let registry = source.registry;
    let local = model.docker_image(tag);
    let remote = registry.reference(engine, model.name, tag);
    for (image, what) in [(&local, "built here"), (&remote, "pulled before")] {
        if let Some(label) = oci_label(sh, exe, image) {
            check_label(&label, tag, image).map_err(|why| {
                anyhow::anyhow!("{why}: remove it (`{} rmi {image}`)", engine.name())
            })?;
            eprintln!("using the local copy of {image} ({what}; no pull)");
            return Ok(image.clone());
        }
    }
    reachable(model, engine, tag, registry)?;
    eprintln!("pulling {remote} ...");
    let mut args = vec!["pull".to_string()];
    args.extend(registry.transport_flags(engine));
    args.push(remote.clone());
    let said = run_engine(sh, exe, &args)?;
    if !said.ok {
        let failure = Failure::classify(&said.text, said.signal);
        bail!(
            "{}",
            refuse(
                model,
                engine,
                tag,
                registry,
                &failure.reason(registry, engine)
            )
        );
    }
    let label = oci_label(sh, exe, &remote).unwrap_or_default();
    if let Err(why) = check_label(&label, tag, &remote) {
        let _ = run_engine(sh, exe, &["rmi".into(), remote.clone()]);
        bail!(
            "{}",
            refuse(
                model,
                engine,
                tag,
                registry,
                &format!("{why}; it was removed")
            )
        );
    }
    eprintln!("pulled {remote}; its label says tag {tag}");
    Ok(remote)
}

/// Ok when the image's label is the tag asked for.
pub fn check_label(label: &str, tag: &str, image: &str) -> Result<(), String> {
    if label == tag {
        return Ok(());
    }
    let said = if label.is_empty() {
        format!("has no {TAG_LABEL} label")
    } else {
        format!("says it was built for tag {label} ({TAG_LABEL})")
    };
    Err(format!("refused {image}: it {said}, not for {tag}"))
}

/// The SIF's labels as `key: value` lines (`apptainer inspect --labels`).
fn sif_label(sh: &Shell, exe: &Path, sif: &Path) -> String {
    let output = cmd!(sh, "{exe} inspect --labels {sif}")
        .quiet()
        .ignore_status()
        .output();
    let text = output
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let prefix = format!("{TAG_LABEL}:");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

/// The SIF to run: the local one in `cache`, else pulled into it (as `.partial` until it
/// passed its checks).
pub fn sif(
    sh: &Shell,
    engine: Engine,
    exe: &Path,
    model: &Model,
    tag: &str,
    cache: &Path,
    source: &Source<'_>,
) -> anyhow::Result<PathBuf> {
    let registry = source.registry;
    let sif = cache.join(model.sif_name(tag));
    if sif.is_file() {
        eprintln!("using the local copy {} (no pull)", sif.display());
        return Ok(sif);
    }
    let Some(key) = &source.sif_key else {
        bail!(
            "{}",
            refuse(
                model,
                engine,
                tag,
                registry,
                &format!(
                    "a pulled SIF runs only once its signature is verified, and no key is \
                     given: set {}=PUBLIC.pem (the key CI signs with), or {}=unverified to run \
                     it unchecked",
                    SIF_KEY.name, SIF_KEY.name
                )
            )
        );
    };
    reachable(model, engine, tag, registry)?;
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let partial = sif.with_extension("sif.partial");
    let _ = std::fs::remove_file(&partial);
    let reference = registry.reference(engine, model.name, tag);
    eprintln!("pulling {reference} ...");
    let mut args = vec!["pull".to_string()];
    args.extend(registry.transport_flags(engine));
    args.extend([partial.display().to_string(), reference]);
    let said = run_engine(sh, exe, &args)?;
    let checked = if !said.ok || !partial.is_file() {
        Err(Failure::classify(&said.text, said.signal).reason(registry, engine))
    } else {
        check_sif(sh, exe, &partial, key, tag)
    };
    if let Err(why) = checked {
        let _ = std::fs::remove_file(&partial);
        bail!("{}", refuse(model, engine, tag, registry, &why));
    }
    std::fs::rename(&partial, &sif)
        .with_context(|| format!("moving {} into place", partial.display()))?;
    Ok(sif)
}

/// A pulled SIF's signature (unless opted out) and label.
fn check_sif(sh: &Shell, exe: &Path, sif: &Path, key: &SifKey, tag: &str) -> Result<(), String> {
    match key {
        SifKey::Public(public) => {
            let args = [
                "verify".to_string(),
                "--key".into(),
                public.display().to_string(),
                sif.display().to_string(),
            ];
            let said = run_engine(sh, exe, &args).map_err(|e| format!("{e:#}"))?;
            if !said.ok {
                return Err(format!(
                    "its signature does not verify with {} (unsigned, tampered, or signed with \
                     another key; {}=unverified runs it anyway), and it was removed",
                    public.display(),
                    SIF_KEY.name
                ));
            }
        }
        SifKey::Unverified => eprintln!(
            "warning: the SIF's signature is not checked ({}=unverified)",
            SIF_KEY.name
        ),
    }
    check_label(&sif_label(sh, exe, sif), tag, &sif.display().to_string())
        .map_err(|why| format!("{why}; it was removed"))
}
