//! `SyncRule` and `ClusterSyncRule`: what to copy, where to, and how.
//!
//! Both kinds share one spec type, [`RuleSpec`]; they differ only in scope and in the rules the
//! apiserver enforces on the source (a `SyncRule` reads from its own namespace alone).

// kube-derive's repeated `printcolumn(...)`/`validation = ...` arguments look like duplicated
// attributes to clippy; they are distinct columns and rules.
#![allow(clippy::duplicated_attributes)]

use super::object_selector::ObjectSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::ops::Deref;

/// CEL: the source is one of the well-known namespaced kinds, so every target needs a namespace.
const SOURCE_IS_KNOWN_NAMESPACED: &str = "((self.spec.source.kind == 'Secret' || self.spec.source.kind == 'ConfigMap') \
     && (!has(self.spec.source.apiVersion) || self.spec.source.apiVersion == 'v1')) \
     || (self.spec.source.kind == 'Policy' \
     && (!has(self.spec.source.apiVersion) || self.spec.source.apiVersion.startsWith('kyverno.io/')))";

/// CEL: the source is Kyverno's cluster-scoped `ClusterPolicy`.
const SOURCE_IS_CLUSTER_POLICY: &str = "self.spec.source.kind == 'ClusterPolicy' \
     && (!has(self.spec.source.apiVersion) || self.spec.source.apiVersion.startsWith('kyverno.io/'))";

fn targets_need_namespace() -> Rule {
    Rule::new(format!(
        "!({SOURCE_IS_KNOWN_NAMESPACED}) || self.spec.targets.all(t, has(t.__namespace__) || has(t.namespaceSelector) || has(t.namespacePattern) || has(t.nextTo))"
    ))
    .message("every target needs namespace, namespaceSelector, namespacePattern or nextTo: Secrets, ConfigMaps and Policies live in namespaces")
    .field_path(".spec.targets")
}

/// `nextTo` is left to the controller's scope check (`InvalidTarget`): one more test per target
/// would take this rule past the apiserver's CEL cost budget.
fn cluster_scoped_targets_have_no_namespace() -> Rule {
    Rule::new(format!(
        "!({SOURCE_IS_CLUSTER_POLICY}) || self.spec.targets.all(t, !has(t.__namespace__) && !has(t.namespaceSelector) && !has(t.namespacePattern))"
    ))
    .message("a ClusterPolicy is cluster-scoped: its targets name clusters, not namespaces")
    .field_path(".spec.targets")
}

fn cluster_rule_source_needs_namespace() -> Rule {
    Rule::new(format!(
        "!({SOURCE_IS_KNOWN_NAMESPACED}) || has(self.spec.source.__namespace__)"
    ))
    .message("spec.source.namespace is required: name the namespace the source lives in")
    .field_path(".spec.source")
}

fn sync_rule_source_has_no_namespace() -> Rule {
    Rule::new("!has(self.spec.source.__namespace__)")
        .message("a SyncRule copies only from its own namespace: remove spec.source.namespace, or use a ClusterSyncRule")
        .field_path(".spec.source.namespace")
}

fn sync_rule_pull_secrets_are_its_own() -> Rule {
    Rule::new(
        "!has(self.spec.pluginPullSecrets) || self.spec.pluginPullSecrets.all(s, !has(s.__namespace__))",
    )
    .message(
        "a SyncRule reads plugin pull secrets from its own namespace: remove pluginPullSecrets[].namespace",
    )
    .field_path(".spec.pluginPullSecrets")
}

fn cluster_rule_pull_secrets_have_namespaces() -> Rule {
    Rule::new("!has(self.spec.pluginPullSecrets) || self.spec.pluginPullSecrets.all(s, has(s.__namespace__))")
        .message(
            "pluginPullSecrets[].namespace is required in a ClusterSyncRule: name the Secret's namespace",
        )
        .field_path(".spec.pluginPullSecrets")
}

fn sync_rule_inputs_are_its_own() -> Rule {
    Rule::new("!has(self.spec.inputs) || self.spec.inputs.all(i, !has(i.from.__namespace__))")
        .message("a SyncRule reads inputs from its own namespace only: remove inputs[].from.namespace, or use a ClusterSyncRule")
        .field_path(".spec.inputs")
}

fn sync_rule_creates_no_namespace() -> Rule {
    Rule::new("self.spec.targets.all(t, !has(t.createNamespace) || !t.createNamespace)")
        .message(
            "createNamespace is only for ClusterSyncRules: a SyncRule's author may not create namespaces",
        )
        .field_path(".spec.targets")
}

fn sync_rule_follows_no_orders() -> Rule {
    Rule::new("self.spec.targets.all(t, !has(t.forEach))")
        .message(
            "forEach is only for ClusterSyncRules: it reads objects in other clusters and chooses clusters and namespaces by what they say",
        )
        .field_path(".spec.targets")
}

fn sync_rule_source_is_namespaced() -> Rule {
    Rule::new(format!("!({SOURCE_IS_CLUSTER_POLICY})"))
        .message("a ClusterPolicy is cluster-scoped and cannot live in a SyncRule's namespace: use a ClusterSyncRule")
        .field_path(".spec.source.kind")
}

/// Copies objects from the rule's own namespace to other namespaces and clusters.
///
/// Creating a `SyncRule` grants no read access its author did not already have: it may only copy
/// objects of its own namespace, and other namespaces receive copies only if they accept them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mimeo.dev",
    version = "v1alpha1",
    kind = "SyncRule",
    doc = "Copies objects of its own namespace (Secrets, ConfigMaps, Kyverno policies, any allowed kind) into other namespaces and clusters that accept them, keeps the copies in sync and removes them when they are no longer wanted.",
    namespaced,
    status = "RuleStatus",
    shortname = "msr",
    category = "mimeo",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.source.kind"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source", description = "the source's name, or the selector that chooses the sources"),
    printcolumn(name = "Targets", type_ = "string", json_path = ".status.copies", description = "copies in sync / copies wanted"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].message", priority = "1"),
    validation = sync_rule_source_has_no_namespace(),
    validation = sync_rule_source_is_namespaced(),
    validation = sync_rule_creates_no_namespace(),
    validation = sync_rule_follows_no_orders(),
    validation = sync_rule_pull_secrets_are_its_own(),
    validation = sync_rule_inputs_are_its_own(),
    validation = targets_need_namespace(),
)]
pub struct SyncRuleSpec {
    #[serde(flatten)]
    pub rule: RuleSpec,
}

/// Copies objects from any namespace or cluster-scoped source, for cluster administrators.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mimeo.dev",
    version = "v1alpha1",
    kind = "ClusterSyncRule",
    doc = "A cluster administrator's copy rule: from any namespace, or a cluster-scoped source, into any namespace and cluster without their consent, with what only administrators may do (create namespaces, forEach).",
    status = "RuleStatus",
    shortname = "mcsr",
    category = "mimeo",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.source.kind"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.source.namespace"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source", description = "the source's name, or the selector that chooses the sources"),
    printcolumn(name = "Targets", type_ = "string", json_path = ".status.copies", description = "copies in sync / copies wanted"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].message", priority = "1"),
    validation = cluster_rule_source_needs_namespace(),
    validation = cluster_rule_pull_secrets_have_namespaces(),
    validation = targets_need_namespace(),
    validation = cluster_scoped_targets_have_no_namespace(),
)]
pub struct ClusterSyncRuleSpec {
    #[serde(flatten)]
    pub rule: RuleSpec,
}

impl Deref for SyncRuleSpec {
    type Target = RuleSpec;

    fn deref(&self) -> &RuleSpec {
        &self.rule
    }
}

impl Deref for ClusterSyncRuleSpec {
    type Target = RuleSpec;

    fn deref(&self) -> &RuleSpec {
        &self.rule
    }
}

/// The spec both rule kinds share.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.inputs) || size(self.inputs) == 0 || (has(self.transforms) && size(self.transforms) > 0)")
        .message("inputs are handed to the transform plugins: add a transform that uses them, such as the template plugin")
        .field_path(".inputs"),
    validation = Rule::new("!has(self.secretType) || self.source.kind == 'Secret'")
        .message("secretType is for copies of Secrets: remove it, or copy a Secret")
        .field_path(".secretType"),
)]
pub struct RuleSpec {
    /// The object, or objects, to copy.
    pub source: Source,
    /// Other objects each copy is made from besides its source, handed by name to the transform
    /// plugins (interface `mimeo:transform@0.2.0` and later): a change to any of them rewrites
    /// the copies. Each is read from the source's cluster, and in a `SyncRule` from the rule's
    /// own namespace; while one is missing no copy is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A list keyed by name: the apiserver refuses two of one name, at no CEL cost.
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub inputs: Vec<Input>,
    /// The `type` of the Secret copies, instead of the source's: a copy assembled by plugins from
    /// other data (a `kubernetes.io/dockerconfigjson` made from a username and password). Only
    /// types whose keys mimeo checks before writing; plugins still may not change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<SecretType>,
    /// Where copies go. Each target yields one copy per source object and per namespace and
    /// cluster it selects.
    #[x_kube(validation = Rule::new("size(self) > 0")
        .message("at least one target is needed: say where copies go"))]
    pub targets: Vec<Target>,
    /// Plugins each copy passes through, in order, before it is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transforms: Vec<Transform>,
    /// What to do when an object that mimeo does not own stands where a copy should go.
    #[serde(default)]
    pub conflict: ConflictPolicy,
    /// What happens to copies when the rule or its source goes away.
    #[serde(default)]
    pub deletion: DeletionPolicy,
    /// Which of the source's labels and annotations travel to the copies. By default none do.
    #[serde(default, skip_serializing_if = "MetadataPolicy::is_empty")]
    pub metadata: MetadataPolicy,
    /// Registry credentials for the `oci://` plugins of `transforms`, tried in order for each
    /// plugin's registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_pull_secrets: Vec<PullSecretRef>,
    /// Stops the rule without deleting it: nothing is written or removed, its copies stay as they
    /// are (in sync or not), and its status says `Suspended`, until this is false again. Deleting
    /// a suspended rule still removes its copies per `deletion`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

/// The object, or set of objects, a rule copies.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.name) != has(self.selector)")
        .message("set exactly one of source.name (one object) or source.selector (every object whose labels match)"),
    validation = Rule::new("has(self.apiVersion) || self.kind in ['Secret', 'ConfigMap', 'Policy', 'ClusterPolicy']")
        .message("source.kind must be Secret, ConfigMap, Policy or ClusterPolicy; for any other kind set source.apiVersion too"),
)]
pub struct Source {
    /// The API version of the source kind, such as `v1` or `kyverno.io/v1`. Needed only for kinds
    /// other than Secret, ConfigMap, Policy and ClusterPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The kind of the source: `Secret`, `ConfigMap`, `Policy`, `ClusterPolicy`, or any kind
    /// together with `apiVersion`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The name of the one source object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Copies every object whose labels match, each to every target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The namespace the source lives in. Only in a `ClusterSyncRule`: a `SyncRule` reads from
    /// its own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// The `RemoteCluster` the source lives in. Empty means the cluster this rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// An object a copy is made from besides its source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// What plugins call it: `inputs.<name>` in the template plugin. Letters, digits, `_` and
    /// `-`, starting with a letter.
    #[schemars(length(max = 63), regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_-]{0,62}$"))]
    pub name: String,
    /// Which object.
    pub from: InputRef,
}

/// One object, by kind and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.apiVersion) || self.kind in ['Secret', 'ConfigMap', 'Policy', 'ClusterPolicy']")
        .message("inputs[].from.kind must be Secret, ConfigMap, Policy or ClusterPolicy; for any other kind set apiVersion too"),
)]
pub struct InputRef {
    /// The API version of the kind. Needed only for kinds other than Secret, ConfigMap, Policy
    /// and ClusterPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_version: Option<String>,
    /// The kind of the input, such as `ConfigMap`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The input object's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Only in a `ClusterSyncRule`; unset, the source's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// The Secret types a rule may give its copies: each has keys mimeo checks before writing. Never
/// `kubernetes.io/service-account-token` (Kubernetes fills it with a token) or a Helm release.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SecretType {
    Opaque,
    /// Needs `.dockerconfigjson`, a JSON object.
    #[serde(rename = "kubernetes.io/dockerconfigjson")]
    DockerConfigJson,
    /// Needs `.dockercfg`, a JSON object.
    #[serde(rename = "kubernetes.io/dockercfg")]
    DockerCfg,
    /// Needs `username` or `password`.
    #[serde(rename = "kubernetes.io/basic-auth")]
    BasicAuth,
    /// Needs `ssh-privatekey`.
    #[serde(rename = "kubernetes.io/ssh-auth")]
    SshAuth,
    /// Needs `tls.crt` and `tls.key`.
    #[serde(rename = "kubernetes.io/tls")]
    Tls,
}

impl SecretType {
    /// The type as the Secret's `type` field holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretType::Opaque => "Opaque",
            SecretType::DockerConfigJson => "kubernetes.io/dockerconfigjson",
            SecretType::DockerCfg => "kubernetes.io/dockercfg",
            SecretType::BasicAuth => "kubernetes.io/basic-auth",
            SecretType::SshAuth => "kubernetes.io/ssh-auth",
            SecretType::Tls => "kubernetes.io/tls",
        }
    }
}

/// One place copies go: namespaces (by name, selector or pattern) in clusters (by name or selector).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "(has(self.__namespace__) ? 1 : 0) + (has(self.namespaceSelector) ? 1 : 0) + (has(self.namespacePattern) ? 1 : 0) + (has(self.nextTo) ? 1 : 0) <= 1"
    )
    .message("set only one of namespace, namespaceSelector, namespacePattern and nextTo in a target"),
    validation = Rule::new("!(has(self.cluster) && has(self.clusterSelector))")
        .message("set cluster or clusterSelector in a target, not both"),
    validation = Rule::new("!has(self.createNamespace) || !self.createNamespace || has(self.__namespace__)")
        .message("createNamespace needs a namespace by name: namespaces matched by a selector, a pattern or nextTo already exist"),
    validation = Rule::new("!has(self.nextTo) || ((!has(self.cluster) || self.cluster == '') && !has(self.clusterSelector))")
        .message("nextTo reads the objects of the cluster mimeo runs in: remove cluster and clusterSelector from a target with nextTo"),
    validation = Rule::new("!has(self.forEach) || (!has(self.nextTo) && !has(self.namespacePattern))")
        .message("forEach chooses places with namespace, namespaceSelector, cluster and clusterSelector: remove nextTo and namespacePattern from a target with forEach"),
)]
pub struct Target {
    /// The namespace the copy is written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Copies into every namespace whose labels match; a namespace that stops matching loses its
    /// copy according to `deletion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Copies into every namespace whose name matches this regular expression (Rust `regex`
    /// syntax), including namespaces created later. It is anchored as kubernetes-replicator
    /// anchors its patterns: `^` is prepended and `$` appended where missing, so `a|b` reads as
    /// `^a|b$`; write `(a|b)` to match exactly `a` or `b`. Consent applies as for any target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub namespace_pattern: Option<String>,
    /// Copies into every namespace that holds at least one object of this kind that the selector
    /// matches (say openMCP `Cluster`s with purpose `workload`), followed as such objects come,
    /// change and go. Only kinds the installation allows (`--next-to-kinds`), and only in the
    /// cluster mimeo runs in. Consent applies as for any target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_to: Option<NextTo>,
    /// The `RemoteCluster` the copy is written to. Empty means the cluster this rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Copies into every `RemoteCluster` whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// The name of the copy. Defaults to the source's name. May hold placeholders, filled in per
    /// copy: `{{source.name}}`, `{{source.namespace}}`, `{{target.namespace}}` and
    /// `{{target.cluster}}` (the `RemoteCluster`, empty in this cluster), such as
    /// `sp-crossplane-{{source.name}}`. Copies under a name the rule no longer gives are removed
    /// per `deletion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Creates `namespace` when it does not exist, instead of waiting for it. Only in a
    /// `ClusterSyncRule`. mimeo never deletes a namespace it created.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespace: bool,
    /// Makes this target once for every object of a kind, in this cluster or another (such as
    /// every service a tenant ordered on openMCP's onboarding cluster), with `{{object.name}}` and
    /// `{{object.namespace}}` filled in from the object in `namespace`, `name`, `cluster` and the
    /// `matchLabels` values of `namespaceSelector` and `clusterSelector`. Followed as objects come
    /// and go: an object's copies go with it, per `deletion`. Only in a `ClusterSyncRule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_each: Option<ForEach>,
}

/// The objects a `forEach` target is made once for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForEach {
    /// The `RemoteCluster` holding the objects. Empty: the cluster mimeo runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub cluster: Option<String>,
    /// The API version of the kind, such as `crossplane.services.openmcp.cloud/v1alpha1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The kind, such as `Crossplane`. It must be namespaced, and listed in the controller's
    /// `--next-to-kinds` (the kinds mimeo may follow).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Which of its objects count; empty, every one.
    #[serde(flatten)]
    pub selector: ObjectSelector,
}

/// Objects of one kind, chosen with openMCP's selector semantics, whose namespaces a target
/// writes to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextTo {
    /// The API version of the kind, such as `clusters.openmcp.cloud/v1alpha1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The kind, such as `Cluster`. It must be namespaced.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Which of its objects count; empty, every one.
    #[serde(flatten)]
    pub selector: ObjectSelector,
    /// Only objects in these namespaces count (besides those `namespaceSelector` chooses). Unset,
    /// with `namespaceSelector` unset too: objects in every namespace count, so whoever may
    /// create an object of the kind anywhere (a tenant in its own namespace) chooses where copies
    /// go; name the namespaces the platform trusts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub namespaces: Vec<String>,
    /// Only objects in namespaces with these labels count (besides those `namespaces` names).
    /// Choose labels only the platform sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// One step of the transform chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Transform {
    /// Where the plugin comes from.
    #[schemars(length(min = 1))]
    pub plugin: String,
    /// The plugin's configuration, handed to it as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config: Option<serde_json::Value>,
    /// For an `oci://` plugin named by tag: how often the tag is resolved to a digest again,
    /// such as `30s`, `10m` or `1h30m`. Unset: the digest recorded in the status is kept until
    /// the rule changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub refresh_interval: Option<String>,
}

/// A Secret of type `kubernetes.io/dockerconfigjson` holding registry credentials for `oci://`
/// plugins.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullSecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Only in a `ClusterSyncRule` (where it is required): a `SyncRule` reads pull secrets from
    /// its own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// What to do when an object mimeo does not own is in the way of a copy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConflictPolicy {
    /// Leave the object alone and report the copy as `Conflict`.
    #[default]
    Fail,
    /// Take the object over: record mimeo as its owner and write the copy into it.
    Adopt,
    /// Replace the object with the copy.
    Overwrite,
    /// Leave the object alone and report the copy as `Skipped`, which leaves the rule `Ready`:
    /// for a rule that copies only where nothing is in the way (openMCP's replicator's `Skip`).
    Skip,
}

/// What happens to copies when their rule or source goes away.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the copies.
    #[default]
    Delete,
    /// Keep the copies and strip mimeo's ownership from them.
    Orphan,
}

/// Which source labels and annotations are carried over to copies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataPolicy {
    /// Label keys to carry over.
    #[serde(default, skip_serializing_if = "KeyFilter::is_empty")]
    pub labels: KeyFilter,
    /// Annotation keys to carry over.
    #[serde(default, skip_serializing_if = "KeyFilter::is_empty")]
    pub annotations: KeyFilter,
}

impl MetadataPolicy {
    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// Glob patterns over keys (`*` matches any run of characters): a key is kept when it matches an
/// `include` pattern and no `exclude` pattern.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyFilter {
    /// Patterns of the keys kept, such as `app.kubernetes.io/*`. Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// Patterns of keys dropped even when an `include` pattern matches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl KeyFilter {
    fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }
}

/// What the controller last observed and did for a rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` says whether every copy is in sync, and if not, why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The source as `kubectl get` shows it: its name, or the label selector that chooses the
    /// sources (`selector app=web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A digest over the content of every source object the copies were made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_hash: Option<String>,
    /// Copies in sync out of copies wanted, as `synced/total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<String>,
    /// Copies by state (`Synced: 49990`, `Conflict: 3`), every state that has one. The status
    /// never lists the copies in sync: a rule of any size has a status of about the same size.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counts: std::collections::BTreeMap<String, i64>,
    /// Each cluster the rule writes copies to or still holds copies in, with its counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterCopies>,
    /// The copies not in sync, and why: the worst first (a copy the flap guard holds, then
    /// failures, then copies blocked), at most a few dozen; `moreProblems` counts the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<CopyStatus>,
    /// Copies not in sync beyond those `problems` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_problems: Option<i64>,
    /// Deprecated, written by no mimeo since: the inventory of every copy that earlier versions
    /// kept here. Copies it lists that carry no seal yet (made before seals) are still trusted as
    /// the rule's; each is sealed at its next write and then dropped from this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<CopyStatus>,
    /// The digest each `oci://` plugin was resolved to, and when: the artifact that runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginPin>,
}

/// An `oci://` plugin of the rule, pinned to the digest it was resolved to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginPin {
    /// The reference as `transforms[].plugin` names it.
    pub plugin: String,
    /// The manifest digest it stands for (`sha256:...`), verified on every download.
    pub digest: String,
    /// When a tag was last resolved; unset for a reference pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Why the rule refused what the tag resolved to (the rule is not Ready until the tag moves
    /// to an artifact it accepts, at the next `refreshInterval` or change of the rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A rule's copies in one cluster, counted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCopies {
    /// The `RemoteCluster`; empty for the cluster the rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Copies wanted or held there.
    pub copies: i64,
    /// Of those, copies in sync.
    pub synced: i64,
    /// Why none of the copies there can be written now (the cluster does not answer, is
    /// missing, ...); the counts are then those last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<CopyState>,
}

/// One copy the status names: a copy not in sync, or one of the deprecated `targets`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyStatus {
    /// The source object this copy is made from.
    pub source: SourceRef,
    /// The `RemoteCluster` holding the copy; empty for the cluster the rule lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The copy's namespace; empty for a cluster-scoped kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The copy's name.
    pub name: String,
    pub state: CopyState,
    /// The digest of the content last written to this copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// Why the copy is not `Synced`, in words. Never holds secret values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the controller first saw the copy in this state (`problems` only): how long it has
    /// been out of sync, kept across reconciles while the state stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// A source object, by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub struct SourceRef {
    /// The source's namespace; empty for a cluster-scoped kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The source's name.
    pub name: String,
}

/// The state of one copy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CopyState {
    /// The copy matches its source.
    Synced,
    /// An object mimeo does not own has the copy's name, and `conflict` says to leave it alone.
    Conflict,
    /// The target namespace does not accept copies from this rule's namespace.
    NotAccepted,
    /// The target namespace does not exist; the copy is written once it does.
    NamespaceMissing,
    /// A transform plugin said not to write this copy; `message` says which and why.
    Skipped,
    /// A transform plugin failed on this copy; the previous copy, if any, is left as it is.
    PluginFailed,
    /// The copy's cluster does not answer; the copy is written when it does.
    Unreachable,
    /// The copy's cluster rejects the credentials of its `RemoteCluster`, or they lack a
    /// permission; `message` says which.
    Unauthorized,
    /// The `RemoteCluster` named for the copy does not exist; copies there are left as they are.
    ClusterMissing,
    /// The rule reaches the copy's cluster through two `RemoteCluster`s (the same uid of
    /// `kube-system`): it writes through the one `message` names (the older) alone, not this one.
    DuplicateCluster,
    /// The copy's cluster does not serve the kind (its CRD is not installed there); the copy is
    /// written once it is.
    KindNotServed,
    /// The target namespace is outside the namespaces this installation of mimeo is limited to
    /// (`--watch-namespace`); the copy is not attempted.
    NotWatched,
    /// mimeo never writes a copy like this one (a Secret of type
    /// `kubernetes.io/service-account-token` or `helm.sh/release.v1`); `message` says why.
    Refused,
    /// mimeo kept deleting and creating the copy again, or writing it back after something else
    /// changed it, and has stopped touching it for a while; `message` says what alternated.
    Flapping,
    /// Writing the copy failed; `message` says why.
    Failed,
}

impl CopyState {
    /// Every state, for metrics that report each one (zero included).
    pub const ALL: [CopyState; 15] = [
        CopyState::Synced,
        CopyState::Conflict,
        CopyState::NotAccepted,
        CopyState::NamespaceMissing,
        CopyState::Skipped,
        CopyState::PluginFailed,
        CopyState::Failed,
        CopyState::Unreachable,
        CopyState::Unauthorized,
        CopyState::ClusterMissing,
        CopyState::KindNotServed,
        CopyState::NotWatched,
        CopyState::Refused,
        CopyState::Flapping,
        CopyState::DuplicateCluster,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESIGN_EXAMPLE: &str = r#"
apiVersion: mimeo.dev/v1alpha1
kind: SyncRule
metadata: {name: chart-registry-creds, namespace: platform-helm}
spec:
  source: {kind: Secret, name: registry-creds}
  targets:
    - {namespace: tenant-a, name: helm-registry}
  transforms:
    - plugin: oci://registry.example.com/mimeo/filter-keys:1.0.0
      config: {include: [".dockerconfigjson"]}
  metadata: {labels: {include: ["app.kubernetes.io/*"]}}
"#;

    #[test]
    fn a_rule_reads_with_safe_defaults() {
        let rule: SyncRule = serde_yaml_ng::from_str(DESIGN_EXAMPLE).unwrap();
        assert_eq!(
            rule.spec.conflict,
            ConflictPolicy::Fail,
            "never overwrite what is not ours by default"
        );
        assert_eq!(rule.spec.deletion, DeletionPolicy::Delete);
        assert_eq!(rule.spec.source.name.as_deref(), Some("registry-creds"));
        assert_eq!(rule.spec.targets[0].name.as_deref(), Some("helm-registry"));
        assert_eq!(rule.spec.metadata.labels.include, ["app.kubernetes.io/*"]);
        assert!(rule.spec.metadata.annotations.is_empty());
        assert_eq!(
            rule.spec.transforms[0].config,
            Some(serde_json::json!({"include": [".dockerconfigjson"]}))
        );
    }

    #[test]
    fn the_flattened_spec_round_trips_unchanged() {
        let rule: SyncRule = serde_yaml_ng::from_str(DESIGN_EXAMPLE).unwrap();
        let json = serde_json::to_value(&rule).unwrap();
        assert!(
            json["spec"].get("rule").is_none(),
            "the shared spec must sit directly under spec"
        );
        assert_eq!(json["spec"]["source"]["kind"], "Secret");
        let again: SyncRule = serde_json::from_value(json).unwrap();
        assert_eq!(again.spec, rule.spec);
    }
}
