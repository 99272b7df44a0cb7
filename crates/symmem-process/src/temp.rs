//! Private temp folders: the one maker.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub use tempfile::TempDir;

/// A temp folder could not be made.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not create a folder in {}: {cause}; point TMPDIR at a writable folder",
    parent.display()
)]
pub struct TempDirError {
    /// Where it was to be made (the temp folder).
    pub parent: PathBuf,
    /// What the system said (in the message).
    pub cause: std::io::Error,
}

/// A new folder under the temp folder (`$TMPDIR`, else `/tmp`), named `prefix` and random
/// characters, that only this user can enter (mode 0700: other users must not plant files
/// where this process's children meet). Removed when the guard drops; [`TempDir::keep`]
/// keeps it.
pub fn private_dir(prefix: &str) -> Result<TempDir, TempDirError> {
    let parent = std::env::temp_dir();
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&parent)
        .map_err(|cause| TempDirError { parent, cause })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_folder_is_new_and_private_and_removed_with_its_guard() {
        let dir = private_dir("symmem-process-test-").unwrap();
        let path = dir.path().to_path_buf();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("symmem-process-test-") && name.len() > 20,
            "{name}"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let other = private_dir("symmem-process-test-").unwrap();
        assert_ne!(other.path(), path);
        drop(dir);
        assert!(!path.exists());
        let kept = other.keep();
        assert!(kept.is_dir());
        std::fs::remove_dir(kept).unwrap();
    }
}
