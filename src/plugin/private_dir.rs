//! Directories only mimeo may write, and a key kept in one: the caches that hold plugin code.
//!
//! The compiled-plugin cache holds native code that mimeo loads without compiling it again, and
//! the artifact cache holds the components it compiles. Whoever can write either runs code as
//! mimeo. So both live in a directory created `0700`, refused when it is a symbolic link, owned by
//! another user, or writable by group or others (a directory someone pre-created under `/tmp`);
//! and what mimeo reads back from them is checked against a digest or a MAC made with a key kept
//! beside it, `0600`.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error("{path}: {why}")]
    Unsafe { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PrivateDirError + '_ {
    move |source| PrivateDirError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The default place for one of mimeo's caches: under `$XDG_CACHE_HOME` or `~/.cache`, else a
/// directory of this user's under the temporary directory. Never a name shared by every user.
pub fn default_cache_dir(name: &str) -> PathBuf {
    let home = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .filter(|p| p.is_absolute());
    match home {
        Some(base) => base.join("mimeo").join(name),
        None => std::env::temp_dir()
            .join(format!("mimeo-{}", rustix::process::geteuid().as_raw()))
            .join(name),
    }
}

/// Creates `dir` (and missing parents) `0700` and checks that only this user can write it.
pub fn ensure(dir: &Path) -> Result<(), PrivateDirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    check(dir, &meta, rustix::process::geteuid().as_raw())
}

/// The checks of [`ensure`] on what the file system says: pure, so each refusal is tested.
fn check(dir: &Path, meta: &std::fs::Metadata, me: u32) -> Result<(), PrivateDirError> {
    let unsafe_dir = |why: String| PrivateDirError::Unsafe {
        path: dir.to_owned(),
        why,
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir(
            "is a symbolic link; mimeo keeps plugin code only in a directory of its own".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory".into()));
    }
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "is owned by uid {}, not by mimeo (uid {me}): another user could plant code in it; \
             remove it or choose another directory",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "is writable by group or others (mode {mode:o}): another user could plant code in \
             it; chmod 700 it or choose another directory"
        )));
    }
    Ok(())
}

/// The key of a private directory (`<dir>/key`, 32 random bytes, `0600`), made on first use.
/// Made whole under a temporary name and linked into place, so that processes starting at once
/// never read half a key, and the first to link it wins.
pub fn key(dir: &Path) -> Result<[u8; 32], PrivateDirError> {
    let path = dir.join("key");
    if std::fs::symlink_metadata(&path).is_err() {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut key))
            .map_err(io(Path::new("/dev/urandom")))?;
        let partial = dir.join(format!(
            ".key-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&partial)
            .and_then(|mut file| file.write_all(&key).and_then(|()| file.sync_all()))
            .and_then(|()| match std::fs::hard_link(&partial, &path) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                _ => Ok(()),
            });
        let _ = std::fs::remove_file(&partial);
        written.map_err(io(&path))?;
    }
    let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != me || meta.permissions().mode() & 0o077 != 0 {
        return Err(PrivateDirError::Unsafe {
            path,
            why: "is not a file of mimeo's readable by it alone (0600)".into(),
        });
    }
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    bytes.try_into().map_err(|_| PrivateDirError::Unsafe {
        path: dir.join("key"),
        why: "does not hold a 32-byte key".into(),
    })
}

/// HMAC-SHA256 (RFC 2104) of `parts`, one after the other.
pub fn mac(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut padded = [0u8; BLOCK];
    padded[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| padded.map(|k| k ^ byte);
    let mut inner = Sha256::new();
    inner.update(pad(0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Compares two MACs in time that does not depend on where they differ.
pub fn same_mac(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test case 2 of RFC 4231, with its key zero-padded to 32 bytes (HMAC pads keys alike).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let got = mac(&key, &[b"what do ya want ", b"for nothing?"]);
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(same_mac(&got, &got));
        let mut other = got;
        other[31] ^= 1;
        assert!(!same_mac(&got, &other));
    }

    #[test]
    fn only_a_directory_of_mimeos_alone_is_used() {
        let me = rustix::process::geteuid().as_raw();
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b/cache");
        ensure(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let open = ensure(&dir).unwrap_err().to_string();
        assert!(open.contains("writable by group or others (mode 777)"), "{open}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();

        let meta = std::fs::symlink_metadata(&dir).unwrap();
        let theirs = check(&dir, &meta, me + 1).unwrap_err().to_string();
        assert!(
            theirs.contains(&format!("is owned by uid {me}, not by mimeo")),
            "{theirs}"
        );

        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(ensure(&link).unwrap_err().to_string().contains("symbolic link"));
    }

    #[test]
    fn processes_starting_at_once_share_one_whole_key() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<[u8; 32]> = std::thread::scope(|s| {
            let made: Vec<_> = (0..8).map(|_| s.spawn(|| key(dir.path()).unwrap())).collect();
            made.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]), "one key for all");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["key"], "no partial key left behind");
    }

    #[test]
    fn the_key_is_made_once_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = key(dir.path()).unwrap();
        assert_eq!(key(dir.path()).unwrap(), first);
        let path = dir.path().join("key");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(key(dir.path()).unwrap_err().to_string().contains("0600"));
    }

    #[test]
    fn default_directories_are_per_user() {
        let dir = default_cache_dir("plugin-cache");
        assert!(
            dir.ends_with("mimeo/plugin-cache") || dir.ends_with("plugin-cache"),
            "{dir:?}"
        );
        assert_ne!(dir, std::env::temp_dir().join("mimeo-plugin-cache"));
    }
}
