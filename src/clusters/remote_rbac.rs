//! The RBAC that the identity in a `RemoteCluster`'s kubeconfig needs inside the remote cluster:
//! what `mimeo remote rbac` prints.
//!
//! How mimeo uses a remote cluster decides the grants:
//!
//! - As a **target**: one metadata-only watch on namespaces (cluster-wide `get`, `list`, `watch`
//!   on `namespaces`); per copied kind one watch over the whole cluster, selected by the label
//!   `mimeo.dev/managed-by=mimeo` (cluster-wide `list`, `watch`: a label selector does not narrow
//!   RBAC); and `get`, `create`, `update`, `patch`, `delete` on the kind: for a namespaced kind in
//!   each target namespace, for a cluster-scoped kind (whose copies have no namespace)
//!   cluster-wide. Creating target namespaces adds `create` on `namespaces`.
//! - As a **source**: `get`, `list`, `watch` on a namespaced kind in each source namespace, and
//!   on a cluster-scoped kind cluster-wide.
//! - Either way, a kind outside the core group (Kyverno's) is found by API discovery, which every
//!   authenticated identity may read, and mimeo watches `customresourcedefinitions` (metadata
//!   only) to notice a kind installed later: cluster-wide `get`, `list`, `watch` on them.
//!
//! Everything here is pure: options in, objects (or YAML) out.

use crate::sync::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
/// The group and resource of CustomResourceDefinitions, which mimeo watches in a cluster where it
/// discovers kinds.
const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_RESOURCE: &str = "customresourcedefinitions";
/// Verbs on copies in each target namespace (or, for a cluster-scoped kind, cluster-wide).
const TARGET_WRITE_VERBS: [&str; 5] = ["get", "create", "update", "patch", "delete"];
/// Verbs on copies cluster-wide, for the label-selected watch.
const TARGET_WATCH_VERBS: [&str; 2] = ["list", "watch"];
/// Verbs on namespaces, for the namespace watch.
const NAMESPACE_WATCH_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on sources in each source namespace (or, for a cluster-scoped kind, cluster-wide).
const SOURCE_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Verbs on CustomResourceDefinitions, for the CRD watch that goes with discovery.
const CRD_VERBS: [&str; 3] = ["get", "list", "watch"];

/// A kind mimeo copies, as far as RBAC is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownKind {
    pub kind: &'static str,
    /// The API group: `""` for the core group.
    pub group: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
}

impl KnownKind {
    /// The kind as an allow-list names it: `Secret`, `Policy.kyverno.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether mimeo finds the kind by API discovery (and so watches CRDs): every kind outside the
    /// core group.
    fn discovered(&self) -> bool {
        !self.group.is_empty()
    }
}

/// Kyverno's CEL policy kind `kind` (`policies.kyverno.io`), of plural `plural`.
const fn cel_policy(kind: &'static str, plural: &'static str, namespaced: bool) -> KnownKind {
    KnownKind {
        kind,
        group: "policies.kyverno.io",
        plural,
        namespaced,
    }
}

/// The kinds `mimeo remote rbac` knows, in the order its output names them: the controller's
/// default allow-list.
pub const KNOWN_KINDS: [KnownKind; 14] = [
    KnownKind {
        kind: "Secret",
        group: "",
        plural: "secrets",
        namespaced: true,
    },
    KnownKind {
        kind: "ConfigMap",
        group: "",
        plural: "configmaps",
        namespaced: true,
    },
    KnownKind {
        kind: "Policy",
        group: "kyverno.io",
        plural: "policies",
        namespaced: true,
    },
    KnownKind {
        kind: "ClusterPolicy",
        group: "kyverno.io",
        plural: "clusterpolicies",
        namespaced: false,
    },
    cel_policy("ValidatingPolicy", "validatingpolicies", false),
    cel_policy("MutatingPolicy", "mutatingpolicies", false),
    cel_policy("GeneratingPolicy", "generatingpolicies", false),
    cel_policy("DeletingPolicy", "deletingpolicies", false),
    cel_policy("ImageValidatingPolicy", "imagevalidatingpolicies", false),
    cel_policy("NamespacedValidatingPolicy", "namespacedvalidatingpolicies", true),
    cel_policy("NamespacedMutatingPolicy", "namespacedmutatingpolicies", true),
    cel_policy("NamespacedGeneratingPolicy", "namespacedgeneratingpolicies", true),
    cel_policy("NamespacedDeletingPolicy", "namespaceddeletingpolicies", true),
    cel_policy(
        "NamespacedImageValidatingPolicy",
        "namespacedimagevalidatingpolicies",
        true,
    ),
];

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
    /// The kinds copied, each as its kind, its plural or `Kind.group` (`Secret`, `policies`,
    /// `ClusterPolicy.kyverno.io`), in any case.
    pub kinds: Vec<String>,
    /// The target (or source) namespaces, for the namespaced kinds. Empty for a target: the
    /// namespace-scoped verbs are granted by the ClusterRole, in every namespace.
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
    /// Whether the output grants writes to namespaced copied kinds in every namespace of the
    /// cluster.
    pub fn grants_in_every_namespace(&self) -> bool {
        self.usage == Use::Target
            && self.namespaces.is_empty()
            && self
                .kinds
                .iter()
                .any(|k| resolve_kind(k).is_ok_and(|k| k.namespaced))
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
    #[error(
        "unknown kind {given:?}: this command knows {supported}. mimeo copies any kind its --allow-kind lists (docs/kinds.md); for another kind, take the rules this command prints for Secret and put that kind's resource and API group in their place"
    )]
    UnknownKind { given: String, supported: String },
    #[error("no kind given: this command knows {0}")]
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
        "a source cluster needs at least one --namespace for {0}: mimeo reads a namespaced kind in the namespaces given alone (a cluster-scoped kind needs no --namespace)"
    )]
    SourceWithoutNamespace(String),
    #[error(
        "--namespace is for namespaced kinds, and {0} is cluster-scoped: mimeo copies it whole-cluster, with no namespace"
    )]
    NamespaceWithoutNamespacedKind(String),
    #[error("--create-namespaces is for target clusters: mimeo creates no namespaces in a source cluster")]
    CreateNamespacesOnSource,
    #[error("rendering YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("building an object: {0}")]
    Json(#[from] serde_json::Error),
}

/// The names of the kinds `mimeo remote rbac` knows, for messages:
/// `Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io, ValidatingPolicy.policies.kyverno.io, ...`.
pub fn supported_kinds() -> String {
    KNOWN_KINDS
        .iter()
        .map(KnownKind::qualified)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A kind mimeo copies, given as its kind, its plural, or either followed by `.group`
/// (`Policy.kyverno.io`), in any case.
pub fn resolve_kind(given: &str) -> Result<KnownKind, RbacError> {
    let wanted = given.trim();
    let matches = |known: &KnownKind, name: &str| {
        known.kind.eq_ignore_ascii_case(name) || known.plural.eq_ignore_ascii_case(name)
    };
    KNOWN_KINDS
        .into_iter()
        .find(|known| {
            matches(known, wanted)
                || wanted.split_once('.').is_some_and(|(name, group)| {
                    !known.group.is_empty() && known.group.eq_ignore_ascii_case(group) && matches(known, name)
                })
        })
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

/// The options checked and normalised: kinds resolved, in the order of [`KNOWN_KINDS`], and
/// namespaces sorted, without duplicates.
struct Plan {
    kinds: Vec<KnownKind>,
    namespaces: Vec<String>,
}

impl Plan {
    fn namespaced(&self) -> Vec<KnownKind> {
        self.kinds.iter().copied().filter(|k| k.namespaced).collect()
    }

    fn cluster_scoped(&self) -> Vec<KnownKind> {
        self.kinds.iter().copied().filter(|k| !k.namespaced).collect()
    }

    fn discovered(&self) -> Vec<KnownKind> {
        self.kinds.iter().copied().filter(KnownKind::discovered).collect()
    }
}

/// Plurals for prose: `secrets, policies`.
fn plurals(kinds: &[KnownKind]) -> String {
    kinds.iter().map(|k| k.plural).collect::<Vec<_>>().join(", ")
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
    let kinds = KNOWN_KINDS
        .into_iter()
        .filter(|known| wanted.contains(known))
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
    let plan = Plan { kinds, namespaces };
    let namespaced = plan.namespaced();
    if namespaced.is_empty() && !plan.namespaces.is_empty() {
        return Err(RbacError::NamespaceWithoutNamespacedKind(
            plan.kinds
                .iter()
                .map(KnownKind::qualified)
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    if options.usage == Use::Source {
        if plan.namespaces.is_empty() && !namespaced.is_empty() {
            return Err(RbacError::SourceWithoutNamespace(
                namespaced
                    .iter()
                    .map(KnownKind::qualified)
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
        if options.create_namespaces {
            return Err(RbacError::CreateNamespacesOnSource);
        }
    }
    Ok(plan)
}

/// The objects to apply in the remote cluster, in order: for a service account its Namespace and
/// the ServiceAccount; for a target, or a source with a cluster-scoped or discovered kind, the
/// ClusterRole and its ClusterRoleBinding; then per namespace, sorted, a Role and its RoleBinding.
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
    let kinds = plurals(&plan.kinds);
    let namespaced = plan.namespaced();
    let discovered = plan.discovered();
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
        documents.extend(service_account(namespace, sa, std::mem::take(&mut header))?);
    }

    // The cluster-wide grants: a comment line and the verbs per kind, then the extra rules.
    let (mut comment, kind_verbs, mut rules) = cluster_wide(options, &plan, &identity);
    rules.extend(rules_for(&kind_verbs));
    if !discovered.is_empty() {
        comment.push(format!(
            "- {} on {CRD_RESOURCE} ({CRD_GROUP}): mimeo finds {} by API discovery (which every \
             authenticated identity may read) and watches CustomResourceDefinitions (metadata only), so \
             that a kind installed later is noticed.",
            CRD_VERBS.join(", "),
            plurals(&discovered)
        ));
        rules.push(rule(&[CRD_GROUP], &[CRD_RESOURCE], &CRD_VERBS));
    }

    let subjects = vec![options.identity.subject()];
    if !rules.is_empty() {
        let mut full = std::mem::take(&mut header);
        full.extend(comment);
        documents.push(Document {
            comment: full,
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
    let role_rules: Vec<(KnownKind, Vec<&str>)> = namespaced.iter().map(|k| (*k, verbs.to_vec())).collect();
    for namespace in &plan.namespaces {
        let mut comment = std::mem::take(&mut header);
        comment.push(format!(
            "In namespace {namespace}, {} on {}: {purpose}.",
            verbs.join(", "),
            plurals(&namespaced)
        ));
        documents.push(Document {
            comment,
            object: to_value(Role {
                metadata: meta(name, Some(namespace)),
                rules: Some(rules_for(&role_rules)),
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

/// The ServiceAccount and its namespace, the first with the output's `header`.
fn service_account(
    namespace: &String,
    sa: &str,
    mut header: Vec<String>,
) -> Result<Vec<Document>, RbacError> {
    header.push(format!(
        "The ServiceAccount's namespace, so that this applies on a cluster without it. Beware that \
         `kubectl\u{a0}delete\u{a0}-f` of this output deletes the namespace {namespace} too, with everything in it."
    ));
    let namespace_doc = Document {
        comment: header,
        object: to_value(Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        })?,
    };
    let account = Document {
        comment: vec![
            "The identity of mimeo in this cluster: the RemoteCluster's kubeconfig holds a token of this \
             ServiceAccount."
                .into(),
        ],
        object: to_value(ServiceAccount {
            metadata: meta(sa, Some(namespace)),
            ..Default::default()
        })?,
    };
    Ok(vec![namespace_doc, account])
}

/// The verbs granted on each kind.
type KindVerbs = Vec<(KnownKind, Vec<&'static str>)>;

/// The cluster-wide grants of `plan`: the comment lines saying why, the verbs per kind, and the
/// rules beyond those (namespaces).
fn cluster_wide(
    options: &RbacOptions,
    plan: &Plan,
    identity: &str,
) -> (Vec<String>, KindVerbs, Vec<PolicyRule>) {
    let kinds = plurals(&plan.kinds);
    let namespaced = plan.namespaced();
    let cluster_scoped = plan.cluster_scoped();
    let discovered = plan.discovered();
    let mut comment = Vec::new();
    let mut kind_verbs: Vec<(KnownKind, Vec<&str>)> = Vec::new();
    let mut rules = Vec::new();
    match options.usage {
        Use::Target => {
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
            rules.push(rule(&[""], &["namespaces"], &namespace_verbs));
            comment.push(format!(
                "- {} on {kinds}: one watch per kind across the cluster, selected by the label \
                 {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}. A label selector does not narrow RBAC: this lets the \
                 {identity} list and watch every object of these kinds in the cluster, contents included.",
                TARGET_WATCH_VERBS.join(", ")
            ));
            let writes_everywhere = plan.namespaces.is_empty();
            for kind in &plan.kinds {
                let verbs = if writes_everywhere || !kind.namespaced {
                    ordered_verbs(&[&TARGET_WATCH_VERBS[..], &TARGET_WRITE_VERBS[..]].concat())
                } else {
                    TARGET_WATCH_VERBS.to_vec()
                };
                kind_verbs.push((*kind, verbs));
            }
            if writes_everywhere && !namespaced.is_empty() {
                comment.push(format!(
                    "- {} on {}: writing copies. No namespace was given, so this grants them in every \
                     namespace of the cluster; name the target namespaces (--namespace) to grant them there alone.",
                    TARGET_WRITE_VERBS.join(", "),
                    plurals(&namespaced)
                ));
            }
            if !cluster_scoped.is_empty() {
                comment.push(format!(
                    "- {} on {}: writing copies. These kinds are cluster-scoped: a copy has no namespace, so \
                     writing it needs these verbs cluster-wide, which no Role can grant.",
                    TARGET_WRITE_VERBS.join(", "),
                    plurals(&cluster_scoped)
                ));
            }
        }
        Use::Source => {
            if !cluster_scoped.is_empty() {
                comment.push("Cluster-wide, for mimeo's reads in this cluster:".into());
                comment.push(format!(
                    "- {} on {}: reading and watching the objects mimeo copies. These kinds are \
                     cluster-scoped, so this is granted cluster-wide.",
                    SOURCE_VERBS.join(", "),
                    plurals(&cluster_scoped)
                ));
                for kind in &cluster_scoped {
                    kind_verbs.push((*kind, SOURCE_VERBS.to_vec()));
                }
            } else if !discovered.is_empty() {
                comment.push("Cluster-wide, for mimeo's discovery in this cluster:".into());
            }
        }
    }
    (comment, kind_verbs, rules)
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

/// One rule per API group and set of verbs, in the order the kinds come.
fn rules_for(kinds: &[(KnownKind, Vec<&str>)]) -> Vec<PolicyRule> {
    let mut groups: Vec<(&str, &[&str], Vec<&str>)> = Vec::new();
    for (kind, verbs) in kinds {
        match groups.iter_mut().find(|(g, v, _)| *g == kind.group && v == verbs) {
            Some((_, _, plurals)) => plurals.push(kind.plural),
            None => groups.push((kind.group, verbs, vec![kind.plural])),
        }
    }
    groups
        .into_iter()
        .map(|(group, verbs, plurals)| rule(&[group], &plurals, verbs))
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

    fn source(kinds: &[&str], namespaces: &[&str]) -> RbacOptions {
        RbacOptions {
            usage: Use::Source,
            identity: Identity::User("remote-reader".into()),
            ..target(kinds, namespaces)
        }
    }

    fn crd_rule() -> Value {
        json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
               "verbs": ["get", "list", "watch"]})
    }

    /// The rendered YAML, checked for width, and the comment of the ClusterRole.
    fn cluster_role_comment(options: &RbacOptions) -> String {
        let yaml = render(options).unwrap();
        assert!(yaml.lines().all(|l| l.len() <= COMMENT_WIDTH), "{yaml}");
        documents(options)
            .unwrap()
            .into_iter()
            .find(|d| d.object["kind"] == "ClusterRole")
            .expect("a ClusterRole")
            .comment
            .join("\n")
    }

    #[test]
    fn a_target_of_kyverno_policies_writes_cluster_policies_cluster_wide_and_watches_crds() {
        let options = target(&["ClusterPolicy", "Policy.kyverno.io"], &["apps"]);
        assert!(!options.grants_in_every_namespace());
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            [
                "ClusterRole mimeo-remote",
                "ClusterRoleBinding mimeo-remote",
                "Role apps/mimeo-remote",
                "RoleBinding apps/mimeo-remote",
            ]
        );
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kyverno.io"], "resources": ["policies"], "verbs": ["list", "watch"]},
                {"apiGroups": ["kyverno.io"], "resources": ["clusterpolicies"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                crd_rule(),
            ])
        );
        assert_eq!(
            objects[2]["rules"],
            json!([{"apiGroups": ["kyverno.io"], "resources": ["policies"],
                    "verbs": ["get", "create", "update", "patch", "delete"]}])
        );
        let comment = cluster_role_comment(&options);
        assert!(comment.contains("a copy has no namespace"), "{comment}");
        assert!(comment.contains("no Role can grant"), "{comment}");
        assert!(comment.contains("a kind installed later is noticed"), "{comment}");
        assert!(comment.contains("API discovery"), "{comment}");
        assert!(!comment.contains("No namespace was given"), "{comment}");
    }

    #[test]
    fn a_target_of_every_kind_without_namespaces_groups_rules_by_api_group_and_verbs() {
        let options = target(&["clusterpolicies", "secret", "policies", "configmap"], &[]);
        assert!(options.grants_in_every_namespace());
        let objects = objects(&options).unwrap();
        let all = ["get", "list", "watch", "create", "update", "patch", "delete"];
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": all},
                {"apiGroups": ["kyverno.io"], "resources": ["policies", "clusterpolicies"], "verbs": all},
                crd_rule(),
            ])
        );
        let comment = cluster_role_comment(&options);
        assert!(
            comment.contains("on secrets, configmaps, policies: writing copies. No namespace was given"),
            "{comment}"
        );
        assert!(
            comment.contains("on clusterpolicies: writing copies."),
            "{comment}"
        );
    }

    #[test]
    fn kyvernos_cel_policy_kinds_are_known() {
        let options = target(
            &[
                "NamespacedValidatingPolicy",
                "validatingpolicies.policies.kyverno.io",
            ],
            &[],
        );
        let objects = objects(&options).unwrap();
        let all = ["get", "list", "watch", "create", "update", "patch", "delete"];
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["policies.kyverno.io"],
                 "resources": ["validatingpolicies", "namespacedvalidatingpolicies"], "verbs": all},
                crd_rule(),
            ])
        );
        assert_eq!(
            resolve_kind("NamespacedImageValidatingPolicy").unwrap().plural,
            "namespacedimagevalidatingpolicies"
        );
        // `policies` stays Kyverno's Policy, not the group of the CEL kinds.
        assert_eq!(resolve_kind("policies").unwrap().group, "kyverno.io");
    }

    #[test]
    fn a_target_of_cluster_scoped_kinds_alone_has_no_roles_and_takes_no_namespace() {
        let options = target(&["ClusterPolicy"], &[]);
        assert!(!options.grants_in_every_namespace());
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            ["ClusterRole mimeo-remote", "ClusterRoleBinding mimeo-remote"]
        );
        assert_eq!(objects[0]["rules"].as_array().unwrap().len(), 3);
        let comment = cluster_role_comment(&options);
        assert!(!comment.contains("No namespace was given"), "{comment}");
        let error = super::objects(&target(&["ClusterPolicy"], &["apps"])).unwrap_err();
        assert!(
            matches!(&error, RbacError::NamespaceWithoutNamespacedKind(k) if k == "ClusterPolicy.kyverno.io"),
            "{error}"
        );
    }

    #[test]
    fn core_kinds_alone_need_no_crd_watch() {
        for options in [target(&["Secret", "ConfigMap"], &[]), source(&["Secret"], &["a"])] {
            let yaml = render(&options).unwrap();
            assert!(!yaml.contains("customresourcedefinitions"), "{yaml}");
        }
    }

    #[test]
    fn a_source_of_cluster_scoped_kinds_reads_them_cluster_wide_without_namespaces() {
        let options = source(&["ClusterPolicy"], &[]);
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            [
                "ClusterRole mimeo-remote-source",
                "ClusterRoleBinding mimeo-remote-source",
            ]
        );
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": ["kyverno.io"], "resources": ["clusterpolicies"], "verbs": ["get", "list", "watch"]},
                crd_rule(),
            ])
        );
        assert_eq!(
            objects[1]["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "remote-reader"}])
        );
        let comment = cluster_role_comment(&options);
        assert!(comment.starts_with("RBAC inside a remote cluster that mimeo reads clusterpolicies from"));
        assert!(
            comment.contains("cluster-scoped, so this is granted cluster-wide"),
            "{comment}"
        );
        assert!(comment.contains("a kind installed later is noticed"), "{comment}");
    }

    #[test]
    fn a_source_of_mixed_kinds_needs_namespaces_for_the_namespaced_ones() {
        let error = objects(&source(&["ClusterPolicy", "Secret", "policies"], &[])).unwrap_err();
        assert!(
            matches!(&error, RbacError::SourceWithoutNamespace(k) if k == "Secret, Policy.kyverno.io"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .starts_with("a source cluster needs at least one --namespace for Secret, Policy.kyverno.io"),
            "{error}"
        );
        let options = source(&["ClusterPolicy", "Secret", "policies"], &["shared"]);
        let objects = objects(&options).unwrap();
        assert_eq!(
            kinds_and_names(&objects),
            [
                "ClusterRole mimeo-remote-source",
                "ClusterRoleBinding mimeo-remote-source",
                "Role shared/mimeo-remote-source",
                "RoleBinding shared/mimeo-remote-source",
            ]
        );
        assert_eq!(
            objects[0]["rules"],
            json!([
                {"apiGroups": ["kyverno.io"], "resources": ["clusterpolicies"], "verbs": ["get", "list", "watch"]},
                crd_rule(),
            ])
        );
        assert_eq!(
            objects[2]["rules"],
            json!([
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["kyverno.io"], "resources": ["policies"], "verbs": ["get", "list", "watch"]},
            ])
        );
        cluster_role_comment(&options);
    }

    #[test]
    fn a_source_of_namespaced_kyverno_policies_gets_only_the_crd_watch_cluster_wide() {
        let options = source(&["Policy"], &["shared"]);
        let objects = objects(&options).unwrap();
        assert_eq!(objects[0]["kind"], "ClusterRole");
        assert_eq!(objects[0]["rules"], json!([crd_rule()]));
        assert_eq!(
            objects[2]["rules"],
            json!([{"apiGroups": ["kyverno.io"], "resources": ["policies"], "verbs": ["get", "list", "watch"]}])
        );
        let comment = cluster_role_comment(&options);
        assert!(
            comment.contains("mimeo finds policies by API discovery"),
            "{comment}"
        );
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
        assert!(matches!(objects(&source), Err(RbacError::SourceWithoutNamespace(k)) if k == "Secret"));
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
        for given in [
            "Policy",
            "policy",
            "POLICIES",
            "Policy.kyverno.io",
            "policies.KYVERNO.io",
        ] {
            assert_eq!(resolve_kind(given).unwrap().plural, "policies", "{given}");
        }
        for given in [
            "ClusterPolicy",
            "clusterpolicies",
            "clusterpolicy.kyverno.io",
            " ClusterPolicy.kyverno.io ",
        ] {
            let kind = resolve_kind(given).unwrap();
            assert_eq!(
                (kind.plural, kind.group, kind.namespaced),
                ("clusterpolicies", "kyverno.io", false)
            );
        }
        for wrong in [
            "Policy.example.com",
            "Secret.kyverno.io",
            "Secret.",
            "kyverno.io",
            "Policy.kyverno",
        ] {
            assert!(
                matches!(resolve_kind(wrong), Err(RbacError::UnknownKind { .. })),
                "{wrong}"
            );
        }
        let error = objects(&target(&["Secret", "Pod"], &[])).unwrap_err().to_string();
        assert!(
            error.starts_with(
                "unknown kind \"Pod\": this command knows Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io, \
                 ValidatingPolicy.policies.kyverno.io,"
            ),
            "{error}"
        );
        assert!(
            error.contains(", NamespacedImageValidatingPolicy.policies.kyverno.io. mimeo copies any kind its --allow-kind lists"),
            "{error}"
        );
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
