//! kubernetes-reflector (emberstack): a source allows reflection (`reflection-allowed`) into the
//! namespaces its `reflection-allowed-namespaces` patterns or `-selector` select; with
//! `reflection-auto-enabled` it creates the mirrors itself, in the allowed namespaces that
//! `reflection-auto-namespaces` (or `-selector`) also select; a mirror made by hand names its
//! source in `reflects`.
//!
//! Its semantics, from its source: a pattern matches when the regular expression's first match
//! is the whole namespace name; an empty pattern list and selector together allow every
//! namespace; patterns and selector of one annotation pair are alternatives (either may match);
//! the source's own namespace never gets a mirror.

use super::model::{Inventory, Migration, Object, Place, Provenance, Tool};
use super::rules::{entries, places, sync_rule};
use super::selector::Selector;
use regex::Regex;
use serde_json::{Value, json};

const ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
const ALLOWED_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
const ALLOWED_SELECTOR: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces-selector";
const AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
const AUTO_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces";
const AUTO_SELECTOR: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector";
const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
/// The mark the reflector leaves on every mirror it writes.
pub const REFLECTED_VERSION: &str = "reflector.v1.k8s.emberstack.com/reflected-version";

/// A mirror's evidence: `reflects` names this source (auto mirrors carry it too).
fn reflects<'a>(wanted: &'a str) -> impl Fn(&Object) -> Option<String> + 'a {
    move |mirror: &Object| {
        (mirror.annotations.get(REFLECTS).map(|r| r.trim()) == Some(wanted))
            .then(|| format!("{REFLECTS}: {wanted}"))
    }
}

/// .NET's `bool.TryParse`, true side.
fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The reflector's pattern match: the first match is the whole value.
fn pattern_matches(pattern: &str, value: &str) -> Option<bool> {
    let re = Regex::new(pattern).ok()?;
    Some(
        re.find(value)
            .is_some_and(|m| m.start() == 0 && m.end() == value.len()),
    )
}

/// One annotation pair (patterns, selector) as the terms of a union: an empty pair allows all;
/// patterns become the names they match now (plain names stay names whether they exist or not).
fn terms(
    inventory: &Inventory,
    source: &Object,
    patterns: Option<&String>,
    selector: Option<&String>,
    migration: &mut Migration,
) -> Vec<Selector> {
    let what = format!("{} {}/{}", source.kind, source.namespace, source.name);
    let patterns = patterns.map(|p| entries(p)).unwrap_or_default();
    let selector = selector.map(|s| s.trim()).filter(|s| !s.is_empty());
    if patterns.is_empty() && selector.is_none() {
        return vec![Selector::all()];
    }
    let mut out = Vec::new();
    if !patterns.is_empty() {
        let mut names = Vec::new();
        for pattern in patterns {
            let plain = pattern
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if plain {
                names.push(pattern.to_owned());
                continue;
            }
            let matched: Vec<String> = inventory
                .namespaces
                .iter()
                .filter(|n| pattern_matches(pattern, &n.name) == Some(true))
                .map(|n| n.name.clone())
                .collect();
            migration.note(
                Tool::Reflector,
                &what,
                format!(
                    "the pattern {pattern:?} is resolved to the {} namespaces it matches now ({}); a namespace created later that matches it gets no copy: label such namespaces and use a selector",
                    matched.len(),
                    matched.join(", ")
                ),
            );
            names.extend(matched);
        }
        names.sort();
        names.dedup();
        out.push(Selector::names(names));
    }
    if let Some(text) = selector {
        match Selector::parse(text) {
            Ok(s) => out.push(s),
            // The reflector fails closed on a selector it cannot parse: it selects nothing.
            Err(e) => migration.note(
                Tool::Reflector,
                &what,
                format!(
                    "a namespace selector that does not parse ({e}) selects nothing, as in the reflector"
                ),
            ),
        }
    }
    out
}

/// A target for what `selector` selects: namespaces by name when it is only names.
fn targets_for(selector: &Selector) -> Vec<Value> {
    match selector.only_names() {
        Some(names) => names.iter().map(|n| json!({"namespace": n})).collect(),
        None => vec![
            json!({"namespaceSelector": serde_json::to_value(selector.to_label_selector()).unwrap_or_default()}),
        ],
    }
}

pub fn translate(inventory: &Inventory, migration: &mut Migration) {
    for source in &inventory.objects {
        if !is_true(source.annotations.get(ALLOWED)) {
            continue;
        }
        let allowed = terms(
            inventory,
            source,
            source.annotations.get(ALLOWED_NAMESPACES),
            source.annotations.get(ALLOWED_SELECTOR),
            migration,
        );
        if is_true(source.annotations.get(AUTO_ENABLED)) {
            auto(inventory, migration, source, &allowed);
        }
        mirrors(inventory, migration, source, &allowed);
    }
}

/// The mirrors the reflector makes itself: allowed, and selected for auto-reflection.
fn auto(inventory: &Inventory, migration: &mut Migration, source: &Object, allowed: &[Selector]) {
    let auto = terms(
        inventory,
        source,
        source.annotations.get(AUTO_NAMESPACES),
        source.annotations.get(AUTO_SELECTOR),
        migration,
    );
    let mut targets = Vec::new();
    let mut namespaces = std::collections::BTreeSet::new();
    for a in allowed {
        for b in &auto {
            let both = match (a.only_names(), b.only_names()) {
                (Some(x), Some(y)) => Selector::names(x.iter().filter(|n| y.contains(n)).cloned().collect()),
                _ => a.and(b),
            };
            let both = match both.only_names() {
                Some(names) => Selector::names(
                    names
                        .iter()
                        .filter(|n| **n != source.namespace)
                        .cloned()
                        .collect(),
                ),
                None => both.except(&source.namespace),
            };
            for ns in inventory.matching(&both) {
                namespaces.insert(ns.name.clone());
            }
            targets.extend(targets_for(&both));
        }
    }
    targets.dedup();
    if targets.iter().any(|t| t.get("namespaceSelector").is_some()) {
        migration.note(
            Tool::Reflector,
            &format!("{} {}/{}", source.kind, source.namespace, source.name),
            "auto-reflection by selector becomes a namespaceSelector: a namespace that matches it later needs mimeo.dev/accept-from too, as those listed here get it",
        );
    }
    let mut rule = sync_rule(Tool::Reflector, source, targets, None);
    rule["metadata"]["name"] = json!(super::rules::rule_name(&[
        "reflector",
        &source.kind,
        &source.name
    ]));
    let wanted = format!("{}/{}", source.namespace, source.name);
    let provenance = Provenance {
        evidence: &reflects(&wanted),
        asked_by: format!("{AUTO_ENABLED} on {} {wanted}", source.kind),
        written_in: source.namespace.clone(),
    };
    migration.add_rule(
        inventory,
        rule,
        places(&source.kind, &source.name, namespaces),
        &provenance,
    );
}

/// Mirrors made by hand (`reflects`), where the source allows their namespace.
fn mirrors(inventory: &Inventory, migration: &mut Migration, source: &Object, allowed: &[Selector]) {
    let wanted = format!("{}/{}", source.namespace, source.name);
    let mut targets = Vec::new();
    let mut copies = Vec::new();
    for mirror in &inventory.objects {
        if mirror.kind != source.kind
            || mirror.annotations.get(REFLECTS).map(|r| r.trim()) != Some(wanted.as_str())
        {
            continue;
        }
        let place = Place {
            kind: mirror.kind.clone(),
            namespace: mirror.namespace.clone(),
            name: mirror.name.clone(),
        };
        // An automatic mirror names its source in `reflects` too: the rule for auto-reflection
        // has it already, and one copy has one rule.
        if migration.copies.contains_key(&place) {
            continue;
        }
        let in_allowed = inventory
            .namespace(&mirror.namespace)
            .is_some_and(|ns| allowed.iter().any(|s| s.matches(&ns.labels_with_name())));
        if !in_allowed || mirror.namespace == source.namespace {
            migration.note(
                Tool::Reflector,
                &format!("{} {}/{}", mirror.kind, mirror.namespace, mirror.name),
                format!("reflects {wanted}, which does not allow the namespace {}; not translated, as the reflector refuses it", mirror.namespace),
            );
            continue;
        }
        targets.push(if mirror.name == source.name {
            json!({"namespace": mirror.namespace})
        } else {
            json!({"namespace": mirror.namespace, "name": mirror.name})
        });
        copies.push(place);
    }
    if targets.is_empty() {
        return;
    }
    let mut rule = sync_rule(Tool::Reflector, source, targets, None);
    rule["metadata"]["name"] = json!(super::rules::rule_name(&[
        "reflector-mirrors",
        &source.kind,
        &source.name
    ]));
    // Each mirror asked for its source itself, in its own namespace.
    let evidence = reflects(&wanted);
    for place in copies {
        let provenance = Provenance {
            evidence: &evidence,
            asked_by: format!("{REFLECTS} on {} {}/{}", place.kind, place.namespace, place.name),
            written_in: place.namespace.clone(),
        };
        migration.add_copies(inventory, &rule, vec![place], &provenance);
    }
    migration.rules.push(rule);
}

#[cfg(test)]
mod tests {
    use super::super::replicator::tests::{ns, object};
    use super::super::{Inventory, migrate};
    use super::*;

    #[test]
    fn auto_reflection_and_mirrors() {
        let inventory = Inventory {
            helm: Default::default(),
            clusters: Default::default(),
            kyverno_served: true,
            namespaces: vec![
                ns("cert-manager", &[]),
                ns("app-1", &[("env", "prod")]),
                ns("app-2", &[("env", "dev")]),
                ns("web", &[("env", "prod")]),
                ns("manual", &[]),
            ],
            objects: vec![
                object(
                    "Secret",
                    "cert-manager",
                    "wildcard-tls",
                    &[
                        (ALLOWED, "true"),
                        (ALLOWED_NAMESPACES, "app-[0-9]+,manual"),
                        (AUTO_ENABLED, "True"),
                        (AUTO_NAMESPACES, "app-.*"),
                    ],
                ),
                object(
                    "Secret",
                    "manual",
                    "tls",
                    &[(REFLECTS, "cert-manager/wildcard-tls")],
                ),
                object("Secret", "web", "tls", &[(REFLECTS, "cert-manager/wildcard-tls")]),
                object(
                    "ConfigMap",
                    "cert-manager",
                    "ca",
                    &[
                        (ALLOWED, "true"),
                        (AUTO_ENABLED, "true"),
                        (AUTO_NAMESPACES_SELECTOR_TEST, ""),
                    ],
                ),
                object(
                    "ConfigMap",
                    "cert-manager",
                    "by-label",
                    &[
                        (ALLOWED, "true"),
                        (ALLOWED_SELECTOR, "env=prod"),
                        (AUTO_ENABLED, "true"),
                    ],
                ),
                // An automatic mirror: it names its source in `reflects` too.
                object(
                    "Secret",
                    "app-1",
                    "wildcard-tls",
                    &[
                        ("reflector.v1.k8s.emberstack.com/auto-reflects", "True"),
                        (REFLECTS, "cert-manager/wildcard-tls"),
                        (REFLECTED_VERSION, "42"),
                    ],
                ),
                // Someone else's ConfigMap of the name an auto-reflection would give.
                object("ConfigMap", "web", "by-label", &[]),
            ],
            policies: vec![],
            ..Inventory::default()
        };
        let m = migrate(
            &inventory,
            &crate::cmd::migrate::Options {
                named: vec![Tool::Reflector],
                allow_system_namespaces: true,
                ..crate::cmd::migrate::Options::default()
            },
        );
        let by_name = |name: &str| {
            m.rules
                .iter()
                .find(|r| r["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{name}: {:?}", m.rules))
        };
        assert_eq!(
            by_name("reflector-secret-wildcard-tls")["spec"]["targets"],
            json!([{"namespace": "app-1"}, {"namespace": "app-2"}])
        );
        assert_eq!(
            by_name("reflector-mirrors-secret-wildcard-tls")["spec"]["targets"],
            json!([{"namespace": "manual", "name": "tls"}])
        );
        // Empty allowed and auto lists: every namespace but the source's.
        assert_eq!(
            by_name("reflector-configmap-ca")["spec"]["targets"],
            json!([{"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["cert-manager"]}]}}])
        );
        assert_eq!(
            by_name("reflector-configmap-by-label")["spec"]["targets"],
            json!([{"namespaceSelector": {"matchLabels": {"env": "prod"}, "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["cert-manager"]}]}}])
        );
        assert_eq!(
            m.copies
                .keys()
                .filter(|p| p.kind == "ConfigMap" && p.name == "ca")
                .count(),
            4
        );
        // One rule per copy: the automatic mirror is the auto-reflection rule's alone.
        assert_eq!(
            m.adoptions
                .iter()
                .map(|(p, r)| format!("{}/{} {r}", p.namespace, p.name))
                .collect::<Vec<_>>(),
            [
                "app-1/wildcard-tls SyncRule/cert-manager/reflector-secret-wildcard-tls",
                "manual/tls SyncRule/cert-manager/reflector-mirrors-secret-wildcard-tls"
            ],
        );
        assert_eq!(
            m.consents
                .iter()
                .map(|(ns, e)| format!("{ns} {:?}", e.keys().collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
            [
                "app-1 [\"cert-manager/reflector-secret-wildcard-tls\"]",
                "manual [\"cert-manager/reflector-mirrors-secret-wildcard-tls\"]"
            ],
        );
        assert_eq!(m.consents["manual"].values().next().unwrap().written_in, "manual");
        assert!(
            m.notes
                .iter()
                .any(|n| n
                    .contains("reflects cert-manager/wildcard-tls, which does not allow the namespace web")),
            "{:?}",
            m.notes
        );
    }

    /// Not an annotation of the reflector: ignored.
    const AUTO_NAMESPACES_SELECTOR_TEST: &str = "example.com/unrelated";

    #[test]
    fn patterns_match_whole_names() {
        assert_eq!(pattern_matches("app-[0-9]+", "app-12"), Some(true));
        assert_eq!(pattern_matches("app", "app-12"), Some(false));
        assert_eq!(pattern_matches("(", "x"), None);
    }
}
