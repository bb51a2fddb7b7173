//! The on-disk store of fetched artifacts, content-addressed so a pinned reference is served after
//! a restart without asking the registry.
//!
//! ```text
//! <dir>/blobs/sha256/<hex>           a layer's bytes (the component)
//! <dir>/manifests/sha256/<hex>.json  the manifest itself, as the registry sent it
//! <dir>/tmp/                         files being written; renamed into place when complete
//! ```
//!
//! Nothing read back is trusted for where it lies: a manifest must hash to the digest it is
//! filed under, and the layer it names to its own digest. The directory is private
//! (`private_dir`), but a file planted in it still could not make a pinned digest run other code.
//!
//! Every write is a temp file renamed into place, so a reader (in this or another process) sees
//! a whole file or none. A download streams into such a file ([`Partial`]), checked as it comes,
//! and is renamed into place only once its digest matched; one that failed is removed. A blob's mtime is its last use; when the blobs add up to more than the
//! limit the least recently used go first, but never the one just stored or read. Blocking: call
//! it off the async runtime.

use super::error::OciError;
use super::manifest::check_manifest;
use super::reference::is_digest;
use crate::plugin::private_dir;
use crate::sync::hash::digest_bytes;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// An artifact served from the cache: its layer's digest, the manifest's annotations, and the
/// layer's bytes, each checked against its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cached {
    pub layer: String,
    pub annotations: BTreeMap<String, String>,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug)]
pub(super) struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

/// One blob as eviction sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BlobUse {
    pub name: String,
    pub size: u64,
    pub last_used: SystemTime,
}

/// Which blobs to delete so the rest fit in `max_bytes`: least recently used first, never
/// `keep`. Pure, so the policy is tested without a file system.
pub(super) fn plan_eviction(mut blobs: Vec<BlobUse>, max_bytes: u64, keep: &str) -> Vec<String> {
    let mut total: u64 = blobs.iter().map(|b| b.size).sum();
    blobs.sort_by(|a, b| a.last_used.cmp(&b.last_used).then_with(|| a.name.cmp(&b.name)));
    let mut evict = Vec::new();
    for blob in blobs {
        if total <= max_bytes {
            break;
        }
        if blob.name == keep {
            continue;
        }
        total -= blob.size;
        evict.push(blob.name);
    }
    evict
}

fn cache_error(what: &str, path: &Path, e: impl std::fmt::Display) -> OciError {
    OciError::Cache(format!("{what} {}: {e}", path.display()))
}

impl Cache {
    pub fn new(dir: PathBuf, max_bytes: u64) -> Result<Self, OciError> {
        private_dir::ensure(&dir)
            .map_err(|e| OciError::Cache(format!("the artifact cache (--artifact-cache-dir) {e}")))?;
        for sub in ["blobs/sha256", "manifests/sha256", "tmp"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(|e| cache_error("creating", &path, e))?;
        }
        Ok(Cache { dir, max_bytes })
    }

    /// `digest` must have passed [`is_digest`]: it becomes part of a path.
    fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs/sha256").join(&digest["sha256:".len()..])
    }

    fn entry_path(&self, manifest_digest: &str) -> PathBuf {
        self.dir
            .join("manifests/sha256")
            .join(format!("{}.json", &manifest_digest["sha256:".len()..]))
    }

    /// The artifact for a manifest digest, if its manifest and layer are both here and each
    /// hashes to its digest (anything else is removed and reported as a miss). Marks the blob used.
    pub fn get(&self, manifest_digest: &str) -> Result<Option<Cached>, OciError> {
        if !is_digest(manifest_digest) {
            return Ok(None);
        }
        let entry_path = self.entry_path(manifest_digest);
        let manifest = match std::fs::read(&entry_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cache_error("reading", &entry_path, e)),
        };
        let checked = check_manifest(&manifest, manifest_digest, u64::MAX)
            .ok()
            .filter(|_| digest_bytes(&manifest) == manifest_digest);
        let Some((layer, annotations)) = checked else {
            tracing::warn!(file = %entry_path.display(), "removing a cached manifest that is not the one its digest names");
            let _ = std::fs::remove_file(&entry_path);
            return Ok(None);
        };
        let blob_path = self.blob_path(&layer.digest);
        let bytes = match std::fs::read(&blob_path) {
            Ok(bytes) => bytes,
            // Evicted: the manifest alone is no use.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let _ = std::fs::remove_file(&entry_path);
                return Ok(None);
            }
            Err(e) => return Err(cache_error("reading", &blob_path, e)),
        };
        if digest_bytes(&bytes) != layer.digest {
            tracing::warn!(file = %blob_path.display(), "removing a damaged cached artifact");
            let _ = std::fs::remove_file(&blob_path);
            let _ = std::fs::remove_file(&entry_path);
            return Ok(None);
        }
        touch(&blob_path);
        Ok(Some(Cached {
            layer: layer.digest,
            annotations,
            bytes,
        }))
    }

    /// Stores a verified manifest under its digest and its layer under the layer's, then evicts
    /// down to the limit, keeping this blob. Downloads stream instead
    /// ([`put_downloaded`](Self::put_downloaded)); the tests fill the cache with this.
    #[cfg(test)]
    pub fn put(&self, manifest_digest: &str, manifest: &[u8], bytes: &[u8]) -> Result<(), OciError> {
        let layer = digest_bytes(bytes);
        if !is_digest(manifest_digest) || digest_bytes(manifest) != manifest_digest {
            return Err(OciError::Cache(format!(
                "refusing to store a manifest under {manifest_digest}: it does not hash to it"
            )));
        }
        let blob_path = self.blob_path(&layer);
        if blob_path.exists() {
            touch(&blob_path);
        } else {
            self.write_atomically(&blob_path, bytes)?;
        }
        self.write_atomically(&self.entry_path(manifest_digest), manifest)?;
        self.evict(&layer)
    }

    /// A file of `tmp/` no one else uses.
    fn temp_path(&self, name: &str) -> PathBuf {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        self.dir.join("tmp").join(format!(
            "{name}.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// A new file in `tmp/` for a download to stream into; removed when dropped unless stored
    /// with [`put_downloaded`](Self::put_downloaded).
    pub fn partial(&self) -> Result<Partial, OciError> {
        let path = self.temp_path("download");
        let file = std::fs::File::create_new(&path).map_err(|e| cache_error("creating", &path, e))?;
        Ok(Partial {
            file: Some(tokio::fs::File::from_std(file)),
            path,
        })
    }

    /// Stores a verified manifest and the layer a download streamed into `partial` (checked
    /// against `layer` as it came: [`super::streamed`]), then evicts down to the limit, keeping
    /// this blob.
    pub fn put_downloaded(
        &self,
        manifest_digest: &str,
        manifest: &[u8],
        mut partial: Partial,
        layer: &str,
    ) -> Result<(), OciError> {
        if !is_digest(manifest_digest) || digest_bytes(manifest) != manifest_digest || !is_digest(layer) {
            return Err(OciError::Cache(format!(
                "refusing to store a manifest under {manifest_digest}: it does not hash to it"
            )));
        }
        partial.file = None;
        let blob_path = self.blob_path(layer);
        if blob_path.exists() {
            touch(&blob_path);
        } else {
            std::fs::rename(&partial.path, &blob_path).map_err(|e| cache_error("writing", &blob_path, e))?;
        }
        self.write_atomically(&self.entry_path(manifest_digest), manifest)?;
        self.evict(layer)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> Result<(), OciError> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("blob");
        let partial = self.temp_path(name);
        let written = std::fs::write(&partial, bytes)
            .and_then(|()| std::fs::File::open(&partial)?.sync_all())
            .and_then(|()| std::fs::rename(&partial, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            cache_error("writing", path, e)
        })
    }

    /// Deletes least recently used blobs (and the entries that point at them) until the rest fit.
    pub fn evict(&self, keep: &str) -> Result<(), OciError> {
        let blobs_dir = self.dir.join("blobs/sha256");
        let mut blobs = Vec::new();
        let listing = std::fs::read_dir(&blobs_dir).map_err(|e| cache_error("listing", &blobs_dir, e))?;
        for item in listing.flatten() {
            let Ok(meta) = item.metadata() else { continue };
            let name = format!("sha256:{}", item.file_name().to_string_lossy());
            if !meta.is_file() || !is_digest(&name) {
                continue;
            }
            blobs.push(BlobUse {
                name,
                size: meta.len(),
                last_used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        let evict = plan_eviction(blobs, self.max_bytes, keep);
        if evict.is_empty() {
            return Ok(());
        }
        for digest in &evict {
            tracing::debug!(%digest, "evicting a cached artifact");
            let _ = std::fs::remove_file(self.blob_path(digest));
        }
        let entries_dir = self.dir.join("manifests/sha256");
        if let Ok(listing) = std::fs::read_dir(&entries_dir) {
            for item in listing.flatten() {
                let stale = std::fs::read(item.path())
                    .ok()
                    .and_then(|bytes| check_manifest(&bytes, "cached", u64::MAX).ok())
                    .is_none_or(|(layer, _)| evict.contains(&layer.digest));
                if stale {
                    let _ = std::fs::remove_file(item.path());
                }
            }
        }
        Ok(())
    }
}

/// A download being written: the file, and where it is. Removed when dropped, unless it was
/// renamed into place.
pub(super) struct Partial {
    file: Option<tokio::fs::File>,
    path: PathBuf,
}

impl Partial {
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), OciError> {
        use tokio::io::AsyncWriteExt as _;
        let file = self.file.as_mut().expect("written before it is stored");
        file.write_all(chunk)
            .await
            .map_err(|e| cache_error("writing", &self.path, e))
    }

    /// Everything written is on disk.
    pub async fn finish(&mut self) -> Result<(), OciError> {
        use tokio::io::AsyncWriteExt as _;
        let file = self.file.as_mut().expect("finished before it is stored");
        let synced = match file.flush().await {
            Ok(()) => file.sync_all().await,
            Err(e) => Err(e),
        };
        synced.map_err(|e| cache_error("writing", &self.path, e))
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        // Gone already when it was renamed into place.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Marks a file used now; a failure only makes its eviction come sooner.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn blob(name: &str, size: u64, age_s: u64) -> BlobUse {
        BlobUse {
            name: name.into(),
            size,
            last_used: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 - age_s),
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_first() {
        let blobs = vec![blob("new", 40, 1), blob("old", 40, 100), blob("mid", 40, 50)];
        assert_eq!(plan_eviction(blobs.clone(), 120, "new"), Vec::<String>::new());
        assert_eq!(plan_eviction(blobs.clone(), 119, "new"), vec!["old"]);
        assert_eq!(plan_eviction(blobs.clone(), 40, "new"), vec!["old", "mid"]);
        assert_eq!(
            plan_eviction(blobs.clone(), 0, "new"),
            vec!["old", "mid"],
            "keeps the one in use"
        );
        assert_eq!(
            plan_eviction(blobs, 40, "old"),
            vec!["mid", "new"],
            "even when it is the oldest"
        );
        assert_eq!(
            plan_eviction(vec![blob("big", 500, 0)], 100, "big"),
            Vec::<String>::new()
        );
    }

    fn digest(bytes: &[u8]) -> String {
        digest_bytes(bytes)
    }

    /// A Wasm artifact's manifest for `layer`, with an annotation `n`.
    fn manifest(layer: &[u8], n: u8) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": digest(b"{}"), "size": 2},
            "layers": [{"mediaType": "application/wasm", "digest": digest(layer), "size": layer.len()}],
            "annotations": {"n": n.to_string()},
        }))
        .unwrap()
    }

    #[test]
    fn stores_serves_and_evicts_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned(), 25).unwrap();
        let put = |n: u8, bytes: &[u8]| {
            let manifest = manifest(bytes, n);
            let name = digest(&manifest);
            cache.put(&name, &manifest, bytes).unwrap();
            // Distinct mtimes, whatever the file system's resolution.
            std::thread::sleep(Duration::from_millis(20));
            name
        };
        let a = put(1, &[b'a'; 10]);
        let b = put(2, &[b'b'; 10]);
        let found = cache.get(&a).unwrap().unwrap();
        assert_eq!(found.bytes, vec![b'a'; 10]);
        assert_eq!(found.annotations["n"], "1");
        std::thread::sleep(Duration::from_millis(20));
        // a was read after b was stored, so b is the least recently used when c does not fit.
        let c = put(3, &[b'c'; 10]);
        assert!(cache.get(&b).unwrap().is_none(), "b was evicted");
        assert!(cache.get(&a).unwrap().is_some());
        assert!(cache.get(&c).unwrap().is_some());
        assert!(!cache.entry_path(&b).exists(), "its manifest went with it");

        // A fresh handle on the same directory (a restart) serves what is there.
        let again = Cache::new(dir.path().to_owned(), 25).unwrap();
        assert!(again.get(&c).unwrap().is_some());

        // A damaged blob is a miss, and is removed.
        let found = again.get(&c).unwrap().unwrap();
        std::fs::write(again.blob_path(&found.layer), b"tampered").unwrap();
        assert!(again.get(&c).unwrap().is_none());
        assert!(!again.blob_path(&found.layer).exists());

        // Nothing is left behind in tmp/.
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        // Malformed digests never become paths.
        assert!(again.get("sha256:../../x").unwrap().is_none());
    }

    /// Someone who can write the directory files a manifest naming their own (well-formed,
    /// self-consistent) layer under the digest a rule pins: it is not served.
    #[test]
    fn a_planted_manifest_never_serves_a_pinned_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned(), 1 << 20).unwrap();
        let good = b"the real component";
        let pinned = digest(&manifest(good, 1));
        cache.put(&pinned, &manifest(good, 1), good).unwrap();
        let planted = b"someone else's component";
        cache
            .put(&digest(&manifest(planted, 2)), &manifest(planted, 2), planted)
            .unwrap();
        std::fs::write(cache.entry_path(&pinned), manifest(planted, 2)).unwrap();
        assert!(
            cache.get(&pinned).unwrap().is_none(),
            "a planted manifest was served"
        );
        assert!(!cache.entry_path(&pinned).exists(), "and removed");
        assert!(cache.put(&pinned, &manifest(planted, 2), planted).is_err());
    }

    #[tokio::test]
    async fn a_download_is_stored_once_whole_and_a_failed_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned(), 1 << 20).unwrap();
        let layer = b"streamed component";
        let manifest = manifest(layer, 1);
        let name = digest(&manifest);
        let mut partial = cache.partial().unwrap();
        for chunk in layer.chunks(5) {
            partial.write(chunk).await.unwrap();
        }
        partial.finish().await.unwrap();
        cache
            .put_downloaded(&name, &manifest, partial, &digest(layer))
            .unwrap();
        assert_eq!(cache.get(&name).unwrap().unwrap().bytes, layer);
        // A download that failed half way is dropped: nothing of it stays.
        let mut failed = cache.partial().unwrap();
        failed.write(b"half a layer").await.unwrap();
        drop(failed);
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        // A manifest that is not the digest's is not stored, and neither is its layer.
        let mut partial = cache.partial().unwrap();
        partial.write(b"x").await.unwrap();
        let other = b"{}".to_vec();
        assert!(
            cache
                .put_downloaded(&name, &other, partial, &digest(b"x"))
                .is_err()
        );
        assert!(!cache.blob_path(&digest(b"x")).exists());
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn one_blob_larger_than_the_limit_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned(), 5).unwrap();
        let bytes = [7u8; 50];
        let manifest = manifest(&bytes, 0);
        let name = digest(&manifest);
        cache.put(&name, &manifest, &bytes).unwrap();
        assert_eq!(cache.get(&name).unwrap().unwrap().bytes, bytes);
    }

    #[test]
    fn a_shared_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("oci-cache");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = Cache::new(dir, 1).unwrap_err().to_string();
        assert!(refused.contains("writable by group or others"), "{refused}");
    }
}
