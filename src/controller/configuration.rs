//! Following the configuration object (`MimeoConfig`) named after `--provider-name`: its kinds
//! are put in effect at once ([`LiveKinds`]), its other settings are compared with what this
//! process started with, and its status says which is which, or why nothing of it was applied
//! (then mimeo keeps the last good settings). What it means is decided in [`crate::config`].

use super::live_kinds::LiveKinds;
use crate::api::{MimeoConfig, MimeoConfigStatus};
use crate::cli::RunArgs;
use crate::config::{self, ConfigProblem, Kinds};
use crate::controller::retry::init_when_listed;
use crate::replicas::shards::Shards;
use crate::sync::kstatus::STALLED;
use crate::sync::ownership::FIELD_MANAGER;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::future::Future;

/// The configuration object to follow, and the flags it is laid over.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    /// The object's name (`--provider-name`).
    pub name: String,
    /// The flags as given.
    pub flags: RunArgs,
    /// The settings this process started with: the flags with the object as it was then.
    pub started: RunArgs,
}

/// Follows the object until `stopped`.
pub async fn follow(
    client: Client,
    source: ConfigSource,
    kinds: LiveKinds,
    shards: Shards,
    stopped: impl Future<Output = ()>,
) {
    let api = Api::<MimeoConfig>::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", source.name));
    let events = init_when_listed(watcher(api.clone(), config)).default_backoff();
    let following = async {
        futures::pin_mut!(events);
        let held = shards.changes().fuse();
        futures::pin_mut!(held);
        // The object as last seen and what its status should say: written by the holder of the
        // object's shard, also when this replica takes that shard after the event (issue 56: a
        // restarted replica saw its first event before it held a shard, and `RestartRequired`
        // stayed True after the restart it asked for).
        let mut last: Option<(MimeoConfig, MimeoConfigStatus)> = None;
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { break };
                    match event {
                        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                            let status = take(&source, &object, &kinds);
                            if shards.holds_name(&source.name) {
                                write_status(&api, &object, status.clone()).await;
                            }
                            last = Some((object, status));
                        }
                        Ok(watcher::Event::Delete(_)) => {
                            last = None;
                            if kinds.set(Kinds::of(&source.flags)) {
                                tracing::info!(config = %source.name, "the configuration object is gone: the kinds of the flags are in effect");
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, config = %source.name, "watching the configuration object failed; retrying")
                        }
                    }
                }
                Some(()) = held.next() => {
                    if let Some((object, status)) = &last
                        && shards.holds_name(&source.name)
                    {
                        write_status(&api, object, status.clone()).await;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = following => {}
        () = stopped => {}
    }
}

/// Puts what `object` says in effect where it can, and returns its status.
fn take(source: &ConfigSource, object: &MimeoConfig, kinds: &LiveKinds) -> MimeoConfigStatus {
    let generation = object.metadata.generation;
    let previous = object.status.clone().unwrap_or_default();
    let mut status = MimeoConfigStatus {
        observed_generation: generation,
        ..Default::default()
    };
    match config::apply(&object.spec, &source.flags) {
        Ok(wanted) => {
            let now = Kinds::of(&wanted);
            if kinds.set(now.clone()) {
                tracing::info!(
                    config = %source.name,
                    allowed = %list(&now.allowed),
                    next_to = %list(&now.next_to),
                    "the configuration object changed the kinds: every rule is looked at again"
                );
            }
            let restart = config::restart_needed(&source.started, &wanted);
            status.conditions = vec![
                condition(
                    &previous,
                    "Ready",
                    true,
                    "Applied",
                    "the settings are in effect".into(),
                    generation,
                ),
                match restart.is_empty() {
                    true => condition(
                        &previous,
                        "RestartRequired",
                        false,
                        "UpToDate",
                        "every setting is in effect".into(),
                        generation,
                    ),
                    false => condition(
                        &previous,
                        "RestartRequired",
                        true,
                        "ChangedSinceStart",
                        format!(
                            "{} take effect when mimeo restarts (roll its Deployment)",
                            restart.join(", ")
                        ),
                        generation,
                    ),
                },
            ];
        }
        Err(ConfigProblem { field, message }) => {
            tracing::error!(config = %source.name, %field, why = %message, "the configuration object is invalid; keeping the last good settings");
            let why = format!("{field}: {message}; mimeo keeps running on the last good settings");
            // Stalled too, as kstatus reads it: only an edit of the object fixes it.
            status.conditions = vec![
                condition(&previous, "Ready", false, "Invalid", why.clone(), generation),
                condition(&previous, STALLED, true, "Invalid", why, generation),
            ];
            status.conditions.extend(
                previous
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "RestartRequired")
                    .cloned(),
            );
        }
    }
    let effective = kinds.get();
    status.allowed_kinds = effective.allowed.iter().map(ToString::to_string).collect();
    status.next_to_kinds = effective.next_to.iter().map(ToString::to_string).collect();
    status
}

fn list(kinds: &[crate::sync::kinds::AllowedKind]) -> String {
    kinds
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A condition, keeping its last transition time while its status stays.
fn condition(
    previous: &MimeoConfigStatus,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_owned();
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

async fn write_status(api: &Api<MimeoConfig>, object: &MimeoConfig, status: MimeoConfigStatus) {
    if object.status.as_ref() == Some(&status) {
        return;
    }
    let patch = serde_json::json!({"status": status});
    if let Err(e) = api
        .patch_status(
            &object.name_any(),
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::warn!(error = %e, config = %object.name_any(), "writing the configuration object's status failed");
    }
}
