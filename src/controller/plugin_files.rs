//! The `file://` plugins rules use, looked at every [`POLL`] (modification time and length, one
//! `stat` each) while a rule uses them, so that a component replaced on disk (a ConfigMap mounted
//! into the pod, updated by the kubelet) reaches the rules' copies without waiting for their
//! next reconcile. A poll and not inotify: mounted ConfigMaps change by symlink swaps that
//! inotify on the file does not see, and a few `stat`s every two seconds cost nothing.

use super::watches::Triggers;
use crate::api::Transform;
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
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len()))
}

#[derive(Default)]
struct Used {
    files: HashMap<PathBuf, (Stamp, BTreeSet<RuleKey>)>,
    by_rule: HashMap<RuleKey, BTreeSet<PathBuf>>,
}

pub struct PluginFiles {
    triggers: Triggers,
    used: Arc<Mutex<Used>>,
    poller: Mutex<Option<AbortHandle>>,
}

impl Drop for PluginFiles {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.poller).take() {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PluginFiles {
    pub fn new(triggers: Triggers) -> Self {
        PluginFiles {
            triggers,
            used: Arc::default(),
            poller: Mutex::new(None),
        }
    }

    /// Records the plugin files `rule` uses now; the poller starts with the first.
    pub fn uses(&self, rule: &RuleKey, paths: BTreeSet<PathBuf>) {
        let mut used = lock(&self.used);
        let before = used
            .by_rule
            .insert(rule.clone(), paths.clone())
            .unwrap_or_default();
        if before == paths {
            return;
        }
        for gone in before.difference(&paths) {
            if let Some((_, rules)) = used.files.get_mut(gone) {
                rules.remove(rule);
                if rules.is_empty() {
                    used.files.remove(gone);
                }
            }
        }
        for path in paths {
            let seen = stamp(&path);
            used.files
                .entry(path)
                .or_insert_with(|| (seen, BTreeSet::new()))
                .1
                .insert(rule.clone());
        }
        drop(used);
        self.start_polling();
    }

    /// Forgets a deleted rule.
    pub fn forget(&self, rule: &RuleKey) {
        self.uses(rule, BTreeSet::new());
        lock(&self.used).by_rule.remove(rule);
    }

    fn start_polling(&self) {
        let mut poller = lock(&self.poller);
        if poller.is_some() || lock(&self.used).files.is_empty() {
            return;
        }
        let (used, triggers) = (Arc::downgrade(&self.used), self.triggers.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(used) = used.upgrade() else { break };
                let paths: Vec<PathBuf> = lock(&used).files.keys().cloned().collect();
                // Off the async runtime: a stat of a slow volume must not hold a worker.
                let Ok(now) = tokio::task::spawn_blocking(move || {
                    paths.into_iter().map(|p| (stamp(&p), p)).collect::<Vec<_>>()
                })
                .await
                else {
                    continue;
                };
                let mut woken = BTreeSet::new();
                let mut used = lock(&used);
                for (seen, path) in now {
                    if let Some((recorded, rules)) = used.files.get_mut(&path)
                        && *recorded != seen
                    {
                        *recorded = seen;
                        woken.extend(rules.iter().cloned());
                    }
                }
                drop(used);
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
