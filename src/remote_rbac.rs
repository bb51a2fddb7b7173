//! The RBAC that the identity in a `RemoteCluster`'s kubeconfig needs inside the remote cluster:
//! what `mimeo remote rbac` prints.
//!
//! How mimeo uses a remote cluster decides the grants:
//!
//! - As a **target**: one metadata-only watch on namespaces (cluster-wide `get`, `list`, `watch`
//!   on `namespaces`); per copied kind one watch over all namespaces, selected by the label
//!   `mimeo.dev/managed-by=mimeo` (cluster-wide `list`, `watch`: a label selector does not narrow
//!   RBAC); and in each target namespace `get`, `create`, `update`, `patch`, `delete` on the kind.
//!   Creating target namespaces adds `create` on `namespaces`.
//! - As a **source**: `get`, `list`, `watch` on the kind in each source namespace, nothing
//!   cluster-wide.
//!
//! Everything here is pure: options in, objects (or YAML) out.

use crate::sync::kinds::supported_resources;
use crate::sync::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ApiResource;
use serde_json::Value;
use std::collections::BTreeMap;

/// The default name of the RBAC objects for a target cluster.
pub const DEFAULT_TARGET_NAME: &str = "mimeo-remote";
/// The default name of the RBAC objects for a source cluster; distinct from the target's, so that
/// a cluster used both ways can hold both sets without one replacing the other's Roles.
pub const DEFAULT_SOURCE_NAME: &str = "mimeo-remote-source";
/// The default service account, as `NAMESPACE/NAME`.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "mimeo-system/mimeo-remote";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// Verbs on copies in each target namespace.
const TARGET_WRITE_VERBS: [&str; 5] = ["get", "create", "update", "patch", "delete"];
/// Verbs on copies cluster-wide, for the label-selected watch.
const TARGET_WATCH_VERBS: [&str; 2] = ["list", "watch"];
/// Verbs on namespaces, for the namespace watch.
const NAMESPACE_WATCH_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on sources in each source namespace.
const SOURCE_VERBS: [&str; 3] = ["get", "list", "watch"];

/// How mimeo uses the remote cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// mimeo writes copies into it.
    Target,
    /// mimeo reads the objects it copies from it.
    Source,
}

/// Who the grants are for: the identity of the kubeconfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    ServiceAccount { namespace: String, name: String },
    User(String),
}

impl Identity {
    /// A service account given as `NAMESPACE/NAME`.
    pub fn service_account(text: &str) -> Result<Identity, RbacError> {
        let invalid = || RbacError::InvalidServiceAccount(text.to_owned());
        let (namespace, name) = text.split_once('/').ok_or_else(invalid)?;
        if !is_dns_label(namespace) || !is_dns_subdomain(name) {
            return Err(invalid());
        }
        Ok(Identity::ServiceAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    fn subject(&self) -> Subject {
        match self {
            Identity::ServiceAccount { namespace, name } => Subject {
                kind: "ServiceAccount".into(),
                api_group: None,
                name: name.clone(),
                namespace: Some(namespace.clone()),
            },
            Identity::User(name) => Subject {
                kind: "User".into(),
                api_group: Some(RBAC_GROUP.into()),
                name: name.clone(),
                namespace: None,
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            Identity::ServiceAccount { namespace, name } => format!("service account {namespace}/{name}"),
            Identity::User(name) => format!("user {name}"),
        }
    }
}

/// What to generate RBAC for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacOptions {
    /// The kinds copied, as `Secret`, `ConfigMap`, or their plural or lowercase forms.
    pub kinds: Vec<String>,
    /// The target (or source) namespaces. Empty for a target: the namespace-scoped verbs are
    /// granted by the ClusterRole, in every namespace.
    pub namespaces: Vec<String>,
    pub usage: Use,
    /// Also grant `create` on namespaces (targets only).
    pub create_namespaces: bool,
    pub identity: Identity,
    /// The name of the ClusterRole, ClusterRoleBinding, Roles and RoleBindings; `None` for
    /// [`DEFAULT_TARGET_NAME`] or [`DEFAULT_SOURCE_NAME`].
    pub name: Option<String>,
}

impl Default for RbacOptions {
    fn default() -> Self {
        RbacOptions {
            kinds: vec!["Secret".into()],
            namespaces: Vec::new(),
            usage: Use::Target,
            create_namespaces: false,
            identity: Identity::service_account(DEFAULT_SERVICE_ACCOUNT).expect("a valid default"),
            name: None,
        }
    }
}

impl RbacOptions {
    /// Whether the output grants writes to the copied kinds in every namespace of the cluster.
    pub fn grants_in_every_namespace(&self) -> bool {
        self.usage == Use::Target && self.namespaces.is_empty()
    }

    fn object_name(&self) -> &str {
        match (&self.name, self.usage) {
            (Some(name), _) => name,
            (None, Use::Target) => DEFAULT_TARGET_NAME,
            (None, Use::Source) => DEFAULT_SOURCE_NAME,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("unknown kind {given:?}: mimeo copies {supported}")]
    UnknownKind { given: String, supported: String },
    #[error("no kind given: mimeo copies {0}")]
    NoKinds(String),
    #[error("invalid namespace {0:?}: a namespace name is at most 63 lowercase letters, digits and '-'")]
    InvalidNamespace(String),
    #[error("invalid service account {0:?}: expected NAMESPACE/NAME, such as {DEFAULT_SERVICE_ACCOUNT}")]
    InvalidServiceAccount(String),
    #[error("the user name is empty")]
    EmptyUser,
    #[error("invalid name {0:?}: a name is non-empty and has no '/' or '%'")]
    InvalidName(String),
    #[error(
        "a source cluster needs at least one --namespace: mimeo reads sources in the namespaces given and grants nothing cluster-wide"
    )]
    SourceWithoutNamespace,
    #[error("--create-namespaces is for target clusters: mimeo creates no namespaces in a source cluster")]
    CreateNamespacesOnSource,
    #[error("rendering YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("building an object: {0}")]
    Json(#[from] serde_json::Error),
}

/// The names of the kinds this build copies, for messages: `Secret, ConfigMap`.
pub fn supported_kinds() -> String {
    supported_resources()
        .into_iter()
        .map(|r| r.kind)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The API resource of a kind mimeo copies, given as its kind or plural, in any case.
pub fn resolve_kind(given: &str) -> Result<ApiResource, RbacError> {
    let wanted = given.trim();
    supported_resources()
        .into_iter()
        .find(|r| r.kind.eq_ignore_ascii_case(wanted) || r.plural.eq_ignore_ascii_case(wanted))
        .ok_or_else(|| RbacError::UnknownKind {
            given: given.to_owned(),
            supported: supported_kinds(),
        })
}

/// One YAML document: a comment, as paragraphs (an empty one leaves a blank comment line; one
/// starting with `- ` is a list item), and the object.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub comment: Vec<String>,
    pub object: Value,
}

/// How wide comment lines may be, `# ` included.
const COMMENT_WIDTH: usize = 100;

/// The options checked and normalised: kinds resolved, in the order of this build's kinds, and
/// namespaces sorted, without duplicates.
struct Plan {
    resources: Vec<ApiResource>,
    namespaces: Vec<String>,
}

fn plan(options: &RbacOptions) -> Result<Plan, RbacError> {
    if options.kinds.is_empty() {
        return Err(RbacError::NoKinds(supported_kinds()));
    }
    let wanted = options
        .kinds
        .iter()
        .map(|k| resolve_kind(k))
        .collect::<Result<Vec<_>, _>>()?;
    let resources = supported_resources()
        .into_iter()
        .filter(|r| wanted.iter().any(|w| w.plural == r.plural && w.group == r.group))
        .collect();
    let mut namespaces = options.namespaces.clone();
    if let Some(bad) = namespaces.iter().find(|ns| !is_dns_label(ns)) {
        return Err(RbacError::InvalidNamespace(bad.clone()));
    }
    namespaces.sort();
    namespaces.dedup();
    let name = options.object_name();
    if name.is_empty() || name.contains(['/', '%']) || name == "." || name == ".." {
        return Err(RbacError::InvalidName(name.to_owned()));
    }
    if let Identity::User(user) = &options.identity
        && user.is_empty()
    {
        return Err(RbacError::EmptyUser);
    }
    if options.usage == Use::Source {
        if namespaces.is_empty() {
            return Err(RbacError::SourceWithoutNamespace);
        }
        if options.create_namespaces {
            return Err(RbacError::CreateNamespacesOnSource);
        }
    }
    Ok(Plan {
        resources,
        namespaces,
    })
}

/// The objects to apply in the remote cluster, in order: for a service account its Namespace and
/// the ServiceAccount; for a target the ClusterRole and its ClusterRoleBinding; then per
/// namespace, sorted, a Role and its RoleBinding.
pub fn objects(options: &RbacOptions) -> Result<Vec<Value>, RbacError> {
    Ok(documents(options)?.into_iter().map(|d| d.object).collect())
}

/// The objects of [`objects`] as one multi-document YAML stream, each with a comment on what it
/// grants and why.
pub fn render(options: &RbacOptions) -> Result<String, RbacError> {
    let mut out = String::new();
    for document in documents(options)? {
        out.push_str("---\n");
        for paragraph in &document.comment {
            for line in wrap(paragraph, COMMENT_WIDTH - 2) {
                out.push_str(format!("# {line}").trim_end().replace('\u{a0}', " ").as_str());
                out.push('\n');
            }
        }
        out.push_str(&serde_yaml_ng::to_string(&document.object)?);
    }
    Ok(out)
}

/// A paragraph in lines of at most `width` characters (a longer word gets a line of its own); a
/// list item's further lines are indented under its text. Words joined by a no-break space stay on
/// one line.
fn wrap(paragraph: &str, width: usize) -> Vec<String> {
    let indent = if paragraph.starts_with("- ") { "  " } else { "" };
    let mut lines = vec![String::new()];
    for word in paragraph.split(' ') {
        let line = lines.last_mut().expect("never empty");
        if line.is_empty() || line.trim_start().is_empty() {
            line.push_str(word);
        } else if line.len() + 1 + word.len() <= width {
            line.push(' ');
            line.push_str(word);
        } else {
            lines.push(format!("{indent}{word}"));
        }
    }
    lines
}

/// The objects of [`objects`], each with its comment.
pub fn documents(options: &RbacOptions) -> Result<Vec<Document>, RbacError> {
    let plan = plan(options)?;
    let name = options.object_name();
    let identity = options.identity.describe();
    let kinds = plan
        .resources
        .iter()
        .map(|r| r.plural.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut documents = Vec::new();
    // The header goes on the first document, whichever that is.
    let mut header = vec![
        match options.usage {
            Use::Target => format!(
                "RBAC inside a remote cluster that mimeo writes copies of {kinds} to, for the {identity} \
                 that the RemoteCluster's kubeconfig authenticates as."
            ),
            Use::Source => format!(
                "RBAC inside a remote cluster that mimeo reads {kinds} from, for the {identity} that the \
                 RemoteCluster's kubeconfig authenticates as."
            ),
        },
        String::new(),
    ];

    if let Identity::ServiceAccount { namespace, name: sa } = &options.identity {
        header.push(format!(
            "The ServiceAccount's namespace, so that this applies on a cluster without it. Beware that \
             `kubectl\u{a0}delete\u{a0}-f` of this output deletes the namespace {namespace} too, with everything in it."
        ));
        documents.push(Document {
            comment: std::mem::take(&mut header),
            object: to_value(Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })?,
        });
        documents.push(Document {
            comment: vec![
                "The identity of mimeo in this cluster: the RemoteCluster's kubeconfig holds a token of this \
                 ServiceAccount."
                    .into(),
            ],
            object: to_value(ServiceAccount {
                metadata: meta(sa, Some(namespace)),
                ..Default::default()
            })?,
        });
    }

    let subjects = vec![options.identity.subject()];
    if options.usage == Use::Target {
        let mut comment = std::mem::take(&mut header);
        comment.push("Cluster-wide, for mimeo's watches in this cluster:".into());
        let mut namespace_verbs = NAMESPACE_WATCH_VERBS.to_vec();
        comment.push(format!(
            "- {} on namespaces: one metadata-only watch on namespaces.",
            NAMESPACE_WATCH_VERBS.join(", ")
        ));
        if options.create_namespaces {
            namespace_verbs.push("create");
            comment.push("- create on namespaces: creating target namespaces that do not exist.".into());
        }
        comment.push(format!(
            "- {} on {kinds}: one watch per kind over all namespaces, selected by the label \
             {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}. A label selector does not narrow RBAC: this lets the \
             {identity} list and watch every object of these kinds in every namespace, contents included.",
            TARGET_WATCH_VERBS.join(", ")
        ));
        let mut kind_verbs = TARGET_WATCH_VERBS.to_vec();
        if plan.namespaces.is_empty() {
            kind_verbs = ordered_verbs(&[&TARGET_WATCH_VERBS[..], &TARGET_WRITE_VERBS[..]].concat());
            comment.push(format!(
                "- {} on {kinds}: writing copies. No namespace was given, so this grants them in every \
                 namespace of the cluster; name the target namespaces (--namespace) to grant them there alone.",
                TARGET_WRITE_VERBS.join(", ")
            ));
        }
        let mut rules = vec![rule(&[""], &["namespaces"], &namespace_verbs)];
        rules.extend(rules_for(&plan.resources, &kind_verbs));
        documents.push(Document {
            comment,
            object: to_value(ClusterRole {
                metadata: meta(name, None),
                rules: Some(rules),
                ..Default::default()
            })?,
        });
        documents.push(Document {
            comment: vec![format!("Grants the ClusterRole {name} to the {identity}.")],
            object: to_value(ClusterRoleBinding {
                metadata: meta(name, None),
                role_ref: role_ref("ClusterRole", name),
                subjects: Some(subjects.clone()),
            })?,
        });
    }

    let (verbs, purpose): (&[&str], &str) = match options.usage {
        Use::Target => (&TARGET_WRITE_VERBS, "writing, updating and deleting copies"),
        Use::Source => (&SOURCE_VERBS, "reading and watching the objects mimeo copies"),
    };
    for namespace in &plan.namespaces {
        let mut comment = std::mem::take(&mut header);
        comment.push(format!(
            "In namespace {namespace}, {} on {kinds}: {purpose}.",
            verbs.join(", ")
        ));
        documents.push(Document {
            comment,
            object: to_value(Role {
                metadata: meta(name, Some(namespace)),
                rules: Some(rules_for(&plan.resources, verbs)),
            })?,
        });
        documents.push(Document {
            comment: vec![format!(
                "Grants the Role {name} in {namespace} to the {identity}."
            )],
            object: to_value(RoleBinding {
                metadata: meta(name, Some(namespace)),
                role_ref: role_ref("Role", name),
                subjects: Some(subjects.clone()),
            })?,
        });
    }
    Ok(documents)
}

fn to_value(object: impl serde::Serialize) -> Result<Value, RbacError> {
    Ok(serde_json::to_value(object)?)
}

fn meta(name: &str, namespace: Option<&String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.cloned(),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/part-of".to_owned(),
            "mimeo".to_owned(),
        )])),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// One rule per API group, in the order the resources come.
fn rules_for(resources: &[ApiResource], verbs: &[&str]) -> Vec<PolicyRule> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for resource in resources {
        match groups.iter_mut().find(|(g, _)| *g == resource.group) {
            Some((_, plurals)) => plurals.push(&resource.plural),
            None => groups.push((&resource.group, vec![&resource.plural])),
        }
    }
    groups
        .into_iter()
        .map(|(group, plurals)| rule(&[group], &plurals, verbs))
        .collect()
}

/// Verbs in the conventional order: reads first, then writes.
fn ordered_verbs(verbs: &[&'static str]) -> Vec<&'static str> {
    const ORDER: [&str; 7] = ["get", "list", "watch", "create", "update", "patch", "delete"];
    ORDER.into_iter().filter(|v| verbs.contains(v)).collect()
}

/// A DNS-1123 label: what a namespace name must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: what a ServiceAccount name must be.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(kinds: &[&str], namespaces: &[&str]) -> RbacOptions {
        RbacOptions {
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            identity: Identity::User("remote-writer".into()),
            ..Default::default()
        }
    }

    fn kinds_and_names(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{} {}{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .map(|ns| format!("{ns}/"))
                        .unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn a_target_with_namespaces_gets_watches_cluster_wide_and_writes_per_namespace() {
        let objects = objects(&target(&["configmaps", "Secret"], &["b", "a", "b"])).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            [
                "ClusterRole mimeo-remote",
                "ClusterRoleBinding mimeo-remote",
                "Role a/mimeo-remote",
                "RoleBinding a/mimeo-remote",
                "Role b/mimeo-remote",
                "RoleBinding b/mimeo-remote",
            ]
        );
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["list", "watch"]},
            ])
        );
        assert_eq!(
            objects[1]["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "remote-writer"}])
        );
        assert_eq!(
            objects[1]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mimeo-remote"})
        );
        assert_eq!(
            objects[2]["rules"],
            json!([{"apiGroups": [""], "resources": ["secrets", "configmaps"],
                    "verbs": ["get", "create", "update", "patch", "delete"]}])
        );
        assert_eq!(objects[3]["roleRef"]["kind"], "Role");
        assert_eq!(objects[2]["apiVersion"], "rbac.authorization.k8s.io/v1");
    }

    #[test]
    fn a_target_without_namespaces_writes_everywhere_and_says_so() {
        let options = target(&["Secret"], &[]);
        assert!(options.grants_in_every_namespace());
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            ["ClusterRole mimeo-remote", "ClusterRoleBinding mimeo-remote"]
        );
        assert_eq!(
            objects[0]["rules"][1],
            json!({"apiGroups": [""], "resources": ["secrets"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        );
        let yaml = render(&options).unwrap();
        let comment = documents(&options).unwrap()[0].comment.join("\n");
        assert!(
            comment.contains("No namespace was given, so this grants them in every namespace of the cluster"),
            "{comment}"
        );
        assert!(yaml.contains("A label selector does not narrow RBAC"), "{yaml}");
        assert!(yaml.lines().all(|l| l.len() <= COMMENT_WIDTH), "{yaml}");
    }

    #[test]
    fn create_namespaces_adds_create_on_namespaces() {
        let options = RbacOptions {
            create_namespaces: true,
            ..target(&["Secret"], &["apps"])
        };
        let objects = objects(&options).unwrap();
        assert_eq!(
            objects[0]["rules"][0]["verbs"],
            json!(["get", "list", "watch", "create"])
        );
    }

    #[test]
    fn a_source_gets_reads_in_its_namespaces_and_nothing_cluster_wide() {
        let options = RbacOptions {
            usage: Use::Source,
            kinds: vec!["configmap".into()],
            namespaces: vec!["shared".into()],
            ..Default::default()
        };
        assert!(!options.grants_in_every_namespace());
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            [
                "Namespace mimeo-system",
                "ServiceAccount mimeo-system/mimeo-remote",
                "Role shared/mimeo-remote-source",
                "RoleBinding shared/mimeo-remote-source",
            ]
        );
        assert_eq!(
            objects[2]["rules"],
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}])
        );
        assert_eq!(
            objects[3]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "mimeo-remote", "namespace": "mimeo-system"}])
        );
        let yaml = render(&options).unwrap();
        assert!(yaml.contains("mimeo reads configmaps from"), "{yaml}");
        assert!(!yaml.contains("ClusterRole"), "{yaml}");
    }

    #[test]
    fn a_source_needs_namespaces_and_creates_none() {
        let source = RbacOptions {
            usage: Use::Source,
            ..Default::default()
        };
        assert!(matches!(objects(&source), Err(RbacError::SourceWithoutNamespace)));
        let creating = RbacOptions {
            namespaces: vec!["a".into()],
            create_namespaces: true,
            ..source
        };
        assert!(matches!(
            objects(&creating),
            Err(RbacError::CreateNamespacesOnSource)
        ));
    }

    #[test]
    fn kinds_are_accepted_in_any_case_and_plural_and_unknown_ones_are_named() {
        for given in ["Secret", "secret", "secrets", "SECRETS"] {
            assert_eq!(resolve_kind(given).unwrap().plural, "secrets", "{given}");
        }
        for given in ["ConfigMap", "configmap", "configmaps"] {
            assert_eq!(resolve_kind(given).unwrap().plural, "configmaps", "{given}");
        }
        let error = objects(&target(&["Secret", "Pod"], &[])).unwrap_err().to_string();
        assert_eq!(error, "unknown kind \"Pod\": mimeo copies Secret, ConfigMap");
        assert!(matches!(objects(&target(&[], &[])), Err(RbacError::NoKinds(_))));
    }

    #[test]
    fn names_are_checked() {
        assert!(matches!(
            objects(&target(&["Secret"], &["Apps"])),
            Err(RbacError::InvalidNamespace(ns)) if ns == "Apps"
        ));
        for bad in ["mimeo", "/x", "x/", "Mimeo/x", "a/b/c"] {
            assert!(
                matches!(
                    Identity::service_account(bad),
                    Err(RbacError::InvalidServiceAccount(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            Identity::service_account("ops/mimeo.eu1").unwrap(),
            Identity::ServiceAccount {
                namespace: "ops".into(),
                name: "mimeo.eu1".into()
            }
        );
        let renamed = RbacOptions {
            name: Some("a/b".into()),
            ..target(&["Secret"], &[])
        };
        assert!(matches!(objects(&renamed), Err(RbacError::InvalidName(_))));
        let nobody = RbacOptions {
            identity: Identity::User(String::new()),
            ..target(&["Secret"], &[])
        };
        assert!(matches!(objects(&nobody), Err(RbacError::EmptyUser)));
    }

    #[test]
    fn the_name_can_be_chosen() {
        let options = RbacOptions {
            name: Some("eu1-writer".into()),
            ..target(&["Secret"], &["apps"])
        };
        let objects = objects(&options).unwrap();
        assert!(objects.iter().all(|o| o["metadata"]["name"] == "eu1-writer"));
        assert_eq!(objects[1]["roleRef"]["name"], "eu1-writer");
        assert_eq!(objects[3]["roleRef"]["name"], "eu1-writer");
    }

    #[test]
    fn the_yaml_parses_back_to_the_objects_and_is_deterministic() {
        let options = RbacOptions {
            kinds: vec!["ConfigMap".into(), "Secret".into()],
            namespaces: vec!["z".into(), "apps".into()],
            ..Default::default()
        };
        let yaml = render(&options).unwrap();
        assert_eq!(yaml, render(&options).unwrap());
        let parsed: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
            .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
            .collect();
        assert_eq!(parsed, objects(&options).unwrap());
        assert!(yaml.starts_with("---\n# RBAC inside a remote cluster"), "{yaml}");
        assert!(yaml.lines().all(|l| l.len() <= COMMENT_WIDTH), "{yaml}");
    }
}
