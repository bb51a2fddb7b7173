//! The on-disk cache of compiled plugins stays within its bound: the least recently used artifact
//! goes when a new one is stored, and an evicted plugin still loads (it is compiled again). What
//! it loads is only what it wrote: a planted file is never run.

use crate::harness;

use mimeo::plugin::{HostSettings, PluginHost};
use std::path::{Path, PathBuf};

fn read(name: &str) -> Vec<u8> {
    let path = harness::plugin_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The cache directory's file names but its key, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|item| item.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "key")
        .collect();
    names.sort();
    names
}

/// Whether the only file in the cache is the artifact of the component with this digest.
fn holds_only(dir: &Path, digest: &str) -> bool {
    let names = listing(dir);
    let hex = digest.trim_start_matches("sha256:");
    names.len() == 1 && names[0].starts_with(hex) && names[0].ends_with(".cwasm")
}

#[test]
fn a_tiny_cache_keeps_only_the_most_recent_artifact() {
    let cache = tempfile::tempdir().unwrap();
    let settings = HostSettings {
        cache_dir: cache.path().to_owned(),
        // Smaller than any compiled plugin: only the one just stored survives.
        cache_max_bytes: 1,
        concurrency: 2,
        ..Default::default()
    };
    let (filter, rename) = (read("filter-keys"), read("rename-keys"));

    let host = PluginHost::new(settings.clone()).unwrap();
    let first = host.load("filter-keys", &filter).unwrap();
    assert!(
        holds_only(cache.path(), &first.digest),
        "{:?}",
        listing(cache.path())
    );
    let second = host.load("rename-keys", &rename).unwrap();
    assert_ne!(first.digest, second.digest);
    assert!(
        holds_only(cache.path(), &second.digest),
        "filter-keys was evicted: {:?}",
        listing(cache.path())
    );

    // A fresh host (a restart) finds filter-keys gone from disk, compiles it again, stores it and
    // evicts rename-keys in turn.
    let restarted = PluginHost::new(settings).unwrap();
    let again = restarted.load("filter-keys", &filter).unwrap();
    assert_eq!(again.info.name, "filter-keys");
    assert!(
        holds_only(cache.path(), &again.digest),
        "{:?}",
        listing(cache.path())
    );
    // And rename-keys, evicted, loads too.
    let renamed = restarted.load("rename-keys", &rename).unwrap();
    assert_eq!(renamed.info.name, "rename-keys");
    assert!(
        holds_only(cache.path(), &renamed.digest),
        "{:?}",
        listing(cache.path())
    );
}

#[test]
fn concurrent_loads_of_one_plugin_share_a_whole_artifact() {
    let cache = tempfile::tempdir().unwrap();
    let settings = HostSettings {
        cache_dir: cache.path().to_owned(),
        concurrency: 8,
        ..Default::default()
    };
    let bytes = read("filter-keys");
    // Separate hosts, as separate reconcilers or processes: none shares another's memory.
    let hosts: Vec<PluginHost> = (0..4)
        .map(|_| PluginHost::new(settings.clone()).unwrap())
        .collect();
    let digests: Vec<String> = std::thread::scope(|s| {
        let loads: Vec<_> = hosts
            .iter()
            .map(|host| s.spawn(|| host.load("filter-keys", &bytes).unwrap().digest.clone()))
            .collect();
        loads.into_iter().map(|l| l.join().unwrap()).collect()
    });
    assert!(digests.windows(2).all(|w| w[0] == w[1]));
    assert!(
        holds_only(cache.path(), &digests[0]),
        "no partial files left: {:?}",
        listing(cache.path())
    );
    // The artifact they left is whole: a fresh host loads it from disk.
    let artifact: PathBuf = cache.path().join(&listing(cache.path())[0]);
    assert!(std::fs::metadata(&artifact).unwrap().len() > 0);
    let plugin = PluginHost::new(settings)
        .unwrap()
        .load("filter-keys", &bytes)
        .unwrap();
    assert_eq!(plugin.info.name, "filter-keys");
}

/// Someone who can write the cache directory plants native code under the name a plugin's
/// compiled artifact has: real compiled code, of another plugin, so that only the cache's own
/// MAC can tell. It is never loaded; the plugin is compiled again and the file replaced.
#[test]
fn a_planted_artifact_is_never_run() {
    let cache = tempfile::tempdir().unwrap();
    let settings = HostSettings {
        cache_dir: cache.path().to_owned(),
        concurrency: 2,
        ..Default::default()
    };
    let (filter, rename) = (read("filter-keys"), read("rename-keys"));
    let host = PluginHost::new(settings.clone()).unwrap();
    let filter_digest = host.load("filter-keys", &filter).unwrap().digest.clone();
    let rename_digest = host.load("rename-keys", &rename).unwrap().digest.clone();
    let file_of = |digest: &str| -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        let name = listing(cache.path())
            .into_iter()
            .find(|n| n.starts_with(hex))
            .expect("an artifact per plugin");
        cache.path().join(name)
    };
    let (filter_file, rename_file) = (file_of(&filter_digest), file_of(&rename_digest));
    // rename-keys's code, filed as filter-keys's, as a file of the same format would be.
    std::fs::copy(&rename_file, &filter_file).unwrap();
    let restarted = PluginHost::new(settings.clone()).unwrap();
    let loaded = restarted.load("filter-keys", &filter).unwrap();
    assert_eq!(loaded.info.name, "filter-keys", "the planted code ran");
    assert_ne!(
        std::fs::read(&filter_file).unwrap(),
        std::fs::read(&rename_file).unwrap(),
        "the planted file was replaced"
    );
    // Bare compiled code, with no MAC at all, is not loaded either.
    let bare = std::fs::read(&rename_file).unwrap()[32..].to_vec();
    std::fs::write(&filter_file, bare).unwrap();
    let restarted = PluginHost::new(settings.clone()).unwrap();
    assert_eq!(
        restarted.load("filter-keys", &filter).unwrap().info.name,
        "filter-keys"
    );

    // A cache directory another user could write is refused outright.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = PluginHost::new(settings)
        .err()
        .expect("a world-writable cache is refused");
    assert!(
        refused.to_string().contains("writable by group or others"),
        "{refused}"
    );
}
