//! A copy's place as the steps of a pass name it: for messages, for the flap guard, and the
//! copies a rule owns in a cluster.

use crate::api::CopyStatus;
use crate::controller::fleet::ClusterHandle;
use crate::sync::desired::CopyTarget;
use crate::sync::ownership::RuleKey;
use crate::sync::plan::{OwnedCopy, PlaceKey, owned};
use crate::sync::scope::Scope;
use kube::core::ApiResource;
use std::collections::BTreeSet;

/// A copy as the flap guard names it: its rule, its place, and its resource (group and plural,
/// not the version).
pub(crate) type FlapKey = (RuleKey, CopyTarget, String);

pub(super) fn flap_key(rule: &RuleKey, target: &CopyTarget, resource: &ApiResource) -> FlapKey {
    (
        rule.clone(),
        target.clone(),
        format!("{}/{}", resource.group, resource.plural),
    )
}

/// What `key` owns in `cluster`: its cached copies there and the `known` ones, by identity
/// (`plan::owned`); those in `unsealed` places were made before seals. Copies in namespaces
/// outside `scope` are not among them.
pub(super) fn owned_copies(
    cluster: &ClusterHandle,
    key: &RuleKey,
    (resource, namespaced): (&ApiResource, bool),
    known: &[&CopyStatus],
    unsealed: &BTreeSet<PlaceKey>,
    scope: &Scope,
) -> Vec<OwnedCopy> {
    let in_scope =
        |ns: &Option<String>| cluster.name.is_some() || ns.as_deref().is_none_or(|ns| scope.contains(ns));
    let trusted = |ns: &Option<String>, name: &str| {
        unsealed.contains(&(cluster.name.clone(), ns.clone(), name.to_owned()))
    };
    owned(
        cluster.watches.copies_of(key),
        known,
        resource,
        namespaced,
        trusted,
        in_scope,
    )
}

/// Where a copy is, for messages: `namespace/name`, prefixed with `cluster:` in another cluster.
pub(super) fn place_of(target: &CopyTarget) -> String {
    let local = match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    };
    match &target.cluster {
        Some(cluster) => format!("{cluster}:{local}"),
        None => local,
    }
}
