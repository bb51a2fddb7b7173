//! The desired copy of a source object for one target: what gets written, and its digests.

use super::filter::keeps;
use super::hash::digest;
use super::ownership::{
    HASH_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PREFIX, RULE_ANNOTATION, RuleKey, SOURCE_ANNOTATION,
    SOURCE_HASH_ANNOTATION, SOURCE_VERSION_ANNOTATION,
};
use super::protected::is_protected_key;
use super::seal::{Place, SEAL_ANNOTATION, SealKey, group_of};
use crate::api::{KeyFilter, MetadataPolicy, SourceRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Top-level fields that describe an object rather than hold its content; never copied.
const NOT_CONTENT: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];
/// Annotations that describe the source object itself and would mislead on a copy, dropped
/// before a source is cached. They are among the keys no copy carries (`protected`).
const NEVER_CARRIED: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

/// Drops from a source what no copy can ever take from it, before it is cached: managedFields,
/// and the annotations never carried (kubectl's last-applied-configuration repeats the whole
/// object, a Secret's data included, so a source applied with kubectl would be cached twice over).
pub fn strip_uncarried(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| !NEVER_CARRIED.contains(&k.as_str()));
    }
}

/// Where one copy goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyTarget {
    /// The `RemoteCluster` holding the copy; `None` for the local cluster.
    pub cluster: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
}

/// A copy as it should be.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredCopy {
    pub target: CopyTarget,
    pub source: SourceRef,
    /// The full object to apply: apiVersion, kind, metadata (name, namespace, labels,
    /// annotations) and content.
    pub object: Value,
    /// Digest of what the copy holds: content plus carried labels and annotations.
    pub hash: String,
    /// Digest of the source's content the copy was made from.
    pub source_hash: String,
    /// The seals the copy may still carry from the installation's retired keys: a copy sealed
    /// before a key rotation is the rule's copy still, and is sealed anew when written.
    pub retired_seals: Vec<String>,
}

/// The content of an object: every top-level field but those describing it.
pub fn content(object: &Value) -> Map<String, Value> {
    object
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !NOT_CONTENT.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The digest of a source object's content.
pub fn source_hash(source: &Value) -> String {
    digest(&Value::Object(content(source)))
}

fn carried(map: Option<&Value>, filter: &KeyFilter) -> BTreeMap<String, String> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with(PREFIX) && !is_protected_key(k) && keeps(filter, k))
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Builds the copy of `source` (a whole object as JSON) for `target`, made by `rule`.
pub fn desired_copy(
    rule: &RuleKey,
    metadata: &MetadataPolicy,
    source: &Value,
    source_ref: &SourceRef,
    target: CopyTarget,
) -> DesiredCopy {
    CopyTemplate::new(rule, metadata, source, source_ref).copy_for(target)
}

/// The copies of one source, made once and stamped out for each target: content, carried labels
/// and annotations, and both digests are the same for every target, so a source fanned out to
/// many namespaces is read and hashed once, not once per copy.
#[derive(Clone, Debug)]
pub struct CopyTemplate {
    source: SourceRef,
    rule: RuleKey,
    /// The key each copy is sealed with; `None` where it is not known (`mimeo diff`, run with
    /// the user's rights): copies are then made without a seal, and marks taken as they are.
    seal: Option<Arc<SealKey>>,
    /// The copy without a name or namespace.
    object: Value,
    hash: String,
    source_hash: String,
}

impl CopyTemplate {
    pub fn new(rule: &RuleKey, metadata: &MetadataPolicy, source: &Value, source_ref: &SourceRef) -> Self {
        let body = content(source);
        let mut labels = carried(source.pointer("/metadata/labels"), &metadata.labels);
        let mut annotations = carried(source.pointer("/metadata/annotations"), &metadata.annotations);
        let source_hash = source_hash(source);

        labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
        annotations.insert(RULE_ANNOTATION.to_owned(), rule.to_string());
        annotations.insert(SOURCE_ANNOTATION.to_owned(), source_label(source, source_ref));
        annotations.insert(SOURCE_HASH_ANNOTATION.to_owned(), source_hash.clone());
        if let Some(version) = source
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            annotations.insert(SOURCE_VERSION_ANNOTATION.to_owned(), version.to_owned());
        }

        let mut meta = Map::new();
        meta.insert("labels".into(), json!(labels));
        meta.insert("annotations".into(), json!(annotations));

        let mut object = Map::new();
        object.insert(
            "apiVersion".into(),
            source.get("apiVersion").cloned().unwrap_or(Value::Null),
        );
        object.insert("kind".into(), source.get("kind").cloned().unwrap_or(Value::Null));
        object.insert("metadata".into(), Value::Object(meta));
        object.extend(body);
        let mut object = Value::Object(object);
        let hash = stamp_hash(&mut object);
        CopyTemplate {
            source: source_ref.clone(),
            rule: rule.clone(),
            seal: None,
            object,
            hash,
            source_hash,
        }
    }

    /// Seals every copy made from here with `key` ([`super::seal`]).
    pub fn sealed_by(mut self, key: Option<Arc<SealKey>>) -> Self {
        self.seal = key;
        self
    }

    /// The digest of what the copies hold (content and carried metadata), before any transform.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The digest of the source's content.
    pub fn source_hash(&self) -> &str {
        &self.source_hash
    }

    /// Where a copy for `target` is, as its seal names it.
    fn place<'a>(&'a self, target: &'a CopyTarget) -> Place<'a> {
        Place {
            group: group_of(self.object["apiVersion"].as_str().unwrap_or_default()),
            kind: self.object["kind"].as_str().unwrap_or_default(),
            namespace: target.namespace.as_deref(),
            name: &target.name,
        }
    }

    /// The seals a copy for `target` may carry from retired keys.
    pub fn retired_seals(&self, target: &CopyTarget) -> Vec<String> {
        self.seal
            .as_ref()
            .map(|key| key.retired_seals(&self.rule, &self.place(target)))
            .unwrap_or_default()
    }

    /// The copy for one target.
    pub fn copy_for(&self, target: CopyTarget) -> DesiredCopy {
        let mut object = self.object.clone();
        let seal = self
            .seal
            .as_ref()
            .map(|key| key.seal(&self.rule, &self.place(&target)));
        let retired_seals = self.retired_seals(&target);
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.insert("name".into(), Value::String(target.name.clone()));
            if let Some(ns) = &target.namespace {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            }
            if let Some(seal) = seal
                && let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut)
            {
                annotations.insert(SEAL_ANNOTATION.to_owned(), Value::String(seal));
            }
        }
        DesiredCopy {
            target,
            source: self.source.clone(),
            object,
            hash: self.hash.clone(),
            source_hash: self.source_hash.clone(),
            retired_seals,
        }
    }
}

impl DesiredCopy {
    /// Replaces the object (with what a transform chain returned) and records its digest.
    pub fn replace_object(&mut self, object: Value) {
        self.object = object;
        self.hash = stamp_hash(&mut self.object);
    }
}

/// Digests what a copy holds (content, and labels and annotations other than mimeo's), records
/// the digest in the copy's annotation, and returns it. Name and namespace are not part of it.
fn stamp_hash(object: &mut Value) -> String {
    let theirs = |field: &str| -> BTreeMap<String, Value> {
        object["metadata"][field]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !k.starts_with(PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let hash = digest(&json!({
        "content": content(object),
        "labels": theirs("labels"),
        "annotations": theirs("annotations"),
    }));
    if let Some(annotations) = object["metadata"]["annotations"].as_object_mut() {
        annotations.insert(HASH_ANNOTATION.to_owned(), Value::String(hash.clone()));
    }
    hash
}

/// `Kind/namespace/name` of the source, as recorded on the copy.
fn source_label(source: &Value, source_ref: &SourceRef) -> String {
    let kind = source.get("kind").and_then(Value::as_str).unwrap_or_default();
    match &source_ref.namespace {
        Some(ns) => format!("{kind}/{ns}/{}", source_ref.name),
        None => format!("{kind}/{}", source_ref.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_secret() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "registry-creds", "namespace": "platform-helm", "uid": "u-1", "resourceVersion": "7",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"kind": "Thing", "name": "x"}],
                "labels": {"app.kubernetes.io/name": "registry", "team": "platform", "mimeo.dev/managed-by": "mimeo"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "hi"}
            },
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": "e30="},
            "immutable": false
        })
    }

    fn target() -> CopyTarget {
        CopyTarget {
            cluster: None,
            namespace: Some("cluster-a".into()),
            name: "helm-registry".into(),
        }
    }

    fn source_ref() -> SourceRef {
        SourceRef {
            namespace: Some("platform-helm".into()),
            name: "registry-creds".into(),
        }
    }

    #[test]
    fn sources_are_cached_without_what_no_copy_takes() {
        let mut meta: ObjectMeta = serde_json::from_value(registry_secret()["metadata"].clone()).unwrap();
        strip_uncarried(&mut meta);
        assert_eq!(meta.managed_fields, None);
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["note"]);
        assert_eq!(
            meta.labels.unwrap().len(),
            3,
            "labels stay: filters and selectors read them"
        );
    }

    #[test]
    fn a_copy_keeps_content_and_drops_server_fields() {
        let rule = RuleKey::sync_rule("platform-helm", "creds");
        let copy = desired_copy(
            &rule,
            &MetadataPolicy::default(),
            &registry_secret(),
            &source_ref(),
            target(),
        );
        let o = &copy.object;
        assert_eq!(o["type"], "kubernetes.io/dockerconfigjson");
        assert_eq!(o["data"][".dockerconfigjson"], "e30=");
        assert_eq!(o["immutable"], false);
        assert_eq!(o["metadata"]["name"], "helm-registry");
        assert_eq!(o["metadata"]["namespace"], "cluster-a");
        for field in ["uid", "resourceVersion", "managedFields", "ownerReferences"] {
            assert!(o["metadata"].get(field).is_none(), "{field} must not be copied");
        }
        assert_eq!(
            o["metadata"]["labels"],
            json!({"mimeo.dev/managed-by": "mimeo"}),
            "no labels travel by default"
        );
        assert_eq!(
            o["metadata"]["annotations"]["mimeo.dev/rule"],
            "SyncRule/platform-helm/creds"
        );
        assert_eq!(
            o["metadata"]["annotations"]["mimeo.dev/source"],
            "Secret/platform-helm/registry-creds"
        );
        assert_eq!(o["metadata"]["annotations"]["mimeo.dev/hash"], copy.hash.as_str());
    }

    #[test]
    fn metadata_travels_as_the_rule_says_but_never_ours_or_last_applied() {
        let policy = MetadataPolicy {
            labels: KeyFilter {
                include: vec!["*".into()],
                exclude: vec!["team".into()],
            },
            annotations: KeyFilter {
                include: vec!["*".into()],
                exclude: vec![],
            },
        };
        let rule = RuleKey::sync_rule("platform-helm", "creds");
        let copy = desired_copy(&rule, &policy, &registry_secret(), &source_ref(), target());
        let meta = &copy.object["metadata"];
        assert_eq!(meta["labels"]["app.kubernetes.io/name"], "registry");
        assert!(meta["labels"].get("team").is_none());
        assert_eq!(meta["annotations"]["note"], "hi");
        assert!(
            meta["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
    }

    #[test]
    fn other_tools_ownership_never_travels() {
        let mut source = registry_secret();
        source["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        source["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!("apps");
        source["metadata"]["annotations"]["meta.helm.sh/release-name"] = json!("registry");
        source["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] = json!("app:/Secret:x/y");
        let everything = KeyFilter {
            include: vec!["*".into()],
            exclude: vec![],
        };
        let policy = MetadataPolicy {
            labels: everything.clone(),
            annotations: everything,
        };
        let rule = RuleKey::sync_rule("platform-helm", "creds");
        let copy = desired_copy(&rule, &policy, &source, &source_ref(), target());
        let meta = &copy.object["metadata"];
        assert_eq!(meta["labels"]["team"], "platform", "other labels travel");
        for (field, key) in [
            ("labels", "app.kubernetes.io/managed-by"),
            ("labels", "kustomize.toolkit.fluxcd.io/name"),
            ("annotations", "meta.helm.sh/release-name"),
            ("annotations", "argocd.argoproj.io/tracking-id"),
        ] {
            assert!(meta[field].get(key).is_none(), "{key} must not travel");
        }
    }

    #[test]
    fn a_transformed_object_gets_its_own_digest() {
        let rule = RuleKey::sync_rule("platform-helm", "creds");
        let mut copy = desired_copy(
            &rule,
            &MetadataPolicy::default(),
            &registry_secret(),
            &source_ref(),
            target(),
        );
        let before = copy.hash.clone();
        let mut transformed = copy.object.clone();
        transformed["data"] = json!({"config.json": "e30="});
        copy.replace_object(transformed);
        assert_ne!(copy.hash, before);
        assert_eq!(
            copy.object["metadata"]["annotations"]["mimeo.dev/hash"],
            copy.hash.as_str()
        );
    }

    #[test]
    fn digests_follow_content_not_bookkeeping() {
        let rule = RuleKey::sync_rule("platform-helm", "creds");
        let policy = MetadataPolicy::default();
        let a = desired_copy(&rule, &policy, &registry_secret(), &source_ref(), target());

        let mut bumped = registry_secret();
        bumped["metadata"]["resourceVersion"] = json!("8");
        let b = desired_copy(&rule, &policy, &bumped, &source_ref(), target());
        assert_eq!(a.hash, b.hash, "a new resourceVersion alone changes nothing");

        let mut rotated = registry_secret();
        rotated["data"][".dockerconfigjson"] = json!("e30K");
        let c = desired_copy(&rule, &policy, &rotated, &source_ref(), target());
        assert_ne!(a.hash, c.hash);
        assert_ne!(a.source_hash, c.source_hash);
    }

    #[test]
    fn copies_of_one_template_differ_only_in_their_place() {
        let rule = RuleKey::sync_rule("platform", "creds");
        let policy = MetadataPolicy::default();
        let template = CopyTemplate::new(&rule, &policy, &registry_secret(), &source_ref());
        let a = template.copy_for(target());
        assert_eq!(
            a,
            desired_copy(&rule, &policy, &registry_secret(), &source_ref(), target())
        );
        let elsewhere = CopyTarget {
            cluster: Some("b".into()),
            namespace: Some("tenant-b".into()),
            name: "other".into(),
        };
        let b = template.copy_for(elsewhere.clone());
        assert_eq!(b.target, elsewhere);
        assert_eq!((&a.hash, &a.source_hash), (&b.hash, &b.source_hash));
        assert_eq!(template.source_hash(), a.source_hash);
        assert_eq!(b.object["metadata"]["namespace"], "tenant-b");
        assert_eq!(b.object["metadata"]["name"], "other");
        let without_place = |mut object: Value| {
            let meta = object["metadata"].as_object_mut().unwrap();
            meta.remove("name");
            meta.remove("namespace");
            object
        };
        assert_eq!(without_place(a.object), without_place(b.object));
    }
}
