//! `mimeo init`: what `mimeo run` needs in the cluster before it starts, made once by the
//! installer (openMCP's init Job) with rights the controller need not hold.
//!
//! It installs or upgrades mimeo's CRDs by server-side apply under mimeo's field manager, taking
//! over fields another manager (Helm, `kubectl apply`) set on them, waits until each is
//! Established, and makes sure the seal key exists. Each step is safe to run again: an apply of
//! the same CRDs changes nothing, and the seal key, once there, is never replaced. Nothing it
//! does removes anything, so an older mimeo's CRDs with rules in use keep every rule: the new
//! schema serves the same stored objects.

use crate::api::all_crds;
use crate::controller::seal_key;
use crate::sync::ownership::FIELD_MANAGER;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use std::time::{Duration, Instant};

/// What `init` did, step by step, for its log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// The CRDs applied, each Established.
    pub crds: Vec<String>,
}

/// Why `init` failed: the step, and what the apiserver said.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("applying the CustomResourceDefinition {name}: {source}")]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the CustomResourceDefinition {name}: {source}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the CustomResourceDefinition {name} is not Established after {waited:?}: {why}")]
    NotEstablished {
        name: String,
        waited: Duration,
        why: String,
    },
    /// The controller's own error says what of the seal key failed.
    #[error(transparent)]
    SealKey(crate::controller::Error),
}

/// Installs or upgrades the CRDs, waits for them, and makes sure the seal key Secret
/// `seal_key` (namespace, name) exists.
pub async fn init(client: &Client, seal_key: (&str, &str), wait: Duration) -> Result<Done, InitError> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    // Forced: the CRDs are mimeo's, whoever installed them before (the chart's `crds/`, or
    // `kubectl apply`), and a conflict would leave an older schema in place.
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut done = Done::default();
    for crd in all_crds() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| InitError::Apply {
                name: name.clone(),
                source,
            })?;
        tracing::info!(crd = %name, "applied");
        done.crds.push(name);
    }
    for name in &done.crds {
        established(&api, name, wait).await?;
    }
    let (namespace, name) = seal_key;
    seal_key::load_or_create(client, namespace, name)
        .await
        .map_err(InitError::SealKey)?;
    Ok(done)
}

/// Waits until the CRD `name` is Established (its names accepted and served).
async fn established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    wait: Duration,
) -> Result<(), InitError> {
    let started = Instant::now();
    loop {
        let crd = api.get(name).await.map_err(|source| InitError::Read {
            name: name.to_owned(),
            source,
        })?;
        let (ready, why) = condition(&crd);
        if ready {
            tracing::info!(crd = %name, "established");
            return Ok(());
        }
        if started.elapsed() >= wait {
            return Err(InitError::NotEstablished {
                name: name.to_owned(),
                waited: wait,
                why,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a CRD is Established, and if not, what its conditions say.
fn condition(crd: &CustomResourceDefinition) -> (bool, String) {
    let conditions = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let established = conditions
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    let why = conditions
        .iter()
        .filter(|c| c.status != "True" || c.type_ == "NamesAccepted")
        .map(|c| {
            format!(
                "{}={} ({})",
                c.type_,
                c.status,
                c.message.as_deref().unwrap_or("no message")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let why = if why.is_empty() {
        "no conditions yet".to_owned()
    } else {
        why
    };
    (established, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionCondition, CustomResourceDefinitionStatus,
    };

    fn with(conditions: &[(&str, &str, &str)]) -> CustomResourceDefinition {
        CustomResourceDefinition {
            status: Some(CustomResourceDefinitionStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s, m)| CustomResourceDefinitionCondition {
                            type_: (*t).to_owned(),
                            status: (*s).to_owned(),
                            message: Some((*m).to_owned()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_crd_is_ready_only_when_established() {
        assert_eq!(
            condition(&CustomResourceDefinition::default()),
            (false, "no conditions yet".into())
        );
        let (ready, why) = condition(&with(&[
            ("NamesAccepted", "False", "\"syncrules\" is already in use"),
            ("Established", "False", "not all names are accepted"),
        ]));
        assert!(!ready);
        assert!(why.contains("\"syncrules\" is already in use"), "{why}");
        let (ready, _) = condition(&with(&[
            ("NamesAccepted", "True", "no conflicts found"),
            ("Established", "True", "the initial names have been accepted"),
        ]));
        assert!(ready);
    }
}
