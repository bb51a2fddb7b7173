//! The Helm chart (`charts/mimeo`) with the real `helm` (v3, built by
//! `tests/support/build-helm.sh`) and real control planes: it lints and renders with its defaults
//! and with each switch flipped, its schema refuses values of the wrong type with a clear message,
//! every object it renders passes a server-side dry run, it installs, and the ServiceAccount it
//! creates can do what mimeo needs and not more (asked of the apiserver's RBAC authorizer through
//! SelfSubjectAccessReviews made with the ServiceAccount's own token). Last, `mimeo run` under
//! that token, with the arguments the chart's Deployment gives it, copies a Secret, writes the
//! rule's status, holds its Lease and removes the copy when the rule goes, with no permission
//! error; and the same with `watchNamespaces`, where mimeo has Roles in the listed namespaces
//! only and no cluster-wide permission.
//!
//! Also the drift checks CI relies on: the chart's CRDs equal `crds/mimeo.yaml`, its appVersion
//! equals the crate's version, and the table of values in `docs/install.md` is the one generated
//! from the comments in `values.yaml` (`MIMEO_UPDATE_DOCS=1 cargo test --test install helm::` rewrites it).

use crate::harness;

use harness::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const NAMESPACE: &str = "mimeo-system";
const RELEASE: &str = "mimeo";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("charts/mimeo")
}

// ---------------------------------------------------------------------------------------------
// helm

/// The helm binary with a home of its own: no repository list, cache or registry login from the
/// machine leaks in, and nothing the tests do leaks out.
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new() -> Helm {
        Helm {
            bin: mimeo_envtest::helm().unwrap_or_else(|e| panic!("{e}")),
            home: tempfile::Builder::new().prefix("mimeo-helm-").tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            // Never the machine's cluster: commands that need one get --kubeconfig.
            .env("KUBECONFIG", self.home.path().join("no-kubeconfig"))
            .stdin(Stdio::null());
        command
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("running helm {args:?}: {e}"))
    }

    /// Runs helm and returns its stdout; panics with its stderr when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.output(args);
        assert!(
            output.status.success(),
            "helm {args:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs helm, expects it to fail, and returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let output = self.output(args);
        assert!(
            !output.status.success(),
            "helm {args:?} succeeded but should have failed:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).unwrap()
    }

    /// `helm template` of the chart as release `mimeo` in mimeo-system, parsed.
    fn template(&self, values: &[&str]) -> Vec<Value> {
        let chart = chart();
        let mut args = vec![
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
        ];
        args.extend_from_slice(values);
        parse_yaml_stream(&self.ok(&args))
    }
}

/// Every non-empty document of a multi-document YAML stream.
fn parse_yaml_stream(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{e}:\n{text}")))
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// The one object of this kind and name.
fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {kind} {name}, found {}",
        found.len()
    );
    found[0]
}

fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn args(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The verbs a role grants on `group`/`resource` (all of its rules together).
fn verbs(role: &Value, group: &str, resource: &str) -> Vec<String> {
    let mut verbs: Vec<String> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| {
            rule["apiGroups"].as_array().unwrap().iter().any(|g| g == group)
                && rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == resource)
        })
        .flat_map(|rule| rule["verbs"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

fn sorted(verbs: &[&str]) -> Vec<String> {
    let mut verbs: Vec<String> = verbs.iter().map(|v| v.to_string()).collect();
    verbs.sort();
    verbs
}

/// Every grant of a role, one line per API group and resource: `group/resource: verbs`, with
/// `[names]` after the resource when the rule is limited to names; sorted, so that two roles
/// compare whole.
fn grants(role: &Value) -> Vec<String> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    let mut grants = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let mut verbs = strings(&rule["verbs"]);
        verbs.sort();
        let names = match strings(&rule["resourceNames"]) {
            names if names.is_empty() => String::new(),
            names => format!("[{}]", names.join(",")),
        };
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                grants.push(format!("{group}/{resource}{names}: {}", verbs.join(",")));
            }
        }
    }
    grants.sort();
    grants
}

/// What the chart's Role in `namespace` grants with watchNamespaces: `kinds` are the
/// (group, resource) of the namespaced allowed kinds, `extra` any other grants.
fn watch_namespace_grants(namespace: &str, kinds: &[(&str, &str)], extra: &[&str]) -> Vec<String> {
    let all = sorted(ALL).join(",");
    let mut grants: Vec<String> = kinds
        .iter()
        .map(|(group, resource)| format!("{group}/{resource}: {all}"))
        .chain([
            format!("/namespaces[{namespace}]: get,watch"),
            "mimeo.dev/syncrules: get,list,patch,watch".to_owned(),
            "mimeo.dev/syncrules/status: patch".to_owned(),
            "events.k8s.io/events: create,patch".to_owned(),
        ])
        .chain(extra.iter().map(|g| g.to_string()))
        .collect();
    grants.sort();
    grants
}

/// With watchNamespaces: no ClusterRole or ClusterRoleBinding, one Role and one RoleBinding (to
/// the ServiceAccount) in each listed namespace granting `expected(namespace)`, no other Role but
/// the Lease's, and one --watch-namespace per namespace, in order.
fn check_watch_namespaces(docs: &[Value], namespaces: &[&str], expected: impl Fn(&str) -> Vec<String>) {
    let kinds = kinds(docs);
    for absent in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(
            !kinds.iter().any(|k| k == absent),
            "{absent} rendered with watchNamespaces"
        );
    }
    for namespace in namespaces {
        let in_namespace = |kind: &str| -> Vec<&Value> {
            docs.iter()
                .filter(|d| d["kind"] == kind && d["metadata"]["namespace"] == *namespace)
                .collect()
        };
        let roles = in_namespace("Role");
        assert_eq!(roles.len(), 1, "one Role in {namespace}");
        assert_eq!(roles[0]["metadata"]["name"], RELEASE);
        assert_eq!(grants(roles[0]), expected(namespace), "the Role in {namespace}");
        let bindings = in_namespace("RoleBinding");
        assert_eq!(bindings.len(), 1, "one RoleBinding in {namespace}");
        assert_eq!(
            bindings[0]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE})
        );
        assert_eq!(
            bindings[0]["subjects"],
            json!([{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}])
        );
    }
    let other_roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "RoleBinding")
        .filter(|d| !namespaces.iter().any(|ns| d["metadata"]["namespace"] == *ns))
        .collect();
    assert!(
        other_roles
            .iter()
            .all(|d| ["mimeo-leader-election", "mimeo-seal-key"]
                .contains(&d["metadata"]["name"].as_str().unwrap())
                && d["metadata"]["namespace"] == NAMESPACE),
        "only the Lease's and the seal key's Roles outside watchNamespaces: {other_roles:?}"
    );
    assert_eq!(
        other_roles.len(),
        4,
        "the Lease's and the seal key's Role and RoleBinding"
    );
    let watch_args: Vec<String> = args(docs)
        .into_iter()
        .filter(|a| a.starts_with("--watch-namespace"))
        .collect();
    let wanted: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("--watch-namespace={ns}"))
        .collect();
    assert_eq!(watch_args, wanted);
}

const ALL: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete"];
const READ: &[&str] = &["get", "list", "watch"];

// ---------------------------------------------------------------------------------------------
// drift checks

#[test]
fn the_chart_crds_are_the_generated_crds() {
    let generated = std::fs::read(repo().join("crds/mimeo.yaml")).unwrap();
    let in_chart = std::fs::read(chart().join("files/crds.yaml")).unwrap();
    assert!(
        generated == in_chart,
        "charts/mimeo/files/crds.yaml differs from crds/mimeo.yaml (generated by `mimeo crds`): \
         run `cp crds/mimeo.yaml charts/mimeo/files/crds.yaml` and commit it"
    );
}

#[test]
fn the_chart_app_version_is_the_crate_version() {
    let chart: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap()).unwrap();
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "charts/mimeo/Chart.yaml's appVersion (the default image tag) must be the version in Cargo.toml"
    );
}

const TABLE_BEGIN: &str = "<!-- BEGIN VALUES: generated from the comments in charts/mimeo/values.yaml; \
                           MIMEO_UPDATE_DOCS=1 cargo test --test install helm:: rewrites it -->";
const TABLE_END: &str = "<!-- END VALUES -->";

#[test]
fn the_values_table_in_the_docs_is_current() {
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let table = values_table(&values);
    let path = repo().join("docs/install.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (docs.find(TABLE_BEGIN), docs.find(TABLE_END)) else {
        panic!("docs/install.md has no {TABLE_BEGIN} ... {TABLE_END} block");
    };
    let current = &docs[begin + TABLE_BEGIN.len()..end];
    let wanted = format!("\n{table}");
    if current == wanted {
        return;
    }
    if std::env::var_os("MIMEO_UPDATE_DOCS").is_some() {
        let updated = format!("{}{wanted}{}", &docs[..begin + TABLE_BEGIN.len()], &docs[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "the table of values in docs/install.md is out of date with charts/mimeo/values.yaml: \
         run `MIMEO_UPDATE_DOCS=1 cargo test --test install the_values_table` and commit docs/install.md"
    );
}

/// The Markdown table of every value in values.yaml: its dotted path, its default (JSON) and the
/// comment above it. Panics on a value without a comment.
fn values_table(values: &str) -> String {
    let parsed: Value = serde_yaml_ng::from_str(values).unwrap();
    let mut rows = vec![
        "| value | default | what it does |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    let mut comment: Vec<&str> = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in values.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            comment.push(text.trim());
            continue;
        }
        let Some((key, _)) = trimmed
            .split_once(':')
            .filter(|(key, _)| key.chars().all(|c| c.is_ascii_alphanumeric()) && !key.is_empty())
        else {
            // A list item or a continuation: part of the value above.
            comment.clear();
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        assert!(
            !comment.is_empty(),
            "charts/mimeo/values.yaml: {} has no comment above it",
            path.join(".")
        );
        let value = path.iter().fold(&parsed, |v, k| &v[*k]);
        let default = match value {
            Value::Object(map) if !map.is_empty() => String::new(),
            other => format!("`{}`", serde_json::to_string(other).unwrap()),
        };
        rows.push(format!(
            "| `{}` | {} | {} |",
            path.join("."),
            default.replace('|', "\\|"),
            // `<` would open an HTML tag in the rendered Markdown.
            comment.join(" ").replace('|', "\\|").replace('<', "&lt;")
        ));
        comment.clear();
    }
    rows.join("\n") + "\n"
}

// ---------------------------------------------------------------------------------------------
// lint and template

#[test]
fn helm_is_the_pinned_v3() {
    let version = Helm::new().ok(&["version", "--short"]);
    assert!(version.starts_with("v3."), "{version}");
}

/// Each switch of values.yaml, flipped on its own (and a few together), as `helm` arguments.
fn variants() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("defaults", vec![]),
        ("serviceMonitor", vec!["--set", "serviceMonitor.enabled=true"]),
        ("dashboard", vec!["--set", "dashboard.enabled=true"]),
        (
            "dashboardElsewhere",
            vec![
                "--set",
                "dashboard.enabled=true",
                "--set",
                "dashboard.namespace=monitoring",
                "--set",
                "dashboard.label=dashboards",
                "--set",
                "dashboard.labelValue=mimeo",
                "--set-json",
                r#"dashboard.annotations={"grafana_folder":"platform"}"#,
            ],
        ),
        (
            "prometheusRule",
            vec![
                "--set",
                "prometheusRule.enabled=true",
                "--set",
                "serviceMonitor.enabled=true",
                "--set-json",
                r#"prometheusRule.labels={"release":"kube-prometheus-stack"}"#,
                "--set-json",
                r#"prometheusRule.alertLabels={"team":"platform"}"#,
            ],
        ),
        (
            "networkPolicy",
            vec![
                "--set",
                "networkPolicy.enabled=true",
                "--set-json",
                r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
                "--set-json",
                r#"networkPolicy.egress=[{"to":[{"ipBlock":{"cidr":"10.0.0.0/8"}}]}]"#,
            ],
        ),
        (
            "podDisruptionBudget",
            vec!["--set", "podDisruptionBudget.enabled=true"],
        ),
        (
            "watchNamespaces",
            vec!["--set-json", r#"watchNamespaces=["platform","team-a"]"#],
        ),
        (
            "watchNamespacesOtherKinds",
            vec![
                "--set-json",
                r#"watchNamespaces=["team-a"]"#,
                "--set-json",
                r#"allowKinds=["Policy.kyverno.io","ClusterPolicy.kyverno.io",{"kind":"Widget","group":"example.com","resource":"widgets"},{"kind":"Gadget","group":"example.com","resource":"gadgets","namespaced":false}]"#,
            ],
        ),
        (
            "watchNamespacesWithoutSecretsAtAll",
            vec![
                "--set-json",
                r#"watchNamespaces=["platform","team-a"]"#,
                "--set-json",
                r#"allowKinds=["ConfigMap"]"#,
                "--set",
                "rbac.readSecrets=false",
            ],
        ),
        ("createNamespaces", vec!["--set", "rbac.createNamespaces=true"]),
        (
            "replicas2",
            vec!["--set", "replicas=2", "--set", "podDisruptionBudget.enabled=true"],
        ),
        (
            "extraKinds",
            vec![
                "--set-json",
                r#"allowKinds=["Secret",{"kind":"Widget","group":"example.com","resource":"widgets"},{"kind":"Gadget","group":"example.com","resource":"gadgets","namespaced":false},{"kind":"ServiceAccount","group":"","resource":"serviceaccounts"}]"#,
            ],
        ),
        (
            "withoutSecrets",
            vec!["--set-json", r#"allowKinds=["ConfigMap"]"#],
        ),
        (
            "nextTo",
            vec![
                "--set-json",
                r#"nextTo.kinds=["Cluster.clusters.openmcp.cloud",{"kind":"Widget","group":"example.com","resource":"widgets"}]"#,
            ],
        ),
        (
            "withoutSecretsAtAll",
            vec![
                "--set-json",
                r#"allowKinds=["ConfigMap"]"#,
                "--set",
                "rbac.readSecrets=false",
            ],
        ),
        (
            "withoutLeaderElection",
            vec!["--set", "leaderElection.enabled=false"],
        ),
        (
            "plugins",
            vec![
                "--set-json",
                r#"plugins.configMaps=[{"name":"my-plugins"},{"name":"team-b-plugins","directory":"team-b"}]"#,
                "--set",
                "plugins.oci.requireDigest=true",
                "--set",
                "plugins.oci.registryConfigSecret=registry-creds",
                "--set",
                "plugins.oci.registryConfigForSyncRules=true",
                "--set-json",
                r#"plugins.oci.allowedRegistries=["ghcr.io","registry.example.com:5000"]"#,
                "--set-json",
                r#"plugins.oci.insecureRegistries=["registry.example.com:5000"]"#,
                "--set-json",
                r#"plugins.oci.allowedNetworks=["10.96.0.0/12","fd00:10::/64"]"#,
                "--set-json",
                r#"plugins.oci.trustedRealms=["auth.docker.io"]"#,
                "--set",
                "plugins.oci.downloadConcurrency=6",
                "--set",
                "plugins.oci.downloadsPerNamespace=1",
                "--set-json",
                r#"plugins.oci.registryCAs=[{"configMap":"corp-ca"},{"configMap":"harbor-ca","key":"harbor.pem","registry":"harbor.example.com:8443"}]"#,
            ],
        ),
        (
            "bringYourOwn",
            vec![
                "--set",
                "rbac.create=false",
                "--set",
                "serviceAccount.create=false",
                "--set",
                "serviceAccount.name=mimeo-by-hand",
            ],
        ),
    ]
}

#[test]
fn lint_and_template_with_each_switch() {
    let helm = Helm::new();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for (name, values) in variants() {
        let mut lint = vec!["lint", "--strict", chart, "--namespace", NAMESPACE];
        lint.extend_from_slice(&values);
        helm.ok(&lint);
        let docs = helm.template(&values);
        check_variant(name, &docs);
    }
}

/// The grants a Markdown table of docs/install.md lists, as `grants` writes them, by the value of
/// its first column when `keyed` (the switch), else all under `""`. Columns: [switch,] API group
/// (`core` for the core group), resources, verbs, why.
fn documented_grants(header: &str, keyed: bool) -> std::collections::BTreeMap<String, Vec<String>> {
    let docs = std::fs::read_to_string(repo().join("docs/install.md")).unwrap();
    let start = docs
        .find(header)
        .unwrap_or_else(|| panic!("docs/install.md has no table {header:?}"));
    let mut tables: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let clean = |cell: &str| cell.trim().trim_matches('`').trim().to_owned();
    for line in docs[start..].lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let (key, cells) = match keyed {
            true => (cells[0].trim().to_owned(), &cells[1..]),
            false => (String::new(), &cells[..]),
        };
        let group = match clean(cells[0]).as_str() {
            "core" => String::new(),
            group => group.to_owned(),
        };
        let mut verbs: Vec<String> = cells[2].split(',').map(clean).collect();
        verbs.sort();
        let grants = tables.entry(key).or_default();
        for resource in cells[1].split(',').map(clean) {
            grants.push(format!("{group}/{resource}: {}", verbs.join(",")));
        }
    }
    tables.values_mut().for_each(|g| g.sort());
    tables
}

/// Grants as `group/resource: verb`, one a verb, so that grants split over rules compare whole.
fn one_verb_each(grants: &[String]) -> std::collections::BTreeSet<String> {
    grants
        .iter()
        .flat_map(|grant| {
            let (resource, verbs) = grant.split_once(": ").unwrap();
            verbs.split(',').map(move |verb| format!("{resource}: {verb}"))
        })
        .collect()
}

/// docs/install.md's RBAC tables say what the chart grants: with the defaults exactly the first
/// table; with each switch, on the resources its rows name, exactly those rows (plus the first
/// table's grants there, unless the switch takes a kind out of `allowKinds`), and nothing that
/// neither table lists.
#[test]
fn the_rbac_tables_in_the_docs_are_what_the_chart_grants() {
    let helm = Helm::new();
    let cluster_role = |docs: &[Value]| one_verb_each(&grants(find(docs, "ClusterRole", RELEASE)));
    let default = one_verb_each(
        &documented_grants("| API group | resources | verbs | why |", false)
            .remove("")
            .unwrap(),
    );
    assert_eq!(cluster_role(&helm.template(&[])), default, "the defaults");

    let switches = documented_grants("| switch | API group | resources | verbs | why |", true);
    let every_kind_but = |kind: &str| -> String {
        let values: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap()).unwrap();
        let kinds: Vec<&str> = values["allowKinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .filter(|k| *k != kind)
            .collect();
        format!("allowKinds={{{}}}", kinds.join(","))
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("ConfigMap not in `allowKinds`", vec![every_kind_but("ConfigMap")]),
        (
            "Secret not in `allowKinds` (with `rbac.readSecrets: true`, the default)",
            vec![every_kind_but("Secret")],
        ),
        (
            "`rbac.createNamespaces: true`",
            vec!["rbac.createNamespaces=true".into()],
        ),
        (
            "`nextTo.kinds: [Cluster.clusters.openmcp.cloud]`",
            vec!["nextTo.kinds={Cluster.clusters.openmcp.cloud}".into()],
        ),
        (
            "`inventories.openMCP: true`",
            vec!["inventories.openMCP=true".into()],
        ),
        (
            "`inventories.clusterAPI: true`",
            vec!["inventories.clusterAPI=true".into()],
        ),
        (
            "`inventories.clusterProfile.enabled: true`",
            vec![
                "inventories.clusterProfile.enabled=true".into(),
                "inventories.clusterProfile.providersConfigMap=providers".into(),
            ],
        ),
    ];
    let mut documented: Vec<&str> = switches.keys().map(String::as_str).collect();
    let mut checked: Vec<&str> = cases.iter().map(|(k, _)| *k).collect();
    documented.sort();
    checked.sort();
    assert_eq!(documented, checked, "each switch the docs list is checked here");
    let resource_of = |grant: &String| grant.split(": ").next().unwrap().to_owned();
    for (switch, sets) in &cases {
        let mut values = Vec::new();
        for set in sets {
            values.extend(["--set", set.as_str()]);
        }
        let rendered = cluster_role(&helm.template(&values));
        let rows = one_verb_each(&switches[*switch]);
        let named: std::collections::BTreeSet<String> = rows.iter().map(resource_of).collect();
        let on_named = |grants: &std::collections::BTreeSet<String>| -> std::collections::BTreeSet<String> {
            grants
                .iter()
                .filter(|g| named.contains(&resource_of(g)))
                .cloned()
                .collect()
        };
        let mut expected = rows.clone();
        if !switch.contains("allowKinds") {
            expected.extend(on_named(&default));
        }
        assert_eq!(
            on_named(&rendered),
            expected,
            "{switch}: the grants on the resources its rows name"
        );
        let unlisted: Vec<&String> = rendered
            .iter()
            .filter(|g| !default.contains(*g) && !rows.contains(*g))
            .collect();
        assert!(
            unlisted.is_empty(),
            "{switch}: granted but in neither table: {unlisted:?}"
        );
    }
}

/// The chart's Role in `namespace`.
fn find_role<'a>(docs: &'a [Value], namespace: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == namespace)
        .unwrap_or_else(|| panic!("no Role in {namespace}"))
}

/// What each variant must render.
fn check_variant(name: &str, docs: &[Value]) {
    let kinds = kinds(docs);
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    let args = args(docs);
    let has_arg = |arg: &str| args.iter().any(|a| a == arg);
    let deployment = find(docs, "Deployment", RELEASE);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    // Whatever the switches, the pod is locked down the same way.
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"], true,
        "{name}"
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"], false,
        "{name}"
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"]),
        "{name}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{name}"
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"], "/healthz",
        "{name}"
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"], "/readyz",
        "{name}"
    );
    assert!(
        has_arg("--plugin-cache-dir=/var/cache/mimeo/plugins"),
        "{name}: {args:?}"
    );
    assert!(
        has_arg("--artifact-cache-dir=/var/cache/mimeo/artifacts"),
        "{name}: {args:?}"
    );
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"),
        "{name}: {env:?}"
    );
    assert!(kinds.contains(&"Service".to_owned()), "{name}");

    // The dashboard and the alerts are rendered only when switched on.
    let dashboards = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "mimeo-dashboard")
        .count();
    assert_eq!(dashboards, usize::from(name.starts_with("dashboard")), "{name}");
    assert_eq!(
        count("PrometheusRule"),
        usize::from(name == "prometheusRule"),
        "{name}"
    );

    let cluster_role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == RELEASE);
    match name {
        "defaults" => {
            let role = cluster_role.unwrap();
            assert_eq!(verbs(role, "", "secrets"), sorted(ALL));
            assert_eq!(verbs(role, "", "configmaps"), sorted(ALL));
            assert_eq!(verbs(role, "kyverno.io", "policies"), sorted(ALL));
            assert_eq!(verbs(role, "kyverno.io", "clusterpolicies"), sorted(READ));
            assert_eq!(verbs(role, "", "namespaces"), sorted(READ));
            assert_eq!(verbs(role, "", "pods"), Vec::<String>::new());
            assert_eq!(
                verbs(role, "policies.kyverno.io", "policyexceptions"),
                Vec::<String>::new()
            );
            for kind in [
                "Secret",
                "ConfigMap",
                "Policy.kyverno.io",
                "ClusterPolicy.kyverno.io",
            ] {
                assert!(has_arg(&format!("--allow-kind={kind}")), "{args:?}");
            }
            for kind in mimeo::sync::kinds::CEL_POLICY_KINDS {
                assert!(
                    has_arg(&format!("--allow-kind={kind}.policies.kyverno.io")),
                    "{args:?}"
                );
                let plural = format!("{}ies", kind.to_lowercase().trim_end_matches('y'));
                let expected = if kind.starts_with("Namespaced") {
                    sorted(ALL)
                } else {
                    sorted(READ)
                };
                assert_eq!(verbs(role, "policies.kyverno.io", &plural), expected, "{kind}");
            }
            let allowed = args.iter().filter(|a| a.starts_with("--allow-kind=")).count();
            assert_eq!(
                allowed,
                mimeo::sync::kinds::default_allowed_kinds().len(),
                "{args:?}"
            );
            assert!(has_arg("--leader-elect"), "{args:?}");
            assert!(has_arg("--leader-elect-namespace=mimeo-system"), "{args:?}");
            assert!(has_arg("--leader-elect-lease-name=mimeo"), "{args:?}");
            assert!(has_arg("--leader-elect-lease-seconds=15"), "{args:?}");
            assert!(has_arg("--http-addr=0.0.0.0:8080"), "{args:?}");
            assert!(has_arg("--plugin-dir=/plugins"), "{args:?}");
            assert!(
                !args.iter().any(|a| a.starts_with("--watch-namespace")),
                "{args:?}"
            );
            assert!(
                !args.iter().any(|a| a.starts_with("--next-to-kinds")),
                "nextTo follows no kind by default: {args:?}"
            );
            assert!(
                !args.iter().any(|a| a.starts_with("--plugin-registry-config")),
                "no controller credentials, for SyncRules or any: {args:?}"
            );
            let lease = find(docs, "Role", "mimeo-leader-election");
            assert_eq!(lease["metadata"]["namespace"], NAMESPACE);
            assert_eq!(lease["rules"][1]["resourceNames"], json!(["mimeo"]));
            assert_eq!(deployment["spec"]["replicas"], 1);
            assert_eq!(
                container["image"],
                format!("ghcr.io/mimeo-dev/mimeo:{}", env!("CARGO_PKG_VERSION"))
            );
            for absent in [
                "ServiceMonitor",
                "NetworkPolicy",
                "PodDisruptionBudget",
                "PrometheusRule",
            ] {
                assert_eq!(count(absent), 0, "{absent} rendered by default");
            }
            assert!(pod.get("affinity").is_none(), "{pod}");
        }
        "dashboard" | "dashboardElsewhere" => {
            let map = find(docs, "ConfigMap", "mimeo-dashboard");
            let (namespace, label, value) = match name {
                "dashboard" => (NAMESPACE, "grafana_dashboard", "1"),
                _ => ("monitoring", "dashboards", "mimeo"),
            };
            assert_eq!(map["metadata"]["namespace"], namespace);
            assert_eq!(map["metadata"]["labels"][label], value, "{map}");
            if name == "dashboardElsewhere" {
                assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "platform");
            }
            let rendered: Value = serde_json::from_str(map["data"]["mimeo.json"].as_str().unwrap()).unwrap();
            let file: Value = serde_json::from_str(
                &std::fs::read_to_string(chart().join("dashboards/mimeo.json")).unwrap(),
            )
            .unwrap();
            assert!(
                rendered == file,
                "the ConfigMap holds dashboards/mimeo.json as it is"
            );
        }
        "prometheusRule" => {
            let rule = find(docs, "PrometheusRule", RELEASE);
            assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus-stack");
            let alerts = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
            let operator = std::fs::read_to_string(repo().join("docs/operator.md")).unwrap();
            for alert in alerts {
                assert_eq!(alert["labels"]["team"], "platform", "{alert}");
                let name = alert["alert"].as_str().unwrap();
                let runbook = alert["annotations"]["runbook_url"].as_str().unwrap();
                let anchor = name.to_lowercase();
                assert!(
                    runbook.ends_with(&format!("docs/operator.md#{anchor}")),
                    "{runbook}"
                );
                assert!(
                    operator.lines().any(|l| l == format!("#### {name}")),
                    "docs/operator.md has no runbook section #### {name}"
                );
                assert!(
                    alert["expr"]
                        .as_str()
                        .unwrap()
                        .contains(r#"job="mimeo", namespace="mimeo-system""#),
                    "{alert}"
                );
            }
        }
        "serviceMonitor" => {
            let monitor = find(docs, "ServiceMonitor", RELEASE);
            assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http");
            assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
        }
        "networkPolicy" => {
            let policy = find(docs, "NetworkPolicy", RELEASE);
            assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
            assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "http");
            assert_eq!(
                policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                "monitoring"
            );
            assert_eq!(
                policy["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"],
                "10.0.0.0/8"
            );
        }
        "podDisruptionBudget" => {
            let pdb = find(docs, "PodDisruptionBudget", RELEASE);
            assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        }
        "watchNamespaces" => {
            // Roles only: no cluster-wide permission at all. In each listed namespace the
            // allowed namespaced kinds (read and written), a GET of the namespace itself, its
            // SyncRules and their status, and events; ClusterPolicies (cluster-scoped) nothing.
            assert!(cluster_role.is_none());
            check_watch_namespaces(docs, &["platform", "team-a"], |ns| {
                watch_namespace_grants(
                    ns,
                    &[
                        ("", "secrets"),
                        ("", "configmaps"),
                        ("kyverno.io", "policies"),
                        ("policies.kyverno.io", "namespacedvalidatingpolicies"),
                        ("policies.kyverno.io", "namespacedmutatingpolicies"),
                        ("policies.kyverno.io", "namespacedgeneratingpolicies"),
                        ("policies.kyverno.io", "namespaceddeletingpolicies"),
                        ("policies.kyverno.io", "namespacedimagevalidatingpolicies"),
                    ],
                    &[],
                )
            });
            let role = find_role(docs, "team-a");
            assert_eq!(verbs(role, "", "namespaces"), sorted(&["get", "watch"]));
            let namespaces = role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["resources"] == json!(["namespaces"]))
                .unwrap();
            assert_eq!(namespaces["resourceNames"], json!(["team-a"]));
            assert_eq!(verbs(role, "kyverno.io", "clusterpolicies"), Vec::<String>::new());
            assert_eq!(verbs(role, "mimeo.dev", "clustersyncrules"), Vec::<String>::new());
            assert_eq!(verbs(role, "mimeo.dev", "remoteclusters"), Vec::<String>::new());
            assert_eq!(
                verbs(role, "apiextensions.k8s.io", "customresourcedefinitions"),
                Vec::<String>::new()
            );
        }
        "watchNamespacesOtherKinds" => {
            // Secret and ConfigMap are not allowed: still a GET of pluginPullSecrets, and GET and
            // a watch by name of the ConfigMaps of configmap:// plugins of the namespace's rules. Cluster-scoped kinds get nothing.
            check_watch_namespaces(docs, &["team-a"], |ns| {
                watch_namespace_grants(
                    ns,
                    &[("kyverno.io", "policies"), ("example.com", "widgets")],
                    &["/secrets: get", "/configmaps: get,list,watch"],
                )
            });
            for kind in [
                "Policy.kyverno.io",
                "ClusterPolicy.kyverno.io",
                "Widget.example.com",
                "Gadget.example.com",
            ] {
                assert!(has_arg(&format!("--allow-kind={kind}")), "{args:?}");
            }
        }
        "watchNamespacesWithoutSecretsAtAll" => {
            check_watch_namespaces(docs, &["platform", "team-a"], |ns| {
                watch_namespace_grants(ns, &[("", "configmaps")], &[])
            });
        }
        "createNamespaces" => {
            assert_eq!(
                verbs(cluster_role.unwrap(), "", "namespaces"),
                sorted(&["get", "list", "watch", "create"])
            );
        }
        "replicas2" => {
            assert_eq!(deployment["spec"]["replicas"], 2);
            assert!(has_arg("--leader-elect"), "{args:?}");
            assert_eq!(
                pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
                    ["topologyKey"],
                "kubernetes.io/hostname"
            );
            find(docs, "PodDisruptionBudget", RELEASE);
        }
        "extraKinds" => {
            let role = cluster_role.unwrap();
            assert_eq!(verbs(role, "example.com", "widgets"), sorted(ALL));
            assert_eq!(verbs(role, "example.com", "gadgets"), sorted(READ));
            assert_eq!(verbs(role, "", "serviceaccounts"), sorted(ALL));
            assert_eq!(verbs(role, "", "secrets"), sorted(ALL));
            // Not allowed, but configmap:// plugins are still read, their ConfigMaps watched.
            assert_eq!(verbs(role, "", "configmaps"), sorted(&["get", "list", "watch"]));
            assert_eq!(verbs(role, "kyverno.io", "policies"), Vec::<String>::new());
            for kind in [
                "Secret",
                "Widget.example.com",
                "Gadget.example.com",
                "ServiceAccount",
            ] {
                assert!(has_arg(&format!("--allow-kind={kind}")), "{args:?}");
            }
            assert_eq!(args.iter().filter(|a| a.starts_with("--allow-kind")).count(), 4);
        }
        "nextTo" => {
            let role = cluster_role.unwrap();
            // Read only, and only the kinds listed.
            assert_eq!(verbs(role, "clusters.openmcp.cloud", "clusters"), sorted(READ));
            assert_eq!(verbs(role, "example.com", "widgets"), sorted(READ));
            assert_eq!(
                verbs(role, "helm.toolkit.fluxcd.io", "helmreleases"),
                Vec::<String>::new()
            );
            let next_to: Vec<&String> = args.iter().filter(|a| a.starts_with("--next-to-kinds")).collect();
            assert_eq!(
                next_to,
                [
                    "--next-to-kinds=Cluster.clusters.openmcp.cloud",
                    "--next-to-kinds=Widget.example.com"
                ]
            );
        }
        "withoutSecrets" => {
            let role = cluster_role.unwrap();
            assert_eq!(verbs(role, "", "secrets"), sorted(READ));
            assert_eq!(verbs(role, "", "configmaps"), sorted(ALL));
        }
        "withoutSecretsAtAll" => {
            assert_eq!(verbs(cluster_role.unwrap(), "", "secrets"), Vec::<String>::new());
        }
        "withoutLeaderElection" => {
            assert!(!args.iter().any(|a| a.starts_with("--leader-elect")), "{args:?}");
            let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Role").collect();
            assert!(
                roles.len() == 1 && roles[0]["metadata"]["name"] == "mimeo-seal-key",
                "no Lease Role without leader election, only the seal key's: {roles:?}"
            );
        }
        "plugins" => {
            let mounts: Vec<&str> = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["mountPath"].as_str().unwrap())
                .collect();
            assert!(mounts.contains(&"/plugins/my-plugins"), "{mounts:?}");
            assert!(mounts.contains(&"/plugins/team-b"), "{mounts:?}");
            assert!(mounts.contains(&"/etc/mimeo/registry"), "{mounts:?}");
            assert!(has_arg("--plugin-require-digest"), "{args:?}");
            assert!(
                has_arg("--plugin-registry-config=/etc/mimeo/registry/config.json"),
                "{args:?}"
            );
            assert!(has_arg("--plugin-registry-config-for-sync-rules"), "{args:?}");
            assert!(
                has_arg("--plugin-allowed-registry=registry.example.com:5000"),
                "{args:?}"
            );
            assert!(
                has_arg("--plugin-insecure-registry=registry.example.com:5000"),
                "{args:?}"
            );
            for arg in [
                "--registry-allowed-network=10.96.0.0/12",
                "--registry-allowed-network=fd00:10::/64",
                "--registry-trusted-realm=auth.docker.io",
                "--plugin-download-concurrency=6",
                "--plugin-downloads-per-namespace=1",
            ] {
                assert!(has_arg(arg), "{arg}: {args:?}");
            }
            assert!(
                has_arg("--plugin-registry-ca=/etc/mimeo/registry-ca/0/ca.crt"),
                "{args:?}"
            );
            assert!(
                has_arg("--plugin-registry-ca=harbor.example.com:8443=/etc/mimeo/registry-ca/1/ca.crt"),
                "{args:?}"
            );
            assert!(mounts.contains(&"/etc/mimeo/registry-ca/1"), "{mounts:?}");
            let volumes = pod["volumes"].to_string();
            assert!(
                volumes.contains("team-b-plugins") && volumes.contains("registry-creds"),
                "{volumes}"
            );
            let harbor = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "registry-ca-1")
                .unwrap_or_else(|| panic!("{volumes}"));
            assert_eq!(
                harbor["configMap"],
                json!({"name": "harbor-ca", "items": [{"key": "harbor.pem", "path": "ca.crt"}]})
            );
            let corp = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "registry-ca-0")
                .unwrap_or_else(|| panic!("{volumes}"));
            assert_eq!(corp["configMap"]["items"][0]["key"], "ca.crt");
        }
        "bringYourOwn" => {
            for absent in [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
            ] {
                assert_eq!(count(absent), 0, "{absent} rendered with rbac.create=false");
            }
            assert_eq!(pod["serviceAccountName"], "mimeo-by-hand");
        }
        other => panic!("no checks for variant {other}"),
    }
}

#[test]
fn values_of_the_wrong_type_fail_with_the_schemas_message() {
    let helm = Helm::new();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--set", "replicas=two"],
            &["replicas", "got string, want integer"],
        ),
        (
            &["--set", "leaderElection.enabled=maybe"],
            &["leaderElection/enabled", "got string, want boolean"],
        ),
        (
            &["--set-json", r#"allowKinds="Secret""#],
            &["allowKinds", "got string, want array"],
        ),
        (
            &["--set", "logFormat=xml"],
            &["logFormat", "value must be one of"],
        ),
        (&["--set", "httpPort=0"], &["httpPort", "minimum"]),
        (
            &["--set", "dashboard.enabled=yes"],
            &["dashboard/enabled", "got string, want boolean"],
        ),
        (&["--set", "dashboard.label="], &["dashboard/label", "minLength"]),
        (
            &["--set-json", r#"prometheusRule.alertLabels={"team":7}"#],
            &["prometheusRule/alertLabels/team", "got number, want string"],
        ),
        (
            &["--set", "replica=2"],
            &["additional properties 'replica' not allowed"],
        ),
        (
            &[
                "--set-json",
                r#"allowKinds=[{"kind":"Widget","group":"example.com"}]"#,
            ],
            &["allowKinds", "resource"],
        ),
        (
            &["--set-json", r#"watchNamespaces=["Team_A"]"#],
            &["/watchNamespaces/0", "does not match pattern"],
        ),
        (
            &["--set-json", r#"watchNamespaces=["team-a","team-a"]"#],
            &["/watchNamespaces", "are equal"],
        ),
        (
            &[
                "--set-json",
                &format!(r#"watchNamespaces=["{}"]"#, "a".repeat(64)),
            ],
            &["/watchNamespaces/0", "maxLength"],
        ),
        (
            &["--set-json", r#"plugins.oci.registryCAs=[{"key":"ca.crt"}]"#],
            &["/plugins/oci/registryCAs/0", "missing property 'configMap'"],
        ),
        (
            &[
                "--set-json",
                r#"plugins.oci.registryCAs=[{"configMap":"ca","registry":"https://harbor.example.com"}]"#,
            ],
            &["/plugins/oci/registryCAs/0/registry", "does not match pattern"],
        ),
    ];
    for (values, messages) in cases {
        let mut args = vec!["template", RELEASE, chart];
        args.extend_from_slice(values);
        let stderr = helm.fails(&args);
        assert!(
            stderr.contains("values don't meet the specifications of the schema"),
            "{values:?}: {stderr}"
        );
        for message in *messages {
            assert!(
                stderr.contains(message),
                "{values:?}: no {message:?} in: {stderr}"
            );
        }
    }
    // What the schema cannot say, the templates refuse with a message of their own.
    let refused: &[(&[&str], &str)] = &[
        (
            &["--set-json", r#"allowKinds=["Widget.example.com"]"#],
            "the chart does not know the kind \"Widget.example.com\"",
        ),
        (
            &["--set", "replicas=2", "--set", "leaderElection.enabled=false"],
            "replicas > 1 needs leaderElection.enabled: true",
        ),
        (
            &[
                "--set-json",
                r#"watchNamespaces=["a"]"#,
                "--set",
                "rbac.createNamespaces=true",
            ],
            "rbac.createNamespaces has no use with watchNamespaces",
        ),
        (
            &["--set-json", r#"allowKinds=["Secret","Secret"]"#],
            "allowKinds: Secret is listed twice",
        ),
        (
            &["--set", "prometheusRule.enabled=true"],
            "prometheusRule.enabled needs serviceMonitor.enabled, or prometheusRule.selector",
        ),
        (
            &["--set-json", r#"nextTo.kinds=["Secret"]"#],
            "nextTo.kinds: the chart does not know the kind \"Secret\"",
        ),
        (
            &[
                "--set-json",
                r#"nextTo.kinds=[{"kind":"Gadget","group":"example.com","resource":"gadgets","namespaced":false}]"#,
            ],
            "nextTo.kinds: Gadget is cluster-scoped",
        ),
        (
            &[
                "--set-json",
                r#"watchNamespaces=["a"]"#,
                "--set-json",
                r#"nextTo.kinds=["Cluster.clusters.openmcp.cloud"]"#,
            ],
            "nextTo.kinds has no use with watchNamespaces",
        ),
    ];
    for (values, message) in refused {
        let mut args = vec!["template", RELEASE, chart];
        args.extend_from_slice(values);
        let stderr = helm.fails(&args);
        assert!(
            stderr.contains(message),
            "{values:?}: no {message:?} in: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// against a real apiserver

/// Enough of the Prometheus Operator's ServiceMonitor CRD for the apiserver to accept one:
/// the real CRD is large and not vendored here; this checks the object's shape as far as the
/// chart's template is concerned (group, version, kind, namespaced) and keeps every field.
const SERVICE_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [selector, endpoints]
              x-kubernetes-preserve-unknown-fields: true
"#;

/// Enough of the Prometheus Operator's PrometheusRule CRD, as [`SERVICE_MONITOR_CRD`] is of its
/// ServiceMonitor: each rule names an alert or a record and an expr (what the operator requires).
const PROMETHEUS_RULE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                groups:
                  type: array
                  items:
                    type: object
                    required: [name, rules]
                    properties:
                      name: {type: string}
                      rules:
                        type: array
                        items:
                          type: object
                          required: [expr]
                          x-kubernetes-preserve-unknown-fields: true
                          properties:
                            alert: {type: string}
                            record: {type: string}
                            expr: {type: string}
"#;

async fn install_monitoring_crds(plane: &ControlPlane) {
    let dir = tempfile::tempdir().unwrap();
    let monitor = dir.path().join("servicemonitor.yaml");
    std::fs::write(&monitor, SERVICE_MONITOR_CRD).unwrap();
    let rules = dir.path().join("prometheusrule.yaml");
    std::fs::write(&rules, PROMETHEUS_RULE_CRD).unwrap();
    plane
        .install_crds(&[monitor, rules])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn create_namespaces(client: &Client, names: &[&str]) {
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
    }
}

/// The API of an object's kind, found by discovery as the apiserver serves it.
async fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), object["apiVersion"].as_str().unwrap().to_owned()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, object["kind"].as_str().unwrap());
    let (resource, capabilities): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{gvk:?} is not served: {e}"));
    match capabilities.scope {
        kube::discovery::Scope::Namespaced => {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_else(|| panic!("a namespaced object without metadata.namespace: {object}"));
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        kube::discovery::Scope::Cluster => {
            assert!(
                object["metadata"].get("namespace").is_none(),
                "cluster-scoped with a namespace: {object}"
            );
            Api::all_with(client.clone(), &resource)
        }
    }
}

/// Every object each variant renders passes a server-side apply dry run with strict field
/// validation: the apiserver's own schema, defaulting and validation (a misspelt field, a bad
/// probe, an invalid label or securityContext fails here, not at install time in a cluster).
#[tokio::test]
async fn every_rendered_object_passes_a_server_side_dry_run() {
    let h = harness::Harness::without_controller().await;
    install_monitoring_crds(&h.plane).await;
    create_namespaces(&h.client, &[NAMESPACE, "platform", "team-a", "monitoring"]).await;
    let helm = Helm::new();
    let params = PatchParams::apply("helm-test").dry_run().validation_strict();
    // The dry run has teeth: a field the apiserver does not know is refused.
    let bad = helm.template(&[
        "--set-json",
        r#"containerSecurityContext={"runAsNonRoot":true,"readOnlyRootFS":true}"#,
    ]);
    let deployment = find(&bad, "Deployment", RELEASE);
    let refused = api_for(&h.client, deployment)
        .await
        .patch(RELEASE, &params, &Patch::Apply(deployment))
        .await
        .expect_err("a misspelt field passes the dry run");
    assert!(refused.to_string().contains("readOnlyRootFS"), "{refused}");
    for (name, values) in variants() {
        for object in helm.template(&values) {
            let api = api_for(&h.client, &object).await;
            let object_name = object["metadata"]["name"].as_str().unwrap();
            api.patch(object_name, &params, &Patch::Apply(&object))
                .await
                .unwrap_or_else(|e| panic!("{name}: {} {object_name} refused: {e}", object["kind"]));
        }
    }
}

/// `helm install` into a fresh control plane; returns the objects it rendered and its notes.
fn install_with_notes(helm: &Helm, plane: &ControlPlane, values: &[&str]) -> (Vec<Value>, String) {
    let chart = chart();
    let kubeconfig = plane.kubeconfig_path().to_str().unwrap().to_owned();
    let mut args = vec![
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
    ];
    args.extend_from_slice(values);
    let out = helm.ok(&args);
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains("kind: SyncRule"),
        "NOTES.txt shows a first rule: {out}"
    );
    let notes = out[out.find("NOTES:").unwrap()..].to_owned();
    (helm.template(values), notes)
}

/// `helm install` into a fresh control plane; returns the objects it rendered.
fn install(helm: &Helm, plane: &ControlPlane, values: &[&str]) -> Vec<Value> {
    install_with_notes(helm, plane, values).0
}

/// A client that authenticates as the chart's ServiceAccount, with a token from the TokenRequest
/// API; also the kubeconfig that holds it, for `mimeo run`.
async fn service_account_client(plane: &ControlPlane, admin: &Client) -> (Client, String) {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(RELEASE, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("requesting a token for the ServiceAccount: {e}"))
        .status
        .expect("a TokenRequest answer has a status")
        .token;
    let kubeconfig_yaml = plane.token_kubeconfig_yaml(&token);
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig_yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    (Client::try_from(config).unwrap(), kubeconfig_yaml)
}

/// One access question: may the client's identity do `verb` on `resource` (`group/resource`
/// or `resource`, with `/subresource`), in `namespace` ("" for all or cluster-scoped), on the
/// object `name` ("" for any)?
struct Ask {
    verb: &'static str,
    resource: &'static str,
    namespace: &'static str,
    name: &'static str,
}

fn ask(verb: &'static str, resource: &'static str, namespace: &'static str, name: &'static str) -> Ask {
    Ask {
        verb,
        resource,
        namespace,
        name,
    }
}

async fn allowed(client: &Client, ask: &Ask) -> bool {
    let (group, rest) = match ask.resource.split_once('/') {
        Some((group, rest)) if group.contains('.') => (group, rest),
        _ => ("", ask.resource),
    };
    let (resource, subresource) = match rest.split_once('/') {
        Some((resource, sub)) => (resource, Some(sub.to_owned())),
        None => (rest, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(ask.verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource,
                namespace: (!ask.namespace.is_empty()).then(|| ask.namespace.to_owned()),
                name: (!ask.name.is_empty()).then(|| ask.name.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SelfSubjectAccessReview: {e}"));
    answer.status.expect("a review has a status").allowed
}

async fn check_access(client: &Client, can: &[Ask], cannot: &[Ask]) {
    let mut wrong = Vec::new();
    for a in can {
        if !allowed(client, a).await {
            wrong.push(format!(
                "CANNOT but should: {} {} ns={:?} name={:?}",
                a.verb, a.resource, a.namespace, a.name
            ));
        }
    }
    for a in cannot {
        if allowed(client, a).await {
            wrong.push(format!(
                "CAN but should not: {} {} ns={:?} name={:?}",
                a.verb, a.resource, a.namespace, a.name
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the chart's ServiceAccount:\n{}",
        wrong.join("\n")
    );
}

/// The chart installs into a fresh control plane (its CRDs included), and its ServiceAccount may
/// do what mimeo does and nothing else.
#[tokio::test]
async fn the_chart_installs_and_grants_least_privilege() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.client().await.unwrap();
    let helm = Helm::new();
    // A wrong type fails the install itself, before anything reaches the cluster.
    let kubeconfig = plane.kubeconfig_path().to_str().unwrap().to_owned();
    let chart = chart();
    let stderr = helm.fails(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "replicas=two",
    ]);
    assert!(
        stderr.contains("replicas") && stderr.contains("got string, want integer"),
        "{stderr}"
    );

    let rendered = install(&helm, &plane, &[]);
    // Every rendered object is in the cluster, and so are the CRDs from the chart's crds/.
    for object in &rendered {
        let api = api_for(&admin, object).await;
        api.get(object["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{} {} not installed: {e}",
                    object["kind"], object["metadata"]["name"]
                )
            });
    }
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(admin.clone());
    for crd in [
        "syncrules.mimeo.dev",
        "clustersyncrules.mimeo.dev",
        "remoteclusters.mimeo.dev",
    ] {
        crds.get(crd).await.unwrap_or_else(|e| panic!("{crd}: {e}"));
    }
    let deployment: Deployment = Api::namespaced(admin.clone(), NAMESPACE)
        .get(RELEASE)
        .await
        .unwrap();
    assert_eq!(deployment.spec.unwrap().replicas, Some(1));

    // No node runs pods here, so the pod the Deployment stands for is created as a dry run, in
    // the release namespace under the restricted Pod Security Standard: PodSecurity admission
    // refuses it if any of its settings is not allowed there.
    Api::<Namespace>::all(admin.clone())
        .patch(
            NAMESPACE,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
            ),
        )
        .await
        .unwrap();
    let template = &find(&rendered, "Deployment", RELEASE)["spec"]["template"];
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "mimeo-pod-check", "namespace": NAMESPACE, "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), NAMESPACE)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
        .unwrap_or_else(|e| {
            panic!("the chart's pod is refused under the restricted Pod Security Standard: {e}")
        });

    let (client, _) = service_account_client(&plane, &admin).await;
    check_access(
        &client,
        &[
            // Sources and copies of the default kinds, everywhere.
            ask("list", "secrets", "", ""),
            ask("watch", "secrets", "", ""),
            ask("patch", "secrets", "team-a", "db"),
            ask("create", "secrets", "team-a", ""),
            ask("delete", "secrets", "team-a", "db"),
            ask("list", "configmaps", "", ""),
            ask("watch", "configmaps", "", ""),
            ask("patch", "configmaps", "team-a", "ca"),
            ask("get", "configmaps", "plugins", "filters"),
            ask("patch", "kyverno.io/policies", "team-a", "p"),
            ask("watch", "kyverno.io/clusterpolicies", "", ""),
            ask(
                "patch",
                "policies.kyverno.io/namespacedvalidatingpolicies",
                "team-a",
                "p",
            ),
            ask(
                "delete",
                "policies.kyverno.io/namespacedmutatingpolicies",
                "team-a",
                "p",
            ),
            ask("watch", "policies.kyverno.io/validatingpolicies", "", ""),
            // Namespaces and discovery.
            ask("watch", "namespaces", "", ""),
            ask("list", "apiextensions.k8s.io/customresourcedefinitions", "", ""),
            // The rules, their status, RemoteClusters.
            ask("watch", "mimeo.dev/syncrules", "", ""),
            ask("patch", "mimeo.dev/syncrules", "platform", "r"),
            ask("patch", "mimeo.dev/syncrules/status", "platform", "r"),
            ask("patch", "mimeo.dev/clustersyncrules/status", "", "r"),
            ask("watch", "mimeo.dev/remoteclusters", "", ""),
            ask("patch", "mimeo.dev/remoteclusters/status", "", "c"),
            // Events.
            ask("create", "events.k8s.io/events", "platform", ""),
            ask("patch", "events.k8s.io/events", "platform", "e"),
            // Its Lease.
            ask("create", "coordination.k8s.io/leases", NAMESPACE, ""),
            ask("get", "coordination.k8s.io/leases", NAMESPACE, "mimeo"),
            ask("update", "coordination.k8s.io/leases", NAMESPACE, "mimeo"),
        ],
        &[
            ask("get", "pods", "team-a", ""),
            ask("list", "pods", "", ""),
            ask("create", "apps/deployments", NAMESPACE, ""),
            ask("delete", "namespaces", "", "team-a"),
            ask("create", "namespaces", "", ""),
            ask("update", "coordination.k8s.io/leases", NAMESPACE, "someone-else"),
            ask("get", "coordination.k8s.io/leases", NAMESPACE, "someone-else"),
            ask("update", "coordination.k8s.io/leases", "kube-system", "mimeo"),
            ask("create", "coordination.k8s.io/leases", "kube-system", ""),
            ask("delete", "coordination.k8s.io/leases", NAMESPACE, "mimeo"),
            ask("create", "kyverno.io/clusterpolicies", "", ""),
            ask("patch", "kyverno.io/clusterpolicies", "", "p"),
            ask("create", "policies.kyverno.io/validatingpolicies", "", ""),
            ask("patch", "policies.kyverno.io/deletingpolicies", "", "p"),
            // Not in the default allow-list: an exception exempts resources from policies.
            ask("create", "policies.kyverno.io/policyexceptions", "team-a", ""),
            ask("list", "kyverno.io/policyexceptions", "", ""),
            ask("delete", "mimeo.dev/syncrules", "platform", "r"),
            ask("create", "mimeo.dev/syncrules", "platform", ""),
            ask("update", "mimeo.dev/syncrules", "platform", "r"),
            ask("create", "mimeo.dev/remoteclusters", "", ""),
            ask("patch", "mimeo.dev/remoteclusters", "", "c"),
            ask("create", "serviceaccounts/token", NAMESPACE, "mimeo"),
            ask("create", "rbac.authorization.k8s.io/clusterrolebindings", "", ""),
            ask("escalate", "rbac.authorization.k8s.io/clusterroles", "", ""),
            ask("impersonate", "serviceaccounts", "", ""),
            ask(
                "delete",
                "apiextensions.k8s.io/customresourcedefinitions",
                "",
                "syncrules.mimeo.dev",
            ),
            ask("get", "events", "platform", "e"),
            // What the code does not use: core-group events (it writes events.k8s.io), and
            // patch on its Lease (it replaces it, with the resourceVersion read).
            ask("create", "events", "platform", ""),
            ask("patch", "events", "platform", "e"),
            ask("patch", "coordination.k8s.io/leases", NAMESPACE, "mimeo"),
        ],
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// mimeo run under the chart's RBAC

/// `mimeo run` as a child process, killed when dropped, logging to a file.
struct Controller {
    child: Child,
    log: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Starts `mimeo run` with the arguments of the chart's Deployment, authenticated by
/// `kubeconfig_yaml`: the pod's paths become temporary directories and the HTTP port a free
/// loopback one; POD_NAME and POD_NAMESPACE are set as the downward API would.
fn run_as_deployed(rendered: &[Value], kubeconfig_yaml: &str, pod_name: &str) -> Controller {
    let dir = tempfile::Builder::new()
        .prefix("mimeo-helm-run-")
        .tempdir()
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_yaml).unwrap();
    let cache = dir.path().join("cache");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args: Vec<String> = args(rendered)
        .into_iter()
        .filter(|a| !a.starts_with("--http-addr="))
        .map(|a| {
            a.replace("/var/cache/mimeo", cache.to_str().unwrap()).replace(
                "--plugin-dir=/plugins",
                &format!("--plugin-dir={}", plugins.display()),
            )
        })
        .chain([format!("--http-addr=127.0.0.1:{port}")])
        .collect();
    let log = dir.path().join("mimeo.log");
    let child = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(&args)
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", pod_name)
        .env("POD_NAMESPACE", NAMESPACE)
        .env_remove("MIMEO_ALLOW_KINDS")
        .env_remove("MIMEO_WATCH_NAMESPACE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("stdout.log")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("starting mimeo run");
    Controller {
        child,
        log,
        port,
        _dir: dir,
    }
}

/// The status code of `GET path` on 127.0.0.1:port.
async fn http_status(port: u16, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let head = String::from_utf8_lossy(&response);
    head.get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{head}"))
}

async fn apply(client: &Client, object: Value) {
    let api = api_for(client, &object).await;
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    api.patch(
        &name,
        &PatchParams::apply("helm-test").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

async fn rule_status(client: &Client, namespace: &str, name: &str) -> Option<Value> {
    let api = api_for(
        client,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"namespace": namespace}}),
    )
    .await;
    let rule = api.get_opt(name).await.unwrap()?;
    rule.data.get("status").cloned()
}

fn ready_reason(status: &Value) -> Option<(String, String)> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

async fn wait_for_copy(admin: &Client, controller: &Controller, namespace: &str, name: &str) -> Secret {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), namespace);
    let what = format!("the copy {namespace}/{name}");
    tokio::time::timeout(
        harness::WAIT,
        eventually(&what, || {
            let secrets = secrets.clone();
            async move { secrets.get_opt(name).await.unwrap() }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("no {what}; mimeo's log:\n{}", controller.log()))
}

/// The chart's Deployment arguments and RBAC run mimeo: it takes its Lease, copies a Secret,
/// writes the rule's status and events, and cleans the copy up when the rule is deleted, with no
/// permission error in its log.
#[tokio::test]
async fn mimeo_runs_with_the_chart_rbac() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.client().await.unwrap();
    let helm = Helm::new();
    let rendered = install(&helm, &plane, &[]);
    let (_, kubeconfig) = service_account_client(&plane, &admin).await;
    create_namespaces(&admin, &["platform"]).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-a", "annotations": {"mimeo.dev/accept-from": "platform"}}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "platform"},
               "stringData": {"password": "s3cret"}}),
    )
    .await;

    let controller = run_as_deployed(&rendered, &kubeconfig, "mimeo-7d9f-abcde");
    apply(
        &admin,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": "db", "namespace": "platform"},
               "spec": {"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "team-a"}]}}),
    )
    .await;
    let copy = wait_for_copy(&admin, &controller, "team-a", "db").await;
    assert_eq!(
        harness::secret_value(&copy, "password").as_deref(),
        Some("s3cret")
    );
    let status = tokio::time::timeout(
        harness::WAIT,
        eventually("the rule Ready=True", || {
            let admin = admin.clone();
            async move {
                rule_status(&admin, "platform", "db")
                    .await
                    .filter(|s| ready_reason(s) == Some(("True".into(), "Synced".into())))
            }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("the rule is not Ready; mimeo's log:\n{}", controller.log()));
    assert_eq!(status["copies"], "1/1", "{status}");
    assert_eq!(http_status(controller.port, "/readyz").await, 200);
    assert_eq!(http_status(controller.port, "/healthz").await, 200);

    // Its events on the rule were written (a refused event is only logged at debug level).
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), "platform");
    tokio::time::timeout(
        harness::WAIT,
        eventually("an event on the rule from this replica", || {
            let events = events.clone();
            async move {
                events
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .find(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("db")
                            && e.reporting_instance.as_deref() == Some("mimeo-7d9f-abcde")
                    })
            }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("no event; mimeo's log:\n{}", controller.log()));

    // It holds the Lease, as the pod it stands for.
    let lease: Lease = Api::namespaced(admin.clone(), NAMESPACE)
        .get("mimeo")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("mimeo-7d9f-abcde")
    );

    // Deleting the rule removes the copy (the finalizer, under the same RBAC).
    let rules = api_for(
        &admin,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"namespace": "platform"}}),
    )
    .await;
    rules.delete("db", &DeleteParams::default()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "team-a");
    tokio::time::timeout(
        harness::WAIT,
        eventually("the copy removed and the rule gone", || {
            let (secrets, rules) = (secrets.clone(), rules.clone());
            async move {
                let copy = secrets.get_opt("db").await.unwrap();
                let rule = rules.get_opt("db").await.unwrap();
                (copy.is_none() && rule.is_none()).then_some(())
            }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("the copy or the rule stayed; mimeo's log:\n{}", controller.log()));

    let log = controller.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a permission error in mimeo's log:\n{log}"
    );
}

/// The state of the copy in `namespace` in a rule's status, if the status lists it (as a copy
/// that is not in sync).
fn copy_state(status: &Value, namespace: &str) -> Option<String> {
    status["problems"]
        .as_array()?
        .iter()
        .find(|c| c["namespace"] == namespace)
        .and_then(|c| c["state"].as_str())
        .map(str::to_owned)
}

/// With watchNamespaces, mimeo runs with Roles only, no cluster-wide permission at all: it
/// reconciles the SyncRules of every listed namespace, writes copies only into listed
/// namespaces (a copy into an unlisted one is `NotWatched`, not attempted), sees a listed
/// namespace's consent annotation change at once (a watch of that one namespace), selects only
/// listed namespaces,
/// refuses rules that use other clusters, leaves the rules of unlisted namespaces alone, and
/// cleans up when a rule is deleted; its log holds no permission error.
#[tokio::test]
async fn mimeo_runs_with_watch_namespaces_rbac() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.client().await.unwrap();
    for (name, annotations, labels) in [
        (
            "platform",
            json!({"mimeo.dev/accept-from": "team-a"}),
            json!({"mimeo-test": "tenant"}),
        ),
        ("team-a", json!({"mimeo.dev/accept-from": "platform"}), json!({})),
        (
            "team-b",
            json!({"mimeo.dev/accept-from": "platform,team-a"}),
            json!({"mimeo-test": "tenant"}),
        ),
        ("team-c", json!({}), json!({})),
        ("other", json!({}), json!({})),
    ] {
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "annotations": annotations, "labels": labels}}),
        )
        .await;
    }
    let helm = Helm::new();
    let values = ["--set-json", r#"watchNamespaces=["platform","team-a","team-c"]"#];
    let (rendered, notes) = install_with_notes(&helm, &plane, &values);
    assert!(
        notes.contains("writes copies only in: platform, team-a, team-c"),
        "{notes}"
    );
    assert!(
        !kinds(&rendered).iter().any(|k| k.starts_with("Cluster")),
        "a cluster-wide grant with watchNamespaces: {:?}",
        kinds(&rendered)
    );
    let (client, kubeconfig) = service_account_client(&plane, &admin).await;
    check_access(
        &client,
        &[
            ask("get", "namespaces", "team-a", "team-a"),
            ask("watch", "namespaces", "team-a", "team-a"),
            ask("list", "secrets", "team-c", ""),
            ask("create", "secrets", "team-a", ""),
            ask("delete", "secrets", "platform", "x"),
            ask("watch", "mimeo.dev/syncrules", "team-c", ""),
            ask("patch", "mimeo.dev/syncrules/status", "platform", "r"),
            ask("create", "events.k8s.io/events", "team-a", ""),
            ask("update", "coordination.k8s.io/leases", NAMESPACE, "mimeo"),
        ],
        &[
            // Nothing cluster-wide.
            ask("list", "namespaces", "", ""),
            ask("get", "namespaces", "", "team-b"),
            ask("watch", "namespaces", "team-b", "team-b"),
            ask("list", "secrets", "", ""),
            ask("list", "mimeo.dev/syncrules", "", ""),
            ask("list", "mimeo.dev/clustersyncrules", "", ""),
            ask("list", "mimeo.dev/remoteclusters", "", ""),
            ask("list", "apiextensions.k8s.io/customresourcedefinitions", "", ""),
            ask("list", "kyverno.io/clusterpolicies", "", ""),
            // Nothing in an unlisted namespace.
            ask("get", "secrets", "team-b", "x"),
            ask("create", "secrets", "team-b", ""),
            ask("list", "mimeo.dev/syncrules", "other", ""),
            ask("patch", "mimeo.dev/syncrules/status", "other", "r"),
            ask("create", "events.k8s.io/events", "team-b", ""),
        ],
    )
    .await;

    for (namespace, name) in [("platform", "db"), ("team-a", "cfg"), ("other", "db")] {
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": namespace},
                   "stringData": {"value": "s3cret"}}),
        )
        .await;
    }
    let controller = run_as_deployed(&rendered, &kubeconfig, "mimeo-7d9f-abcde");
    let rule = |namespace: &str, name: &str, spec: Value| {
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    };
    apply(
        &admin,
        rule(
            "platform",
            "db",
            json!({"source": {"kind": "Secret", "name": "db"},
                   "targets": [{"namespace": "team-a"}, {"namespace": "team-b"}, {"namespace": "team-c"}]}),
        ),
    )
    .await;
    // A rule of another listed namespace, selecting namespaces by label: platform and team-b
    // carry the label, team-b is not listed, so it is not even considered.
    apply(
        &admin,
        rule(
            "team-a",
            "cfg",
            json!({"source": {"kind": "Secret", "name": "cfg"},
                   "targets": [{"namespaceSelector": {"matchLabels": {"mimeo-test": "tenant"}}}]}),
        ),
    )
    .await;
    apply(
        &admin,
        rule(
            "platform",
            "remote",
            json!({"source": {"kind": "Secret", "name": "db"},
                   "targets": [{"namespace": "platform", "name": "db-b", "cluster": "b"}]}),
        ),
    )
    .await;
    apply(
        &admin,
        rule(
            "other",
            "db",
            json!({"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "team-a"}]}),
        ),
    )
    .await;

    wait_for_copy(&admin, &controller, "team-a", "db").await;
    wait_for_copy(&admin, &controller, "platform", "cfg").await;
    let status = wait_for_status(&admin, &controller, "platform", "db", |s| {
        copy_state(s, "team-b").as_deref() == Some("NotWatched")
            && copy_state(s, "team-c").as_deref() == Some("NotAccepted")
    })
    .await;
    assert_eq!(status["copies"], "1/3", "{status}");
    let status = wait_for_status(&admin, &controller, "team-a", "cfg", |s| s["copies"] == "1/1").await;
    assert_eq!(copy_state(&status, "team-b"), None, "{status}");
    let status = wait_for_status(&admin, &controller, "platform", "remote", |s| {
        ready_reason(s) == Some(("False".into(), "RemoteClustersUnavailable".into()))
    })
    .await;
    let message = status["conditions"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("platform, team-a, team-c"), "{status}");

    // team-c accepts copies from platform: its namespace watch shows it at once.
    let annotated = std::time::Instant::now();
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-c", "annotations": {"mimeo.dev/accept-from": "platform"}}}),
    )
    .await;
    wait_for_copy(&admin, &controller, "team-c", "db").await;
    let seen_after = annotated.elapsed();
    println!("consent annotation to copy: {seen_after:?}");
    assert!(
        seen_after < Duration::from_secs(5),
        "the annotation took {seen_after:?}: is the namespace watched?"
    );
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "team-b");
    assert!(secrets.get_opt("db").await.unwrap().is_none());
    assert!(secrets.get_opt("cfg").await.unwrap().is_none());
    assert_eq!(
        rule_status(&admin, "other", "db").await,
        None,
        "a rule of an unlisted namespace was reconciled"
    );

    // Deleting the rule removes its copies in the listed namespaces, and the rule goes.
    let rules = api_for(
        &admin,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"namespace": "platform"}}),
    )
    .await;
    rules.delete("db", &Default::default()).await.unwrap();
    tokio::time::timeout(
        harness::WAIT,
        eventually("the rule and its copies are gone", || {
            let admin = admin.clone();
            let rules = rules.clone();
            async move {
                let a: Api<Secret> = Api::namespaced(admin.clone(), "team-a");
                let c: Api<Secret> = Api::namespaced(admin, "team-c");
                (rules.get_opt("db").await.unwrap().is_none()
                    && a.get_opt("db").await.unwrap().is_none()
                    && c.get_opt("db").await.unwrap().is_none())
                .then_some(())
            }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("the rule or a copy stayed; mimeo's log:\n{}", controller.log()));

    let log = controller.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a permission error in mimeo's log:\n{log}"
    );
}

async fn wait_for_status(
    admin: &Client,
    controller: &Controller,
    namespace: &str,
    name: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let what = format!("the status of {namespace}/{name}");
    let done = &done;
    tokio::time::timeout(
        harness::WAIT,
        eventually(&what, || async move {
            rule_status(admin, namespace, name).await.filter(|s| done(s))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{what} did not come; mimeo's log:\n{}", controller.log()))
}

async fn shard_holders(admin: &Client) -> Vec<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    let mut holders = Vec::new();
    for shard in 0..2 {
        let lease = leases.get_opt(&format!("mimeo-shard-2-{shard}")).await.unwrap();
        holders.push(lease.and_then(|l| l.spec?.holder_identity));
    }
    holders
}

/// replicas: 2 under the chart's RBAC: both replicas work, one shard of the rules each; when one
/// dies without releasing its shard, the other takes it over once it expires (an update of a
/// Lease it did not create) and does its work too.
#[tokio::test]
async fn a_second_replica_takes_over_under_the_chart_rbac() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.client().await.unwrap();
    let helm = Helm::new();
    let rendered = install(
        &helm,
        &plane,
        &["--set", "replicas=2", "--set", "leaderElection.leaseSeconds=3"],
    );
    let rendered_args = args(&rendered);
    assert!(
        rendered_args
            .iter()
            .any(|a| a == "--leader-elect-lease-seconds=3")
    );
    assert!(
        rendered_args.iter().any(|a| a == "--shards=2"),
        "{rendered_args:?}"
    );
    let (_, kubeconfig) = service_account_client(&plane, &admin).await;
    let mut first = run_as_deployed(&rendered, &kubeconfig, "mimeo-0");
    let second = run_as_deployed(&rendered, &kubeconfig, "mimeo-1");
    let mut held: Vec<Option<String>> = Vec::new();
    let shared = tokio::time::timeout(
        harness::WAIT,
        eventually("one shard for each replica", || {
            let admin = admin.clone();
            async move {
                let mut holders = shard_holders(&admin).await;
                holders.sort();
                (holders == [Some("mimeo-0".to_owned()), Some("mimeo-1".to_owned())]).then_some(holders)
            }
        }),
    )
    .await;
    if let Ok(holders) = shared {
        held = holders;
    }
    assert!(
        !held.is_empty(),
        "the replicas did not share the shards; logs:\n{}\n{}",
        first.log(),
        second.log()
    );

    // SIGKILL: mimeo-0's shard is not released; mimeo-1 waits for it to expire.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    tokio::time::timeout(
        harness::WAIT,
        eventually("mimeo-1 takes the other shard over", || {
            let admin = admin.clone();
            async move {
                let holders = shard_holders(&admin).await;
                holders
                    .iter()
                    .all(|h| h.as_deref() == Some("mimeo-1"))
                    .then_some(())
            }
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("mimeo-1 did not take over; its log:\n{}", second.log()));

    for name in ["platform", "team-a"] {
        apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
            "annotations": {"mimeo.dev/accept-from": "platform"}}}),
        )
        .await;
    }
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "platform"},
               "stringData": {"password": "s3cret"}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": "db", "namespace": "platform"},
               "spec": {"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "team-a"}]}}),
    )
    .await;
    wait_for_copy(&admin, &second, "team-a", "db").await;
    let log = second.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a permission error in mimeo-1's log:\n{log}"
    );
}

/// The install's notes say what runs: with several replicas every one works on its shards (none
/// stands by), and while the image is the default, that no image is published there.
#[tokio::test]
async fn the_notes_say_what_runs_and_which_image_to_set() {
    let helm = Helm::new();
    let chart = chart();
    // Helm asks a cluster for its version even in a client-side dry run.
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = plane.kubeconfig_path().to_str().unwrap().to_owned();
    let notes = |values: &[&str]| {
        let mut args = vec![
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "--dry-run=client",
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &kubeconfig,
        ];
        args.extend_from_slice(values);
        let out = helm.ok(&args);
        out[out.find("NOTES:").expect("notes")..].to_owned()
    };
    let three = notes(&["--set", "replicas=3"]);
    assert!(three.contains("3 replicas, all working"), "{three}");
    assert!(!three.contains("stand by"), "{three}");
    assert!(
        three.contains("No image is published at ghcr.io/mimeo-dev/mimeo"),
        "{three}"
    );
    let own = notes(&["--set", "image.repository=registry.example.com/platform/mimeo"]);
    assert!(!own.contains("No image is published"), "{own}");
    assert!(!own.contains("replicas, all working"), "one replica: {own}");
}

/// The last commit whose chart kept the CRDs in `crds/` (chart 0.1.0): what a user upgrades from.
const CHART_0_1_0: &str = "ac8c8de";

/// Chart 0.1.0 as it was, from the repository's history.
fn chart_0_1_0(into: &std::path::Path) -> PathBuf {
    let archive = Command::new("git")
        .args(["archive", CHART_0_1_0, "charts/mimeo"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        archive.status.success(),
        "chart 0.1.0 is read from the repository's history (commit {CHART_0_1_0}); a shallow clone \
         lacks it: {}",
        String::from_utf8_lossy(&archive.stderr)
    );
    let mut tar = Command::new("tar")
        .args(["-x", "-C", into.to_str().unwrap()])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
    assert!(tar.wait().unwrap().success());
    into.join("charts/mimeo")
}

/// The printer columns of a CRD, by name.
async fn columns(admin: &Client, crd: &str) -> Vec<(String, String)> {
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(admin.clone());
    let crd = crds.get(crd).await.unwrap();
    crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.json_path.clone()))
        .collect()
}

/// issue 47: `helm upgrade` upgrades the CRDs. From chart 0.1.0 (CRDs in `crds/`, installed once)
/// with a rule in place, `helm upgrade` alone refuses the CRDs it does not own and says so;
/// `--take-ownership` takes them into the release and upgrades them (the Source column reads
/// the new status field), the rule untouched. `helm uninstall` then keeps the CRDs and the rule
/// (`helm.sh/resource-policy: keep`); `crds.install=false` renders none.
#[tokio::test]
async fn helm_upgrade_upgrades_the_crds_and_uninstall_keeps_them() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.client().await.unwrap();
    let helm = Helm::new();
    let old = tempfile::tempdir().unwrap();
    let old_chart = chart_0_1_0(old.path());
    let kubeconfig = plane.kubeconfig_path().to_str().unwrap().to_owned();
    let release = |verb: &str, chart: &std::path::Path, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            verb,
            RELEASE,
            chart.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            NAMESPACE,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        helm.ok(&args)
    };
    run(release("install", &old_chart, &["--create-namespace"]));
    assert_eq!(
        columns(&admin, "syncrules.mimeo.dev")
            .await
            .iter()
            .find(|(n, _)| n == "Source")
            .map(|(_, p)| p.as_str()),
        Some(".spec.source.name"),
        "0.1.0's CRDs"
    );
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "kept", "namespace": "default"},
                "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "default", "name": "copy"}]}}),
    );

    let args = release("upgrade", &chart(), &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = helm.fails(&args);
    assert!(
        refused.contains("syncrules.mimeo.dev") && refused.contains("exists and cannot be imported"),
        "{refused}"
    );
    run(release("upgrade", &chart(), &["--take-ownership"]));
    assert_eq!(
        columns(&admin, "syncrules.mimeo.dev")
            .await
            .iter()
            .find(|(n, _)| n == "Source")
            .map(|(_, p)| p.as_str()),
        Some(".status.source"),
        "the CRDs upgraded"
    );
    let rules = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("mimeo.dev", "v1alpha1", "SyncRule"),
            "syncrules",
        ),
    );
    rules.get("kept").await.expect("the rule survives the upgrade");
    // A second upgrade needs no flag: the CRDs are the release's now.
    run(release("upgrade", &chart(), &[]));

    run(vec![
        "uninstall".into(),
        RELEASE.into(),
        "--kubeconfig".into(),
        kubeconfig.clone(),
        "--namespace".into(),
        NAMESPACE.into(),
    ]);
    columns(&admin, "syncrules.mimeo.dev").await;
    rules
        .get("kept")
        .await
        .expect("the CRDs kept, and the rule with them");

    let none = helm.template(&["--set", "crds.install=false"]);
    assert!(
        !kinds(&none).iter().any(|k| k == "CustomResourceDefinition"),
        "{:?}",
        kinds(&none)
    );
    let with = helm.template(&[]);
    let crds: Vec<&Value> = with
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 5, "every CRD of crds/mimeo.yaml");
    for crd in crds {
        assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    }
    let unkept = helm.template(&["--set", "crds.keep=false"]);
    assert!(
        unkept
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .all(|d| d["metadata"]["annotations"]["helm.sh/resource-policy"].is_null())
    );
}
