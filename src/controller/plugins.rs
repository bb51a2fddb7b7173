//! Plugins for the reconcile loop: resolving `transforms` to loaded plugins (reading files and
//! ConfigMaps, fetching OCI artifacts, compiling off the async runtime), checking their configs
//! once, and running a chain on a copy behind a concurrency limit.
//!
//! An `oci://` plugin named by tag is resolved to a digest once and pinned in the rule's status;
//! the pin is kept until the rule changes or its `refreshInterval` passes, so a restart with a
//! warm artifact cache asks no registry anything.

pub(crate) mod chain_outputs;
pub(crate) mod config_maps;
mod failed_downloads;
pub(crate) mod files;
mod used_by;

use super::turns::Turns;
use crate::api::{PluginPin, PullSecretRef, Transform};
use crate::locks::lock;
use crate::plugin::oci::{Credentials, Oci, OciError, OciReference, credentials_from_docker_config};
use crate::plugin::source::{PluginSource, parse};
use crate::plugin::{ChainError, ChainOutcome, Loading, Plugin, PluginHost, TransformContext};
use crate::sync::ownership::RuleKey;
use failed_downloads::FailedDownloads;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::Api;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;

/// A transform chain ready to run: each plugin with its config as JSON.
pub type Chain = Vec<(Arc<Plugin>, String)>;

/// Why a rule's chain cannot be set up.
#[derive(Debug, thiserror::Error)]
#[error("plugin {reference}: {message}")]
pub struct ChainProblem {
    pub reference: String,
    /// The `Ready` condition's reason: `PluginUnavailable`, or what went wrong with a registry.
    pub reason: &'static str,
    pub message: String,
    /// What a tag resolved to, when that is what the rule refuses: recorded in status, so that
    /// the refused digest, and when it was found, are there to see.
    pub refused: Option<PluginPin>,
}

/// A chain with what it pinned, and when a pinned tag is due to be resolved again.
pub struct ResolvedChain {
    pub chain: Chain,
    pub pins: Vec<PluginPin>,
    pub refresh_in: Option<Duration>,
    /// Tags that were due to be resolved again while their registry did not answer: the pinned
    /// digest runs on, and this says so.
    pub not_refreshed: Vec<String>,
}

/// How soon a tag whose registry did not answer is tried again, its pinned digest running on.
const REFRESH_RETRY: Duration = Duration::from_secs(60);

/// What an installation allows of `oci://` plugins, and its own registry credentials.
#[derive(Clone, Debug, Default)]
pub struct OciPolicy {
    /// Refuse plugins named by tag: every `oci://` plugin must carry `@sha256:...`.
    pub require_digest: bool,
    /// Registries (`host[:port]`) plugins may come from; empty: any.
    pub allowed_registries: Vec<String>,
    /// A Docker config (`{"auths": ...}`) with the controller's own registry credentials, used
    /// when a rule's pull secrets have none for a registry: always for a `ClusterSyncRule`, for
    /// a `SyncRule` only with `docker_config_for_sync_rules`.
    pub docker_config: Option<Vec<u8>>,
    /// Whether `docker_config` serves `SyncRule`s too. Off by default: whoever may write a
    /// `SyncRule` in any namespace would otherwise pull, with the installation's credentials,
    /// whatever those credentials may read.
    pub docker_config_for_sync_rules: bool,
}

/// The controller's own credentials as a rule may use them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ControllerCredentials {
    /// They have an entry for the registry, and this rule may use it.
    Given(Credentials),
    /// They have an entry for the registry, which this `SyncRule` may not use.
    Withheld,
    /// They have no entry for the registry (or there are none).
    Absent,
}

/// The controller's credentials for `registry`, for a `SyncRule` (`sync_rule`) or a
/// `ClusterSyncRule`.
fn controller_credentials(policy: &OciPolicy, registry: &str, sync_rule: bool) -> ControllerCredentials {
    // Checked at start-up: a config that does not read is not given here.
    let Some(Ok(Some(credentials))) = policy
        .docker_config
        .as_ref()
        .map(|config| credentials_from_docker_config(config, registry))
    else {
        return ControllerCredentials::Absent;
    };
    if sync_rule && !policy.docker_config_for_sync_rules {
        ControllerCredentials::Withheld
    } else {
        ControllerCredentials::Given(credentials)
    }
}

/// What a refusal by the registry adds when the controller's credentials were withheld: what to
/// do about it.
fn withheld_hint(registry: &str) -> String {
    format!(
        "; the controller's own registry credentials (--plugin-registry-config) have an entry for \
         {registry}, but serve ClusterSyncRules only, unless the installation allows them for \
         SyncRules (--plugin-registry-config-for-sync-rules): give this rule a pull secret for \
         {registry} in pluginPullSecrets"
    )
}

/// What a failure the artifact carries adds: that it is not downloaded again, and what to do.
const LASTING_HINT: &str = "; the artifact is not downloaded again for this generation of the rule: \
                            fix the artifact in the registry (or the reference), then change the rule";

/// Whether the installation allows this reference.
fn allowed(reference: &OciReference, policy: &OciPolicy) -> Result<(), (&'static str, String)> {
    if !policy.allowed_registries.is_empty()
        && !policy.allowed_registries.iter().any(|r| r == &reference.registry)
    {
        return Err((
            "PluginRegistryNotAllowed",
            format!(
                "registry {} is not among the registries this installation allows plugins from ({})",
                reference.registry,
                policy.allowed_registries.join(", ")
            ),
        ));
    }
    if policy.require_digest && reference.digest.is_none() {
        return Err((
            "PluginDigestRequired",
            "this installation requires plugins pinned by digest: write the reference as \
             oci://registry/repository@sha256:<digest>"
                .into(),
        ));
    }
    Ok(())
}

/// Reads a duration such as `30s`, `10m` or `1h30m`.
pub fn parse_interval(text: &str) -> Option<Duration> {
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().ok()?;
        number.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return None,
        };
    }
    (number.is_empty() && total > 0).then(|| Duration::from_secs(total))
}

/// Whether a recorded pin still stands: the rule is unchanged since, and its refresh interval
/// (if any) has not passed. Returns the time left until it is due, when there is an interval.
fn pin_stands(
    pin: &PluginPin,
    spec_changed: bool,
    refresh: Option<Duration>,
    now: SystemTime,
) -> Option<Option<Duration>> {
    if spec_changed {
        return None;
    }
    let Some(interval) = refresh else {
        return Some(None);
    };
    let resolved: SystemTime = pin.resolved_at.as_ref()?.0.into();
    let age = now.duration_since(resolved).unwrap_or_default();
    interval.checked_sub(age).filter(|left| !left.is_zero()).map(Some)
}

/// A plugin file as loaded: its modification time and length, and the plugin.
type LoadedFile = (SystemTime, u64, Arc<Plugin>);

/// A ConfigMap plugin as loaded: the ConfigMap's uid and resourceVersion, and the plugin.
type LoadedConfigMap = (String, String, Arc<Plugin>);

/// Past this many ConfigMap plugins remembered, the map starts afresh (references of deleted
/// rules are not removed one by one); each entry is a few strings and a shared plugin.
const MAX_CONFIG_MAP_PLUGINS: usize = 1024;
/// Past this many accepted (plugin, config) pairs the set starts afresh: a tenant patching in a
/// new config again and again must not grow it without end. A config forgotten is checked again.
const MAX_ACCEPTED_CONFIGS: usize = 4096;

/// The (plugin, config) pairs a plugin accepted, each kept as a digest of both: 32 bytes
/// whatever the config's size, so at most [`MAX_ACCEPTED_CONFIGS`] x 32 bytes however large and
/// many the configs a tenant patches in.
#[derive(Default)]
struct AcceptedConfigs(HashSet<[u8; 32]>);

impl AcceptedConfigs {
    fn key(plugin_digest: &str, config: &str) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(plugin_digest.as_bytes());
        hash.update([0]);
        hash.update(config.as_bytes());
        hash.finalize().into()
    }

    fn contains(&self, plugin_digest: &str, config: &str) -> bool {
        self.0.contains(&Self::key(plugin_digest, config))
    }

    fn insert(&mut self, plugin_digest: &str, config: &str) {
        if self.0.len() >= MAX_ACCEPTED_CONFIGS {
            self.0.clear();
        }
        self.0.insert(Self::key(plugin_digest, config));
    }
}
/// Past this many compiled `oci://` plugins kept by digest the map starts afresh: each holds a
/// component's compiled code, and a tag moved often, or many rules' plugins, would otherwise keep
/// every one of them. A plugin dropped here is loaded again from the caches on disk.
const MAX_LOADED_ARTIFACTS: usize = 128;

pub struct Plugins {
    host: Arc<PluginHost>,
    client: Client,
    plugin_dir: Option<PathBuf>,
    oci: Arc<Oci>,
    policy: OciPolicy,
    /// OCI plugins already compiled, by manifest digest.
    artifacts: Mutex<HashMap<String, Arc<Plugin>>>,
    /// Files already loaded, by path, modification time and length: no re-hashing per reconcile.
    files: Mutex<HashMap<PathBuf, LoadedFile>>,
    /// ConfigMap plugins already loaded, by reference, with the ConfigMap's uid and
    /// resourceVersion: a reconcile reads only the ConfigMap's metadata, not its (up to 1 MiB of)
    /// binaryData, unless it changed.
    config_maps: Mutex<HashMap<String, LoadedConfigMap>>,
    /// (digest, config) pairs the plugin accepted.
    accepted_configs: Mutex<AcceptedConfigs>,
    calls: Arc<Semaphore>,
    /// Turns to compile, taken in turn by the namespaces of the rules waiting: each compile is a
    /// process with up to the compile memory limit, and a slow one must not hold the permits of
    /// calls, nor one tenant's many hold everyone else's.
    compiles: Arc<Turns>,
    /// Artifacts a rule's generation failed to download for good: not downloaded again for it.
    failed_downloads: FailedDownloads,
}

impl Plugins {
    pub fn new(
        host: PluginHost,
        client: Client,
        plugin_dir: Option<PathBuf>,
        oci: Oci,
        policy: OciPolicy,
    ) -> Self {
        let permits = host.settings().concurrency.max(1) as usize;
        let compiles = host.settings().compile_concurrency.max(1) as usize;
        Plugins {
            host: Arc::new(host),
            client,
            plugin_dir,
            oci: Arc::new(oci),
            policy,
            artifacts: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            config_maps: Mutex::new(HashMap::new()),
            accepted_configs: Mutex::new(AcceptedConfigs::default()),
            calls: Arc::new(Semaphore::new(permits)),
            compiles: Turns::new(compiles),
            failed_downloads: FailedDownloads::default(),
        }
    }

    /// Loads every plugin of a rule's `transforms` and checks its config. `pins` are the digests
    /// the rule's status recorded; `spec_changed` says the rule changed since they were. `rule`
    /// and its `generation` key what failed to download for good, which is not downloaded again
    /// for them.
    #[allow(clippy::too_many_arguments)]
    pub async fn chain(
        &self,
        rule: &RuleKey,
        generation: Option<i64>,
        transforms: &[Transform],
        rule_namespace: Option<&str>,
        pull_secrets: &[PullSecretRef],
        pins: &[PluginPin],
        spec_changed: bool,
    ) -> Result<ResolvedChain, ChainProblem> {
        let mut chain = Vec::with_capacity(transforms.len());
        let mut new_pins = Vec::new();
        let mut refresh_in: Option<Duration> = None;
        let mut not_refreshed = Vec::new();
        for transform in transforms {
            let mut tag_pin: Option<PluginPin> = None;
            let problem = |message: String| ChainProblem {
                reference: transform.plugin.clone(),
                reason: "PluginUnavailable",
                message,
                refused: None,
            };
            let source = parse(&transform.plugin, rule_namespace).map_err(&problem)?;
            let plugin = match &source {
                PluginSource::Oci(reference) => {
                    let (plugin, pin, due, stale) = self
                        .load_oci(
                            (rule, generation),
                            transform,
                            reference,
                            rule_namespace,
                            pull_secrets,
                            pins,
                            spec_changed,
                        )
                        .await?;
                    if pin.resolved_at.is_some() {
                        tag_pin = Some(pin.clone());
                    }
                    new_pins.push(pin);
                    not_refreshed.extend(stale);
                    if let Some(due) = due {
                        refresh_in = Some(refresh_in.map_or(due, |r| r.min(due)));
                    }
                    plugin
                }
                _ => self
                    .load(&transform.plugin, &source, rule_namespace)
                    .await
                    .map_err(&problem)?,
            };
            let config = match &transform.config {
                Some(value) => value.to_string(),
                None => "{}".to_owned(),
            };
            if !lock(&self.accepted_configs).contains(&plugin.digest, &config) {
                // An instance like a transform's: it takes a permit, so it counts in the bound.
                let _permit = self.calls.clone().acquire_owned().await;
                let (host, checked, cfg) = (self.host.clone(), plugin.clone(), config.clone());
                let refused = |message: String| ChainProblem {
                    refused: tag_pin.clone().map(|pin| PluginPin {
                        refused: Some(super::error::short_message(&message)),
                        ..pin
                    }),
                    ..problem(message)
                };
                tokio::task::spawn_blocking(move || host.validate_config(&checked, &cfg))
                    .await
                    .map_err(|e| problem(e.to_string()))?
                    .map_err(|e| refused(e.to_string()))?;
                lock(&self.accepted_configs).insert(&plugin.digest, &config);
            }
            chain.push((plugin, config));
        }
        Ok(ResolvedChain {
            chain,
            pins: new_pins,
            refresh_in,
            not_refreshed,
        })
    }

    /// An `oci://` plugin: allowed by the installation, pinned to a digest (the recorded one if
    /// it still stands), fetched (from the cache when there) and compiled once per digest.
    #[allow(clippy::too_many_arguments)]
    async fn load_oci(
        &self,
        (rule, generation): (&RuleKey, Option<i64>),
        transform: &Transform,
        reference: &OciReference,
        rule_namespace: Option<&str>,
        pull_secrets: &[PullSecretRef],
        pins: &[PluginPin],
        spec_changed: bool,
    ) -> Result<(Arc<Plugin>, PluginPin, Option<Duration>, Option<String>), ChainProblem> {
        let name = transform.plugin.clone();
        let problem = |reason: &'static str, message: String| ChainProblem {
            reference: name.clone(),
            reason,
            message,
            refused: None,
        };
        allowed(reference, &self.policy).map_err(|(reason, message)| problem(reason, message))?;
        // Read only when the registry is asked: a plugin pinned and compiled or cached needs no
        // credentials, and reading the pull secrets on every reconcile would cost a GET each.
        let chosen = tokio::sync::OnceCell::new();
        let credentials = || async {
            chosen
                .get_or_try_init(|| self.credentials(reference, rule_namespace, pull_secrets))
                .await
                .map(|(credentials, _)| credentials)
                .map_err(|(reason, message)| problem(reason, message))
        };
        let registry_problem = |e: OciError| {
            let mut message = e.to_string();
            let withheld = chosen.get().is_some_and(|(_, withheld)| *withheld);
            if withheld && matches!(e, OciError::Unauthorized { .. }) {
                message.push_str(&withheld_hint(&reference.registry));
            }
            if e.is_lasting() {
                message.push_str(LASTING_HINT);
            }
            problem(e.reason(), message)
        };
        let refresh = transform.refresh_interval.as_deref().and_then(parse_interval);
        let recorded = pins.iter().find(|p| p.plugin == name);
        let resolve = async || {
            let credentials = credentials().await?;
            Ok(self.oci.resolve_for(reference, credentials, rule_namespace).await)
        };
        let (pin, due, stale) = pin_for(
            &name,
            reference,
            (recorded, spec_changed),
            refresh,
            resolve,
            &registry_problem,
        )
        .await?;
        if let Some(plugin) = lock(&self.artifacts).get(&pin.digest) {
            return Ok((plugin.clone(), pin, due, stale));
        }
        // From here on a problem is one with what the tag resolved to: say which digest.
        let refused = |problem: ChainProblem| ChainProblem {
            refused: pin.resolved_at.is_some().then(|| PluginPin {
                refused: Some(super::error::short_message(&problem.message)),
                ..pin.clone()
            }),
            ..problem
        };
        let pinned = reference.pinned(&pin.digest);
        let artifact = format!("{}/{}@{}", pinned.registry, pinned.repository, pin.digest);
        let fetched = match self.oci.cached(&pin.digest).await {
            Ok(Some(fetched)) => fetched,
            // A cache that cannot be read costs a download (fetch says why), not the plugin.
            Ok(None) | Err(_) => {
                if let Some(failed) = self.failed_downloads.get(rule, generation, &artifact) {
                    return Err(refused(registry_problem(failed)));
                }
                let credentials = credentials().await.map_err(&refused)?;
                match self.oci.fetch_for(&pinned, credentials, rule_namespace).await {
                    Ok(fetched) => fetched,
                    Err(e) => {
                        self.failed_downloads.failed(rule, generation, &artifact, &e);
                        return Err(refused(registry_problem(e)));
                    }
                }
            }
        };
        let plugin = self
            .compile(&name, fetched.bytes.to_vec(), rule_namespace)
            .await
            .map_err(|e| refused(problem("PluginUnavailable", e)))?;
        let mut artifacts = lock(&self.artifacts);
        if artifacts.len() >= MAX_LOADED_ARTIFACTS {
            artifacts.clear();
        }
        artifacts.insert(pin.digest.clone(), plugin.clone());
        drop(artifacts);
        Ok((plugin, pin, due, stale))
    }

    /// Credentials for a registry: the first of the rule's pull secrets with an entry for it, else
    /// the controller's own if the rule may use them, else none; and whether the controller's
    /// were withheld from this `SyncRule`.
    async fn credentials(
        &self,
        reference: &OciReference,
        rule_namespace: Option<&str>,
        pull_secrets: &[PullSecretRef],
    ) -> Result<(Credentials, bool), (&'static str, String)> {
        for secret in pull_secrets {
            let Some(namespace) = secret.namespace.as_deref().or(rule_namespace) else {
                continue;
            };
            let found = Api::<Secret>::namespaced(self.client.clone(), namespace)
                .get_opt(&secret.name)
                .await
                .map_err(|e| {
                    (
                        "PluginPullSecretUnreadable",
                        format!("reading pull secret {namespace}/{}: {e}", secret.name),
                    )
                })?
                .ok_or_else(|| {
                    (
                        "PluginPullSecretNotFound",
                        format!("pull secret {namespace}/{} does not exist", secret.name),
                    )
                })?;
            let Some(config) = found.data.and_then(|mut d| d.remove(".dockerconfigjson")) else {
                return Err((
                    "PluginPullSecretInvalid",
                    format!(
                        "pull secret {namespace}/{} has no .dockerconfigjson key (a Secret of type \
                         kubernetes.io/dockerconfigjson)",
                        secret.name
                    ),
                ));
            };
            match credentials_from_docker_config(&config.0, &reference.registry) {
                Ok(Some(credentials)) => return Ok((credentials, false)),
                Ok(None) => {}
                Err(e) => {
                    return Err((
                        "PluginPullSecretInvalid",
                        format!("pull secret {namespace}/{}: {e}", secret.name),
                    ));
                }
            }
        }
        // A SyncRule has a namespace; a ClusterSyncRule has none.
        Ok(
            match controller_credentials(&self.policy, &reference.registry, rule_namespace.is_some()) {
                ControllerCredentials::Given(credentials) => (credentials, false),
                ControllerCredentials::Withheld => (Credentials::Anonymous, true),
                ControllerCredentials::Absent => (Credentials::Anonymous, false),
            },
        )
    }

    /// A `file://` or `configmap://` plugin, compiled in a turn of `rule_namespace`.
    async fn load(
        &self,
        reference: &str,
        source: &PluginSource,
        rule_namespace: Option<&str>,
    ) -> Result<Arc<Plugin>, String> {
        match source {
            PluginSource::File(relative) => {
                let dir = self.plugin_dir.as_ref().ok_or_else(|| {
                    "file plugins need the controller to be started with --plugin-dir".to_owned()
                })?;
                let path = dir.join(relative);
                let meta = tokio::fs::metadata(&path)
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                let stamp = files::file_stamp(&meta);
                if let Some((_, _, plugin)) = lock(&self.files)
                    .get(&path)
                    .filter(|(mtime, len, _)| (*mtime, *len) == stamp)
                {
                    return Ok(plugin.clone());
                }
                let bytes = tokio::fs::read(&path)
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                let plugin = self.compile(reference, bytes, rule_namespace).await?;
                lock(&self.files).insert(path, (stamp.0, stamp.1, plugin.clone()));
                Ok(plugin)
            }
            PluginSource::Oci(reference) => Err(format!("{reference}: loaded through the registry")),
            PluginSource::ConfigMap { namespace, name, key } => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                let missing = || format!("ConfigMap {namespace}/{name} does not exist");
                let unreadable = |e: kube::Error| format!("reading ConfigMap {namespace}/{name}: {e}");
                // Only a plugin loaded before can be kept: without one, read the whole ConfigMap
                // at once rather than its metadata first.
                let loaded = lock(&self.config_maps).get(reference).cloned();
                if let Some((uid, version, plugin)) = loaded {
                    let meta = api
                        .get_metadata_opt(name)
                        .await
                        .map_err(unreadable)?
                        .ok_or_else(missing)?
                        .metadata;
                    if (meta.uid.as_ref(), meta.resource_version.as_ref()) == (Some(&uid), Some(&version)) {
                        return Ok(plugin);
                    }
                }
                let cm = api.get_opt(name).await.map_err(unreadable)?.ok_or_else(missing)?;
                let read = (
                    cm.metadata.uid.clone().unwrap_or_default(),
                    cm.metadata.resource_version.clone().unwrap_or_default(),
                );
                let bytes = cm
                    .binary_data
                    .and_then(|mut d| d.remove(key))
                    .ok_or_else(|| format!("ConfigMap {namespace}/{name} has no binaryData key {key}"))?;
                let plugin = self.compile(reference, bytes.0, rule_namespace).await?;
                let mut loaded = lock(&self.config_maps);
                if loaded.len() >= MAX_CONFIG_MAP_PLUGINS {
                    loaded.clear();
                }
                loaded.insert(reference.to_owned(), (read.0, read.1, plugin.clone()));
                Ok(plugin)
            }
        }
    }

    /// Compiles (or finds compiled) a component for a rule of `rule_namespace`, in that
    /// namespace's turn.
    async fn compile(
        &self,
        reference: &str,
        bytes: Vec<u8>,
        rule_namespace: Option<&str>,
    ) -> Result<Arc<Plugin>, String> {
        let digest = crate::sync::hash::digest_bytes(&bytes);
        if let Some(plugin) = self.host.loaded(reference, &digest) {
            return Ok(plugin);
        }
        let (host, name) = (self.host.clone(), reference.to_owned());
        let loading = {
            let turn = self.compiles.turn(rule_namespace).await;
            // The turn goes with the compile: a reconcile given up does not stop the child, so
            // the next turn waits for it.
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                host.compile(&name, &bytes, digest)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
        };
        let undescribed = match loading {
            Loading::Loaded(plugin) => return Ok(plugin),
            Loading::Compiled(undescribed) => undescribed,
        };
        // The describe that follows is a call like any other, under a call's permit.
        let _permit = self.calls.clone().acquire_owned().await;
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || host.describe_and_keep(undescribed))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// Runs a chain on one copy, off the async runtime; `called` hears of each plugin call.
    pub async fn run(
        &self,
        chain: &Chain,
        ctx: TransformContext,
        object: serde_json::Value,
        mut called: impl FnMut(&Plugin, Duration) + Send + 'static,
    ) -> Result<ChainOutcome, ChainError> {
        let _permit = self.calls.clone().acquire_owned().await;
        let (host, chain) = (self.host.clone(), chain.clone());
        let run = move || host.run_chain_observed(&chain, &ctx, object, &mut called);
        match tokio::task::spawn_blocking(run).await {
            Ok(result) => result,
            Err(e) => Err(ChainError {
                plugin: "(host)".into(),
                error: crate::plugin::PluginError::Host(e.to_string()),
            }),
        }
    }
}

/// The digest a plugin runs at: its reference's own, the recorded pin while it stands, else what
/// its tag resolves to now; when to resolve it again; and, when a registry that does not answer
/// left the recorded pin running, what to say of it.
async fn pin_for(
    name: &str,
    reference: &OciReference,
    (recorded, spec_changed): (Option<&PluginPin>, bool),
    refresh: Option<Duration>,
    resolve: impl AsyncFnOnce() -> Result<Result<String, OciError>, ChainProblem>,
    registry_problem: impl Fn(OciError) -> ChainProblem,
) -> Result<(PluginPin, Option<Duration>, Option<String>), ChainProblem> {
    let mut stale = None;
    let now = SystemTime::now();
    let (pin, due) = match &reference.digest {
        Some(digest) => (
            PluginPin {
                plugin: name.to_owned(),
                digest: digest.clone(),
                resolved_at: None,
                refused: None,
            },
            None,
        ),
        None => {
            match recorded.and_then(|p| pin_stands(p, spec_changed, refresh, now).map(|d| (p, d))) {
                Some((pin, due)) => (pin.clone(), due),
                None => match resolve().await? {
                    Ok(digest) => {
                        let pin = PluginPin {
                            plugin: name.to_owned(),
                            digest,
                            resolved_at: k8s_openapi::jiff::Timestamp::try_from(now).ok().map(Time),
                            refused: None,
                        };
                        (pin, refresh)
                    }
                    // A registry that does not answer stops nothing that was pinned before:
                    // the digest last resolved for this very reference runs on (from the
                    // caches), and the tag is tried again soon.
                    Err(e) if e.reason() == "RegistryUnreachable" && recorded.is_some() => {
                        let pin = recorded.cloned().expect("checked");
                        stale = Some(format!(
                            "{name}: not resolved again, the registry does not answer ({}); the \
                             pinned {} runs on, and the tag is tried again in {} s",
                            super::error::short_message(&e.to_string()),
                            pin.digest,
                            REFRESH_RETRY.as_secs()
                        ));
                        (pin, Some(REFRESH_RETRY))
                    }
                    Err(e) => return Err(registry_problem(e)),
                },
            }
        }
    };
    Ok((pin, due, stale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_distinct_configs_stays_within_the_bound() {
        let mut accepted = AcceptedConfigs::default();
        let big = "x".repeat(64 << 10);
        for i in 0..(3 * MAX_ACCEPTED_CONFIGS) {
            let config = format!("{{\"n\": {i}, \"pad\": \"{big}\"}}");
            accepted.insert("sha256:aa", &config);
            assert!(accepted.contains("sha256:aa", &config));
            assert!(accepted.0.len() <= MAX_ACCEPTED_CONFIGS);
        }
        // 12,288 configs of 64 KiB (768 MiB) were patched in; 32 bytes of each are kept, at most
        // 4,096 of them.
        assert_eq!(accepted.0.len(), MAX_ACCEPTED_CONFIGS);
        assert!(
            !accepted.contains("sha256:bb", "{\"n\": 0}"),
            "keyed by plugin too"
        );
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_interval("1h30m"), Some(Duration::from_secs(5400)));
        for bad in ["", "10", "m", "5d", "0s", "1.5h"] {
            assert_eq!(parse_interval(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pins_stand_until_the_rule_changes_or_the_interval_passes() {
        let now = SystemTime::now();
        let pin = |age: u64| PluginPin {
            plugin: "oci://r/p:1".into(),
            digest: "sha256:aa".into(),
            resolved_at: k8s_openapi::jiff::Timestamp::try_from(now - Duration::from_secs(age))
                .ok()
                .map(Time),
            refused: None,
        };
        assert_eq!(pin_stands(&pin(10), false, None, now), Some(None));
        assert_eq!(pin_stands(&pin(10), true, None, now), None, "the rule changed");
        let left = pin_stands(&pin(10), false, Some(Duration::from_secs(60)), now).unwrap();
        assert!(left.unwrap() <= Duration::from_secs(50));
        assert_eq!(
            pin_stands(&pin(90), false, Some(Duration::from_secs(60)), now),
            None,
            "due again"
        );
    }

    #[test]
    fn the_installation_decides_registries_and_digests() {
        let tagged: OciReference = "oci://registry.example/p:1".parse().unwrap();
        let pinned = tagged.pinned(&format!("sha256:{}", "a".repeat(64)));
        let open = OciPolicy::default();
        assert!(allowed(&tagged, &open).is_ok());
        let strict = OciPolicy {
            require_digest: true,
            allowed_registries: vec!["registry.example".into()],
            ..OciPolicy::default()
        };
        assert_eq!(allowed(&tagged, &strict).unwrap_err().0, "PluginDigestRequired");
        assert!(allowed(&pinned, &strict).is_ok());
        let other: OciReference = "oci://elsewhere.example/p@sha256:bb"
            .replace("bb", &"b".repeat(64))
            .parse()
            .unwrap();
        assert_eq!(
            allowed(&other, &strict).unwrap_err().0,
            "PluginRegistryNotAllowed"
        );
    }

    #[test]
    fn the_controllers_credentials_serve_sync_rules_only_when_allowed() {
        let config = br#"{"auths": {"registry.example": {"username": "platform", "password": "pw"}}}"#;
        let platform = Credentials::Basic {
            username: "platform".into(),
            password: "pw".into(),
        };
        let closed = OciPolicy {
            docker_config: Some(config.to_vec()),
            ..OciPolicy::default()
        };
        let open = OciPolicy {
            docker_config_for_sync_rules: true,
            ..closed.clone()
        };
        use ControllerCredentials::*;
        for (policy, registry, sync_rule, expected) in [
            (&closed, "registry.example", false, Given(platform.clone())),
            (&closed, "registry.example", true, Withheld),
            (&open, "registry.example", true, Given(platform.clone())),
            (&open, "registry.example", false, Given(platform.clone())),
            (&closed, "elsewhere.example", true, Absent),
            (&closed, "elsewhere.example", false, Absent),
            (&OciPolicy::default(), "registry.example", true, Absent),
        ] {
            assert_eq!(
                controller_credentials(policy, registry, sync_rule),
                expected,
                "{registry}, SyncRule {sync_rule}"
            );
        }
        let hint = withheld_hint("registry.example");
        assert!(hint.contains("--plugin-registry-config-for-sync-rules"), "{hint}");
        assert!(hint.contains("pluginPullSecrets"), "{hint}");
    }
}
