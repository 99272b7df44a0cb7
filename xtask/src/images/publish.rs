//! `cargo xtask images publish`: this checkout's images pushed under their content tag.

use super::engine::{Engine, ImageFormat};
use super::model::{Base, Model};
use super::pull::{self, check_label, run_engine};
use super::registry::{Failure, Registry};
use super::tag;
use crate::project::{project_root, target_dir};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use xshell::Shell;

/// Push this checkout's images to the registry under their content tag (`cargo xtask images
/// tag`), as CI does: the Docker image (from Docker's or Podman's store) as
/// REGISTRY/NAME:TAG, and the SIF, signed first (`apptainer sign --key`), as
/// oras://REGISTRY/NAME-sif:TAG (NAME: symmem-rocm, or symmem-debian for --image-base debian).
///
/// The registry is pins.toml's `[images] registry`; `--registry` or SYMMEM_IMAGE_REGISTRY
/// overrides it. A registry on loopback (127.0.0.1:PORT, localhost:PORT) is spoken to over
/// plain HTTP (Podman: --tls-verify=false, Apptainer: --no-https); any other over HTTPS, after
/// `docker login` / `podman login` / `apptainer registry login`. Each image must carry the
/// label with the tag it was built for, and it must be this checkout's tag.
///
/// Examples:
///   cargo xtask images publish --image-base debian --sign-key key.pem
///   cargo xtask images publish --registry 127.0.0.1:5000 --engine podman --image-base debian
///   SYMMEM_IMAGE_REGISTRY=127.0.0.1:5000 cargo xtask images publish --engine docker
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The images to push: amd (containers/Dockerfile, symmem.def) or debian (`cargo xtask
    /// images build`).
    #[arg(long, value_enum, default_value = "amd")]
    image_base: Base,
    /// The engines whose images are pushed (comma-separated or repeated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values = ["docker", "apptainer"]
    )]
    engine: Vec<Engine>,
    /// The registry, host[:port][/path] [default: SYMMEM_IMAGE_REGISTRY, else pins.toml
    /// `[images] registry`].
    #[arg(long, value_name = "REGISTRY")]
    registry: Option<String>,
    /// The private key (PEM) the SIF is signed with before the push (needed with apptainer;
    /// `openssl genpkey -algorithm RSA -out key.pem` makes one, `openssl pkey -in key.pem
    /// -pubout` its public half for SYMMEM_SIF_KEY).
    #[arg(long, value_name = "PEM")]
    sign_key: Option<PathBuf>,
    /// The SIF to push [default: target/images/NAME-TAG.sif, as `cargo xtask images build
    /// --engine apptainer` makes it].
    #[arg(long, value_name = "PATH")]
    sif: Option<PathBuf>,
}

pub fn run(sh: &Shell, args: Args) -> anyhow::Result<()> {
    let root = project_root();
    let model = Model::load(&root, args.image_base)?;
    let registry = Registry::choose(args.registry.as_deref(), &model.registry)?;
    let tag = tag::compute(sh, &root)?;
    eprintln!(
        "publishing the {} images for tag {tag} to {registry}",
        model.name
    );
    let signs = args.engine.iter().find(|e| e.format() == ImageFormat::Sif);
    if let Some(engine) = signs
        && args.sign_key.is_none()
    {
        bail!(
            "a SIF is signed before it is published, and no key was given: add --sign-key \
             PRIVATE.pem (`openssl genpkey -algorithm RSA -out key.pem` makes one), or leave \
             {} out (--engine docker)",
            engine.name()
        );
    }
    if let Err(why) = registry.check_reachable() {
        bail!(
            "cannot publish to the registry {registry}: it is down ({why}). Start it, or name \
             another with --registry or {}",
            super::registry::IMAGE_REGISTRY.name
        );
    }
    for engine in args.engine {
        let exe = engine.locate(std::env::var_os("PATH").as_deref())?;
        let push = Push {
            sh,
            engine: engine.resolve(sh, &exe),
            exe: &exe,
            model: &model,
            tag: &tag,
            registry: &registry,
        };
        let pushed = match push.engine.format() {
            ImageFormat::Oci => push.oci()?,
            ImageFormat::Sif => {
                let sif = args
                    .sif
                    .clone()
                    .unwrap_or_else(|| target_dir().join("images").join(model.sif_name(&tag)));
                let key = args.sign_key.as_deref().expect("checked above");
                push.sif(&sif, key)?
            }
        };
        println!("{pushed}");
    }
    Ok(())
}

/// One engine's push of this checkout's image: the engine, its program, the image and where
/// it goes.
struct Push<'a> {
    sh: &'a Shell,
    engine: Engine,
    exe: &'a Path,
    model: &'a Model,
    tag: &'a str,
    registry: &'a Registry,
}

impl Push<'_> {
    /// Why a push failed, with the registry.
    fn failed(&self, image: &str, said: &pull::Said) -> String {
        let failure = Failure::classify(&said.text, said.signal);
        format!(
            "pushing {image} to the registry {} failed: {}",
            self.registry,
            failure.reason(self.registry, self.engine)
        )
    }

    /// `PROGRAM push [LOOPBACK FLAGS] WHAT...`.
    fn push(&self, what: &[String]) -> anyhow::Result<pull::Said> {
        let mut push = vec!["push".to_string()];
        push.extend(self.registry.transport_flags(self.engine));
        push.extend(what.iter().cloned());
        run_engine(self.sh, self.exe, &push)
    }

    /// The image in the engine's store, tagged for the registry and pushed.
    fn oci(&self) -> anyhow::Result<String> {
        let (sh, exe, engine, tag) = (self.sh, self.exe, self.engine, self.tag);
        let local = self.model.docker_image(tag);
        let Some(label) = pull::oci_label(sh, exe, &local) else {
            bail!(
                "{local} is not in {}'s store: build it first:\n  {}",
                engine.name(),
                pull::local_build(self.model, engine, tag)
            );
        };
        check_label(&label, tag, &local).map_err(anyhow::Error::msg)?;
        let remote = self.registry.reference(engine, self.model.name, tag);
        if remote != local {
            let said = run_engine(sh, exe, &["tag".into(), local.clone(), remote.clone()])?;
            if !said.ok {
                bail!(
                    "{} tag {local} {remote} failed (its message is above)",
                    engine.name()
                );
            }
        }
        let said = self.push(std::slice::from_ref(&remote))?;
        if !said.ok {
            if remote != local {
                // The name made for the push goes with it: only `local` stays.
                let _ = run_engine(sh, exe, &["rmi".into(), remote.clone()]);
            }
            bail!("{}", self.failed(&remote, &said));
        }
        Ok(remote)
    }

    /// The SIF at `sif`, signed with `key` as a copy, pushed.
    fn sif(&self, sif: &Path, key: &Path) -> anyhow::Result<String> {
        if !sif.is_file() {
            bail!(
                "{} is missing: build it first:\n  {}",
                sif.display(),
                pull::local_build(self.model, self.engine, self.tag)
            );
        }
        // Signed as a copy: the local SIF stays as it was built.
        let signed = sif.with_extension("signed.sif");
        std::fs::copy(sif, &signed).with_context(|| format!("copying {}", sif.display()))?;
        let result = self.sign_and_push(&signed, key);
        let _ = std::fs::remove_file(&signed);
        result
    }

    fn sign_and_push(&self, signed: &Path, key: &Path) -> anyhow::Result<String> {
        let path = signed.display().to_string();
        let sign = [
            "sign".into(),
            "--key".into(),
            key.display().to_string(),
            path.clone(),
        ];
        if !run_engine(self.sh, self.exe, &sign)?.ok {
            bail!(
                "{} sign --key {} failed (its message is above): the key must be a private PEM \
                 key",
                self.engine.name(),
                key.display()
            );
        }
        let remote = self
            .registry
            .reference(self.engine, self.model.name, self.tag);
        let said = self.push(&[path, remote.clone()])?;
        if !said.ok {
            bail!("{}", self.failed(&remote, &said));
        }
        Ok(remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::project_root;

    const TAG: &str = "0123456789abcdef";

    /// A fake engine at `dir/NAME` logging to `dir/log`, answering per `arms` (shell `case`
    /// arms on "$*"), anything else with success.
    fn fake(dir: &Path, name: &str, arms: &str) -> (PathBuf, PathBuf) {
        let log = dir.join("log");
        let exe = dir.join(name);
        symmem_test_support::command::write_script(
            &exe,
            &format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n{arms}\n*) exit 0 ;;\nesac\n",
                log.display()
            ),
        );
        (exe, log)
    }

    fn debian() -> Model {
        Model::load(&project_root(), Base::Debian).unwrap()
    }

    fn local() -> Registry {
        Registry::parse("127.0.0.1:5000/ci", "test").unwrap()
    }

    fn push(engine: Engine, arms: &str) -> (anyhow::Result<String>, String) {
        let dir = tempfile::tempdir().unwrap();
        let (exe, log) = fake(dir.path(), engine.name(), arms);
        let pushed = Push {
            sh: &Shell::new().unwrap(),
            engine,
            exe: &exe,
            model: &debian(),
            tag: TAG,
            registry: &local(),
        }
        .oci();
        (pushed, std::fs::read_to_string(log).unwrap_or_default())
    }

    #[test]
    fn an_image_is_tagged_for_the_registry_and_pushed_under_its_tag() {
        let remote = format!("127.0.0.1:5000/ci/symmem-debian:{TAG}");
        let (pushed, log) = push(Engine::Docker, &format!("image*) echo {TAG} ;;"));
        assert_eq!(pushed.unwrap(), remote);
        let local = debian().docker_image(TAG);
        assert!(
            log.contains(&format!("tag {local} {remote}\npush {remote}\n")),
            "{log}"
        );
        let (pushed, log) = push(Engine::Podman, &format!("image*) echo {TAG} ;;"));
        assert_eq!(pushed.unwrap(), remote);
        assert!(
            log.contains(&format!("push --tls-verify=false {remote}")),
            "{log}"
        );
    }

    #[test]
    fn a_missing_or_mislabelled_image_is_not_pushed() {
        let (pushed, log) = push(Engine::Docker, "image*) exit 1 ;;");
        let e = format!("{:#}", pushed.unwrap_err());
        assert!(e.contains("is not in docker's store"), "{e}");
        assert!(e.contains("cargo xtask images build"), "{e}");
        let (pushed, log2) = push(Engine::Docker, "image*) echo fedcba9876543210 ;;");
        let e = format!("{:#}", pushed.unwrap_err());
        assert!(e.contains("built for tag fedcba9876543210"), "{e}");
        for log in [log, log2] {
            assert!(!log.contains("push"), "{log}");
        }
    }

    #[test]
    fn a_refused_push_names_the_registry_and_the_login() {
        let (pushed, log) = push(
            Engine::Docker,
            &format!(
                "image*) echo {TAG} ;;\npush*) echo 'no basic auth credentials' >&2; exit 1 ;;"
            ),
        );
        let e = format!("{:#}", pushed.unwrap_err());
        assert!(
            e.contains("to the registry 127.0.0.1:5000/ci failed"),
            "{e}"
        );
        assert!(
            e.contains("needs a login: `docker login 127.0.0.1:5000`"),
            "{e}"
        );
        assert!(
            log.ends_with(&format!("rmi 127.0.0.1:5000/ci/symmem-debian:{TAG}\n")),
            "the tag made for the push is removed: {log}"
        );
    }

    #[test]
    fn the_sif_is_signed_as_a_copy_then_pushed_over_plain_http() {
        let dir = tempfile::tempdir().unwrap();
        let (exe, log) = fake(dir.path(), "apptainer", "");
        let sif = dir.path().join("built.sif");
        std::fs::write(&sif, "sif").unwrap();
        let key = dir.path().join("key.pem");
        let (sh, model, registry) = (Shell::new().unwrap(), debian(), local());
        let push = Push {
            sh: &sh,
            engine: Engine::Apptainer,
            exe: &exe,
            model: &model,
            tag: TAG,
            registry: &registry,
        };
        let pushed = push.sif(&sif, &key).unwrap();
        let remote = format!("oras://127.0.0.1:5000/ci/symmem-debian-sif:{TAG}");
        assert_eq!(pushed, remote);
        let signed = sif.with_extension("signed.sif");
        let log = std::fs::read_to_string(log).unwrap();
        assert_eq!(
            log,
            format!(
                "sign --key {} {}\npush --no-https {} {remote}\n",
                key.display(),
                signed.display(),
                signed.display()
            )
        );
        assert!(!signed.exists(), "the signed copy is removed");
        assert_eq!(std::fs::read_to_string(&sif).unwrap(), "sif");
        let e = push.sif(&dir.path().join("none.sif"), &key).unwrap_err();
        assert!(format!("{e:#}").contains("--engine apptainer"), "{e:#}");
    }
}
