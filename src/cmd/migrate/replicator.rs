//! kubernetes-replicator (mittwald, v2): push by `replicate-to` (names or regular expressions)
//! and `replicate-to-matching` (a label selector) on the source, pull by `replicate-from` on the
//! copy, allowed by `replication-allowed` and `replication-allowed-namespaces` on the source.
//!
//! Its semantics, from its source: a pattern is a regular expression made strict by adding `^`
//! and `$` where missing (so `a|b` is `^a|b$`, as there); the source's own namespace never gets a
//! copy; a copy carries the source's labels unless `strip-labels` is `true`.

use super::model::{Inventory, Migration, Object, Provenance, Tool};
use super::rules::{entries, places, selected, selector_target, sync_rule};
use super::selector::Selector;
use regex::Regex;
use serde_json::{Value, json};

const PREFIX: &str = "replicator.v1.mittwald.de/";
const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
const ALLOWED: &str = "replicator.v1.mittwald.de/replication-allowed";
const ALLOWED_NAMESPACES: &str = "replicator.v1.mittwald.de/replication-allowed-namespaces";
const STRIP_LABELS: &str = "replicator.v1.mittwald.de/strip-labels";
const KEEP_OWNER_REFERENCES: &str = "replicator.v1.mittwald.de/keep-owner-references";
/// The marks the replicator leaves on every copy it writes.
pub const REPLICATED_AT: &str = "replicator.v1.mittwald.de/replicated-at";
const REPLICATED_FROM_VERSION: &str = "replicator.v1.mittwald.de/replicated-from-version";

/// A pushed copy's evidence: the replicator's marks, and no `replicate-from` naming another
/// source. (The replicator records no source on a pushed copy; its marks can only have been
/// written by the replicator or by someone who may write that namespace.)
fn pushed_copy(copy: &Object) -> Option<String> {
    if copy.annotations.contains_key(REPLICATE_FROM) {
        return None;
    }
    [REPLICATED_AT, REPLICATED_FROM_VERSION]
        .into_iter()
        .find(|mark| copy.annotations.contains_key(*mark))
        .map(str::to_owned)
}

/// A pattern as the replicator compiles it.
fn strict(pattern: &str) -> Result<Regex, regex::Error> {
    let mut p = pattern.trim().to_owned();
    if !p.starts_with('^') {
        p.insert(0, '^');
    }
    if !p.ends_with('$') {
        p.push('$');
    }
    Regex::new(&p)
}

/// Whether `entry` is a plain namespace name rather than a pattern.
fn plain(entry: &str) -> bool {
    !entry.is_empty()
        && entry
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Go's `strconv.ParseBool`, true side.
fn parse_bool(value: Option<&String>) -> bool {
    matches!(
        value.map(String::as_str),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

/// The labels a copy carries: the source's, unless it says `strip-labels: "true"`.
fn metadata(source: &Object) -> Option<Value> {
    let stripped = source.annotations.get(STRIP_LABELS).map(String::as_str) == Some("true");
    (!stripped && !source.labels.is_empty()).then(|| json!({"labels": {"include": ["*"]}}))
}

pub fn translate(inventory: &Inventory, migration: &mut Migration) {
    for source in &inventory.objects {
        push(inventory, migration, source);
    }
    pull(inventory, migration);
    not_migrated(inventory, migration);
}

/// The replicator copies Roles, RoleBindings and ServiceAccounts too; mimeo does not migrate
/// them (RBAC copied between namespaces grants rights there, which a rule should not do
/// unseen), so each gets a note, and so does a kind that could not be looked at.
fn not_migrated(inventory: &Inventory, migration: &mut Migration) {
    for object in &inventory.not_migrated {
        let what = format!("{} {}/{}", object.kind, object.namespace, object.name);
        migration.note(
            Tool::Replicator,
            &what,
            "not migrated: mimeo does not take over the replicator's copies of Roles, RoleBindings \
             and ServiceAccounts; keep the replicator for them, or write them where they are needed \
             (a Helm chart, a GitOps repository) before removing it",
        );
    }
    for why in &inventory.not_read {
        migration.note(
            Tool::Replicator,
            "Roles, RoleBindings and ServiceAccounts",
            format!(
                "could not be read, so the replicator's copies of them are not listed here ({why}); \
                 it copies those kinds too, and mimeo does not migrate them"
            ),
        );
    }
}

fn push(inventory: &Inventory, migration: &mut Migration, source: &Object) {
    let to = source.annotations.get(REPLICATE_TO);
    let matching = source.annotations.get(REPLICATE_TO_MATCHING);
    if to.is_none() && matching.is_none() {
        return;
    }
    let what = format!("{} {}/{}", source.kind, source.namespace, source.name);
    if source.annotations.contains_key(KEEP_OWNER_REFERENCES) {
        migration.note(
            Tool::Replicator,
            &what,
            "keep-owner-references is not translated: mimeo never copies ownerReferences (they would tie the copy's life to objects of another namespace)",
        );
    }
    let mut targets = Vec::new();
    let mut namespaces = std::collections::BTreeSet::new();
    for entry in to.map(|t| entries(t)).unwrap_or_default() {
        if plain(entry) {
            if entry != source.namespace {
                targets.push(json!({"namespace": entry}));
                namespaces.insert(entry.to_owned());
            }
            continue;
        }
        match strict(entry) {
            Ok(re) => {
                // A pattern target follows namespaces created later, as the replicator does; the
                // source's own namespace never gets a copy from it.
                targets.push(json!({"namespacePattern": entry}));
                let matched: Vec<String> = inventory
                    .namespaces
                    .iter()
                    .filter(|n| n.name != source.namespace && re.is_match(&n.name))
                    .map(|n| n.name.clone())
                    .collect();
                migration.note(
                    Tool::Replicator,
                    &what,
                    format!(
                        "the pattern {entry:?} becomes a namespacePattern target, anchored as the replicator anchors it; it matches {} namespaces now ({}), and a namespace created later that matches it gets its copy once it accepts the rule (mimeo.dev/accept-from)",
                        matched.len(),
                        matched.join(", ")
                    ),
                );
                namespaces.extend(matched);
            }
            Err(e) => migration.note(
                Tool::Replicator,
                &what,
                format!(
                    "the pattern {entry:?} is not a regular expression ({e}); the replicator skips it too"
                ),
            ),
        }
    }
    if let Some(matching) = matching {
        match Selector::parse(matching) {
            Ok(selector) => {
                let selector = serde_json::to_value(selector.to_label_selector()).unwrap_or_default();
                for ns in selected(inventory, &selector) {
                    if ns.name != source.namespace {
                        namespaces.insert(ns.name.clone());
                    }
                }
                targets.push(selector_target(&selector, &source.namespace));
                migration.note(
                    Tool::Replicator,
                    &what,
                    "replicate-to-matching becomes a namespaceSelector: a namespace that matches it later needs mimeo.dev/accept-from too, as those listed here get it",
                );
            }
            Err(e) => migration.note(
                Tool::Replicator,
                &what,
                format!("replicate-to-matching is not a label selector: {e}; not translated"),
            ),
        }
    }
    if targets.is_empty() {
        migration.note(Tool::Replicator, &what, "no namespace to replicate to; no rule");
        return;
    }
    let rule = sync_rule(Tool::Replicator, source, targets, metadata(source));
    let provenance = Provenance {
        evidence: &pushed_copy,
        asked_by: format!("replicate-to on {what}"),
        written_in: source.namespace.clone(),
    };
    migration.add_rule(
        inventory,
        rule,
        places(&source.kind, &source.name, namespaces),
        &provenance,
    );
}

/// `replicate-from` on copies: one rule per source, naming each copy's namespace and name.
fn pull(inventory: &Inventory, migration: &mut Migration) {
    let mut by_source: std::collections::BTreeMap<(String, String, String), Vec<&Object>> =
        Default::default();
    for copy in &inventory.objects {
        let Some(from) = copy.annotations.get(REPLICATE_FROM) else {
            continue;
        };
        let what = format!("{} {}/{}", copy.kind, copy.namespace, copy.name);
        let (namespace, name) = match from.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            None => (copy.namespace.clone(), from.clone()),
        };
        let Some(source) = inventory.object(&copy.kind, &namespace, &name) else {
            migration.note(
                Tool::Replicator,
                &what,
                format!("replicate-from names {namespace}/{name}, which does not exist; not translated"),
            );
            continue;
        };
        if !parse_bool(source.annotations.get(ALLOWED)) {
            migration.note(
                Tool::Replicator,
                &what,
                format!("its source {namespace}/{name} does not allow replication ({ALLOWED}); not translated, as the replicator refuses it"),
            );
            continue;
        }
        let allowed = source.annotations.get(ALLOWED_NAMESPACES).is_some_and(|list| {
            list.split(',')
                .any(|p| strict(p).is_ok_and(|re| re.is_match(&copy.namespace)))
        });
        if !allowed {
            migration.note(
                Tool::Replicator,
                &what,
                format!("its source {namespace}/{name} does not allow the namespace {} ({ALLOWED_NAMESPACES}); not translated, as the replicator refuses it", copy.namespace),
            );
            continue;
        }
        by_source
            .entry((copy.kind.clone(), namespace, name))
            .or_default()
            .push(copy);
    }
    for ((kind, namespace, name), copies) in by_source {
        let Some(source) = inventory.object(&kind, &namespace, &name) else {
            continue;
        };
        let targets: Vec<Value> = copies
            .iter()
            .map(|c| {
                if c.name == source.name {
                    json!({"namespace": c.namespace})
                } else {
                    json!({"namespace": c.namespace, "name": c.name})
                }
            })
            .collect();
        let mut rule = sync_rule(Tool::Replicator, source, targets, None);
        rule["metadata"]["name"] = json!(super::rules::rule_name(&["replicator-pull", &kind, &name]));
        // The copy asked for its source itself, in its own namespace.
        let wanted = format!("{namespace}/{name}");
        let pulled = |copy: &Object| {
            let from = copy.annotations.get(REPLICATE_FROM)?;
            let from = if from.contains('/') {
                from.clone()
            } else {
                format!("{}/{from}", copy.namespace)
            };
            (from == wanted).then(|| format!("{REPLICATE_FROM}: {wanted}"))
        };
        for copy in &copies {
            let provenance = Provenance {
                evidence: &pulled,
                asked_by: format!("replicate-from on {} {}/{}", copy.kind, copy.namespace, copy.name),
                written_in: copy.namespace.clone(),
            };
            let place = super::model::Place {
                kind: kind.clone(),
                namespace: copy.namespace.clone(),
                name: copy.name.clone(),
            };
            migration.add_copies(inventory, &rule, vec![place], &provenance);
        }
        migration.rules.push(rule);
    }
}

/// Whether an object carries any of the replicator's annotations (for the report).
pub fn annotated(object: &Object) -> bool {
    object.annotations.keys().any(|k| k.starts_with(PREFIX))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::{Inventory, Namespace, Object, Place, migrate};
    use super::*;
    use std::collections::BTreeMap;

    pub(crate) fn ns(name: &str, labels: &[(&str, &str)]) -> Namespace {
        Namespace {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: BTreeMap::new(),
        }
    }

    pub(crate) fn object(kind: &str, namespace: &str, name: &str, annotations: &[(&str, &str)]) -> Object {
        Object {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            labels: BTreeMap::new(),
            label_managers: BTreeMap::new(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn place(kind: &str, namespace: &str, name: &str) -> Place {
        Place {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn push_by_names_patterns_and_selectors() {
        let inventory = Inventory {
            helm: Default::default(),
            clusters: Default::default(),
            kyverno_served: true,
            namespaces: vec![
                ns("default", &[]),
                ns("my-ns-1", &[]),
                ns("namespace-1", &[]),
                ns("namespace-22", &[("team", "a")]),
                ns("namespace-x", &[("team", "a")]),
                ns("other", &[("team", "b")]),
            ],
            objects: vec![
                object(
                    "Secret",
                    "default",
                    "test-secret",
                    &[(REPLICATE_TO, "my-ns-1,namespace-[0-9]*,default,gone")],
                ),
                object(
                    "ConfigMap",
                    "default",
                    "settings",
                    &[(REPLICATE_TO_MATCHING, "team=a")],
                ),
                // An existing copy the replicator made, which the rule is to adopt.
                object(
                    "Secret",
                    "my-ns-1",
                    "test-secret",
                    &[(REPLICATED_AT, "2026-12-01T10:00:00Z")],
                ),
                // Someone else's Secret of that name, with no mark of the replicator.
                object("Secret", "namespace-1", "test-secret", &[]),
            ],
            policies: vec![],
            ..Inventory::default()
        };
        let m = migrate(
            &inventory,
            &crate::cmd::migrate::Options {
                named: vec![Tool::Replicator],
                allow_system_namespaces: true,
                ..crate::cmd::migrate::Options::default()
            },
        );
        assert_eq!(m.rules.len(), 2);
        let secret = &m.rules[0];
        assert_eq!(secret["kind"], "SyncRule");
        assert_eq!(secret["metadata"]["namespace"], "default");
        assert_eq!(secret["metadata"]["name"], "replicator-secret-test-secret");
        assert_eq!(
            secret["spec"]["targets"],
            json!([{"namespace": "my-ns-1"}, {"namespacePattern": "namespace-[0-9]*"}, {"namespace": "gone"}])
        );
        let configmap = &m.rules[1];
        assert_eq!(
            configmap["spec"]["targets"],
            json!([{"namespaceSelector": {"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["default"]}]}}])
        );
        let copies: Vec<&Place> = m.copies.keys().collect();
        assert_eq!(
            copies,
            [
                &place("ConfigMap", "namespace-22", "settings"),
                &place("ConfigMap", "namespace-x", "settings"),
                &place("Secret", "my-ns-1", "test-secret"),
                &place("Secret", "namespace-1", "test-secret"),
                &place("Secret", "namespace-22", "test-secret"),
            ]
        );
        assert_eq!(
            m.adoptions.into_iter().collect::<Vec<_>>(),
            [(
                place("Secret", "my-ns-1", "test-secret"),
                "SyncRule/default/replicator-secret-test-secret".to_owned()
            )]
        );
        // Consent only where the replicator demonstrably made the copy, for this rule alone.
        assert_eq!(m.consents.keys().collect::<Vec<_>>(), ["my-ns-1"]);
        assert_eq!(
            m.consents["my-ns-1"].keys().collect::<Vec<_>>(),
            ["default/replicator-secret-test-secret"]
        );
        let grant = &m.consents["my-ns-1"]["default/replicator-secret-test-secret"];
        assert_eq!(grant.written_in, "default");
        assert!(grant.evidence.contains(REPLICATED_AT), "{grant:?}");
        assert!(
            m.notes
                .iter()
                .any(|n| n.starts_with("Secret namespace-1/test-secret: exists but carries no mark")),
            "{:?}",
            m.notes
        );
        assert!(
            m.notes.iter().any(
                |n| n.contains("\"namespace-[0-9]*\" becomes a namespacePattern target")
                    && n.contains("matches 2 namespaces now")
            ),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn the_strict_regex_is_the_replicators() {
        assert!(strict("namespace-[0-9]*").unwrap().is_match("namespace-12"));
        assert!(!strict("namespace-[0-9]*").unwrap().is_match("namespace-1x"));
        // `^a|b$`: starts with a, or ends with b.
        assert!(strict("a|b").unwrap().is_match("axx"));
        assert!(strict("a|b").unwrap().is_match("xxb"));
    }

    #[test]
    fn rbac_the_replicator_copies_is_named_as_not_migrated() {
        let inventory = Inventory {
            not_migrated: vec![
                object("Role", "default", "reader", &[(REPLICATE_TO, "team-.*")]),
                object(
                    "ServiceAccount",
                    "team-a",
                    "bot",
                    &[(REPLICATE_FROM, "default/bot")],
                ),
            ],
            not_read: vec!["RoleBindings: forbidden".into()],
            ..Inventory::default()
        };
        let named = crate::cmd::migrate::Options {
            named: vec![Tool::Replicator],
            ..crate::cmd::migrate::Options::default()
        };
        let migration = migrate(&inventory, &named);
        assert!(migration.rules.is_empty());
        let notes = migration.notes.join("\n");
        for expected in [
            "Role default/reader: not migrated",
            "ServiceAccount team-a/bot: not migrated",
            "Roles, RoleBindings and ServiceAccounts: could not be read",
            "(RoleBindings: forbidden)",
        ] {
            assert!(notes.contains(expected), "{expected}: {notes}");
        }
    }

    #[test]
    fn pull_only_where_the_source_allows_it() {
        let allowed = [(ALLOWED, "true"), (ALLOWED_NAMESPACES, "team-.*")];
        let inventory = Inventory {
            helm: Default::default(),
            clusters: Default::default(),
            kyverno_served: true,
            namespaces: vec![ns("default", &[]), ns("team-a", &[]), ns("other", &[])],
            objects: vec![
                object("Secret", "default", "some-secret", &allowed),
                object(
                    "Secret",
                    "default",
                    "closed",
                    &[(ALLOWED, "false"), (ALLOWED_NAMESPACES, ".*")],
                ),
                object(
                    "Secret",
                    "team-a",
                    "secret-replica",
                    &[(REPLICATE_FROM, "default/some-secret")],
                ),
                object(
                    "Secret",
                    "other",
                    "secret-replica",
                    &[(REPLICATE_FROM, "default/some-secret")],
                ),
                object(
                    "Secret",
                    "team-a",
                    "closed",
                    &[(REPLICATE_FROM, "default/closed")],
                ),
                object(
                    "Secret",
                    "team-a",
                    "nothing",
                    &[(REPLICATE_FROM, "default/missing")],
                ),
            ],
            policies: vec![],
            ..Inventory::default()
        };
        let m = migrate(
            &inventory,
            &crate::cmd::migrate::Options {
                named: vec![Tool::Replicator],
                allow_system_namespaces: true,
                ..crate::cmd::migrate::Options::default()
            },
        );
        assert_eq!(m.rules.len(), 1);
        assert_eq!(
            m.rules[0]["metadata"]["name"],
            "replicator-pull-secret-some-secret"
        );
        assert_eq!(
            m.rules[0]["spec"]["targets"],
            json!([{"namespace": "team-a", "name": "secret-replica"}])
        );
        assert_eq!(m.adoptions.len(), 1);
        let notes = m.notes.join("\n");
        assert!(notes.contains("does not allow the namespace other"), "{notes}");
        assert!(
            notes.contains("default/closed does not allow replication"),
            "{notes}"
        );
        assert!(notes.contains("default/missing, which does not exist"), "{notes}");
    }
}
