//! Plugins for the reconcile loop: resolving `transforms` to loaded plugins (reading files and
//! ConfigMaps, compiling off the async runtime), checking their configs once, and running a
//! chain on a copy behind a concurrency limit.

use crate::api::Transform;
use crate::plugin::source::{PluginSource, parse};
use crate::plugin::{ChainError, ChainOutcome, Plugin, PluginHost, TransformContext};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::Semaphore;

/// A transform chain ready to run: each plugin with its config as JSON.
pub type Chain = Vec<(Arc<Plugin>, String)>;

/// Why a rule's chain cannot be set up.
#[derive(Debug, thiserror::Error)]
#[error("plugin {reference}: {reason}")]
pub struct ChainProblem {
    pub reference: String,
    pub reason: String,
}

/// A plugin file as loaded: its modification time and length, and the plugin.
type LoadedFile = (SystemTime, u64, Arc<Plugin>);

pub struct Plugins {
    host: Arc<PluginHost>,
    client: Client,
    plugin_dir: Option<PathBuf>,
    /// Files already loaded, by path, modification time and length: no re-hashing per reconcile.
    files: Mutex<HashMap<PathBuf, LoadedFile>>,
    /// (digest, config) pairs the plugin accepted.
    accepted_configs: Mutex<HashSet<(String, String)>>,
    calls: Arc<Semaphore>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Plugins {
    pub fn new(host: PluginHost, client: Client, plugin_dir: Option<PathBuf>) -> Self {
        let permits = host.settings().concurrency.max(1) as usize;
        Plugins {
            host: Arc::new(host),
            client,
            plugin_dir,
            files: Mutex::new(HashMap::new()),
            accepted_configs: Mutex::new(HashSet::new()),
            calls: Arc::new(Semaphore::new(permits)),
        }
    }

    /// Loads every plugin of a rule's `transforms` and checks its config.
    pub async fn chain(
        &self,
        transforms: &[Transform],
        rule_namespace: Option<&str>,
    ) -> Result<Chain, ChainProblem> {
        let mut chain = Vec::with_capacity(transforms.len());
        for transform in transforms {
            let problem = |reason: String| ChainProblem {
                reference: transform.plugin.clone(),
                reason,
            };
            let source = parse(&transform.plugin, rule_namespace).map_err(&problem)?;
            let plugin = self.load(&transform.plugin, &source).await.map_err(&problem)?;
            let config = match &transform.config {
                Some(value) => value.to_string(),
                None => "{}".to_owned(),
            };
            let key = (plugin.digest.clone(), config.clone());
            if !lock(&self.accepted_configs).contains(&key) {
                let (host, checked, cfg) = (self.host.clone(), plugin.clone(), config.clone());
                tokio::task::spawn_blocking(move || host.validate_config(&checked, &cfg))
                    .await
                    .map_err(|e| problem(e.to_string()))?
                    .map_err(|e| problem(e.to_string()))?;
                lock(&self.accepted_configs).insert(key);
            }
            chain.push((plugin, config));
        }
        Ok(chain)
    }

    async fn load(&self, reference: &str, source: &PluginSource) -> Result<Arc<Plugin>, String> {
        match source {
            PluginSource::File(relative) => {
                let dir = self.plugin_dir.as_ref().ok_or_else(|| {
                    "file plugins need the controller to be started with --plugin-dir".to_owned()
                })?;
                let path = dir.join(relative);
                let meta = tokio::fs::metadata(&path)
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
                if let Some((_, _, plugin)) = lock(&self.files)
                    .get(&path)
                    .filter(|(mtime, len, _)| (*mtime, *len) == stamp)
                {
                    return Ok(plugin.clone());
                }
                let bytes = tokio::fs::read(&path)
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                let plugin = self.compile(reference, bytes).await?;
                lock(&self.files).insert(path, (stamp.0, stamp.1, plugin.clone()));
                Ok(plugin)
            }
            PluginSource::ConfigMap { namespace, name, key } => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                let cm = api
                    .get_opt(name)
                    .await
                    .map_err(|e| format!("reading ConfigMap {namespace}/{name}: {e}"))?
                    .ok_or_else(|| format!("ConfigMap {namespace}/{name} does not exist"))?;
                let bytes = cm
                    .binary_data
                    .and_then(|mut d| d.remove(key))
                    .ok_or_else(|| format!("ConfigMap {namespace}/{name} has no binaryData key {key}"))?;
                self.compile(reference, bytes.0).await
            }
        }
    }

    async fn compile(&self, reference: &str, bytes: Vec<u8>) -> Result<Arc<Plugin>, String> {
        let (host, name) = (self.host.clone(), reference.to_owned());
        tokio::task::spawn_blocking(move || host.load(&name, &bytes))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// Runs a chain on one copy, off the async runtime.
    pub async fn run(
        &self,
        chain: &Chain,
        ctx: TransformContext,
        object: serde_json::Value,
    ) -> Result<ChainOutcome, ChainError> {
        let _permit = self.calls.clone().acquire_owned().await;
        let (host, chain) = (self.host.clone(), chain.clone());
        match tokio::task::spawn_blocking(move || host.run_chain(&chain, &ctx, object)).await {
            Ok(result) => result,
            Err(e) => Err(ChainError {
                plugin: "(host)".into(),
                error: crate::plugin::PluginError::Host(e.to_string()),
            }),
        }
    }
}
