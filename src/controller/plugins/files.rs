//! The `file://` plugins rules use, looked at every [`POLL`] (modification time and length, one
//! `stat` each) while a rule uses them, so that a component replaced on disk (a ConfigMap mounted
//! into the pod, updated by the kubelet) reaches the rules' copies without waiting for their
//! next reconcile. A poll and not inotify: mounted ConfigMaps change by symlink swaps that
//! inotify on the file does not see, and a few `stat`s every two seconds cost nothing.

use super::used_by::UsedBy;
use crate::api::Transform;
use crate::controller::watches::Triggers;
use crate::locks::lock;
use crate::plugin::source::{PluginSource, parse};
use crate::sync::ownership::RuleKey;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::task::AbortHandle;

/// How often the files in use are looked at.
const POLL: Duration = Duration::from_secs(2);

/// What a file looked like: modification time and length, or absent.
type Stamp = Option<(SystemTime, u64)>;

/// A file's modification time and length: what tells a replaced plugin file from the one
/// loaded, here and where plugins are loaded.
pub fn file_stamp(meta: &std::fs::Metadata) -> (SystemTime, u64) {
    (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len())
}

/// The plugin files a rule's `transforms` name, under `dir` (none without a plugin directory).
pub fn files_of(transforms: &[Transform], dir: Option<&Path>) -> BTreeSet<PathBuf> {
    let Some(dir) = dir else {
        return BTreeSet::new();
    };
    transforms
        .iter()
        .filter_map(|t| match parse(&t.plugin, None) {
            Ok(PluginSource::File(relative)) => Some(dir.join(relative)),
            _ => None,
        })
        .collect()
}

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path).ok().map(|meta| file_stamp(&meta))
}

/// The files in use: how each looked last, and who uses it.
type Files = (HashMap<PathBuf, Stamp>, UsedBy<PathBuf>);

pub struct PluginFiles {
    triggers: Triggers,
    /// What each file in use looked like last, and who uses it; shared with the poller.
    used: Arc<Mutex<Files>>,
    poller: Mutex<Option<AbortHandle>>,
}

impl Drop for PluginFiles {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.poller).take() {
            task.abort();
        }
    }
}

impl PluginFiles {
    pub fn new(triggers: Triggers) -> Self {
        PluginFiles {
            triggers,
            used: Arc::default(),
            poller: Mutex::new(None),
        }
    }

    /// Records the plugin files `rule` uses now (none: it is forgotten); the poller starts with
    /// the first.
    pub fn uses(&self, rule: &RuleKey, paths: BTreeSet<PathBuf>) {
        let mut used = lock(&self.used);
        let (stamps, users) = &mut *used;
        let (new, gone) = users.set(rule, paths);
        for path in gone {
            stamps.remove(&path);
        }
        let started = !new.is_empty();
        for path in new {
            let seen = stamp(&path);
            stamps.insert(path, seen);
        }
        drop(used);
        if started {
            self.start_polling();
        }
    }

    fn start_polling(&self) {
        let mut poller = lock(&self.poller);
        if poller.is_some() {
            return;
        }
        let (used, triggers) = (Arc::downgrade(&self.used), self.triggers.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(used) = used.upgrade() else { break };
                let paths: Vec<PathBuf> = lock(&used).0.keys().cloned().collect();
                // Off the async runtime: a stat of a slow volume must not hold a worker.
                let Ok(now) = tokio::task::spawn_blocking(move || {
                    paths.into_iter().map(|p| (stamp(&p), p)).collect::<Vec<_>>()
                })
                .await
                else {
                    continue;
                };
                let mut woken = BTreeSet::new();
                let mut guard = lock(&used);
                let (stamps, users) = &mut *guard;
                for (seen, path) in now {
                    if let Some(recorded) = stamps.get_mut(&path)
                        && *recorded != seen
                    {
                        *recorded = seen;
                        woken.extend(users.rules(&path).cloned());
                    }
                }
                drop(guard);
                for rule in &woken {
                    triggers.fire(rule);
                }
            }
        });
        *poller = Some(task.abort_handle());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_found_under_the_plugin_directory() {
        let transforms: Vec<Transform> = serde_json::from_value(serde_json::json!([
            {"plugin": "file://team/a.wasm"},
            {"plugin": "file://../escape.wasm"},
            {"plugin": "configmap://team/plugins/a.wasm"},
        ]))
        .unwrap();
        let dir = Path::new("/plugins");
        assert_eq!(
            files_of(&transforms, Some(dir)),
            BTreeSet::from([PathBuf::from("/plugins/team/a.wasm")])
        );
        assert!(files_of(&transforms, None).is_empty());
    }
}
