//! Consent across a boundary a `SyncRule`'s author does not own: a namespace decides which
//! namespaces' `SyncRule`s may write into it, and an object in another cluster decides which may
//! read it.

use super::ownership::{ACCEPT_FROM_ANNOTATION, RuleKey, RuleKind, SHARE_WITH_ANNOTATION};
use std::collections::BTreeMap;

/// Whether a copy made by `rule` may be written into namespace `target`, whose annotations are
/// given. `ClusterSyncRule`s are made by cluster admins and need no consent; a `SyncRule` may
/// always write into its own namespace, but only in its own cluster: a namespace of the same name
/// in another cluster belongs to someone else.
pub fn accepts(
    rule: &RuleKey,
    target: &str,
    same_cluster: bool,
    annotations: Option<&BTreeMap<String, String>>,
) -> bool {
    let from = match (rule.kind, &rule.namespace) {
        (RuleKind::ClusterSyncRule, _) => return true,
        (RuleKind::SyncRule, Some(ns)) => ns,
        (RuleKind::SyncRule, None) => return false,
    };
    if same_cluster && from == target {
        return true;
    }
    // An entry `<namespace>/<rule>` accepts that one rule (as `mimeo migrate` writes for the
    // namespaces another tool served), a bare namespace every SyncRule there.
    let this_rule = format!("{from}/{}", rule.name);
    annotations
        .and_then(|a| a.get(ACCEPT_FROM_ANNOTATION))
        .is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|entry| entry == "*" || entry == from || entry == this_rule)
        })
}

/// Whether `rule` may read a source object whose annotations are given. Reading from the cluster
/// mimeo runs in needs no consent (a `SyncRule` reads its own namespace, which its author may
/// read anyway). In another cluster a namespace of the same name belongs to someone else, so a
/// `SyncRule` reads only objects annotated [`SHARE_WITH_ANNOTATION`] with its namespace (or `*`);
/// `ClusterSyncRule`s are made by cluster admins and need no consent.
pub fn shares(rule: &RuleKey, other_cluster: bool, annotations: &BTreeMap<String, String>) -> bool {
    if rule.kind == RuleKind::ClusterSyncRule || !other_cluster {
        return true;
    }
    let Some(from) = &rule.namespace else {
        return false;
    };
    annotations.get(SHARE_WITH_ANNOTATION).is_some_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|entry| entry == "*" || entry == from)
    })
}

/// What to tell the user when sources in another cluster are not shared with a rule: the one it
/// names (`named`), or `count` of those its selector matches. The objects are not named: they
/// are someone else's, and their names are theirs to show.
pub fn not_shared_message(rule: &RuleKey, cluster: &str, named: bool, count: usize) -> String {
    let from = rule.namespace.as_deref().unwrap_or_default();
    let what = match (named, count) {
        (true, _) => "the source is".to_owned(),
        (false, 1) => "1 object the selector matches is".to_owned(),
        (false, n) => format!("{n} objects the selector matches are"),
    };
    format!(
        "{what} not shared with this rule in namespace {from} of RemoteCluster {cluster}: a \
         SyncRule reads another cluster's objects only with their owner's consent; annotate each \
         there with {SHARE_WITH_ANNOTATION}={from} (or \"*\"), or use a ClusterSyncRule"
    )
}

/// What to tell the user when a namespace does not accept a rule's copies.
pub fn not_accepted_message(rule: &RuleKey, target: &str) -> String {
    let from = rule.namespace.as_deref().unwrap_or_default();
    format!(
        "namespace {target} does not accept copies from namespace {from}: \
         annotate it with {ACCEPT_FROM_ANNOTATION}={from} (or \"*\")"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(value: &str) -> BTreeMap<String, String> {
        [(ACCEPT_FROM_ANNOTATION.to_owned(), value.to_owned())].into()
    }

    #[test]
    fn consent_cases() {
        let rule = RuleKey::sync_rule("platform", "creds");
        let cases = [
            ("listed", "tenant", Some(annotations("platform")), true),
            (
                "listed among others, with spaces",
                "tenant",
                Some(annotations("a, platform ,b")),
                true,
            ),
            ("everyone", "tenant", Some(annotations("*")), true),
            ("someone else", "tenant", Some(annotations("other")), false),
            (
                "a prefix is not a match",
                "tenant",
                Some(annotations("plat")),
                false,
            ),
            ("no annotation", "tenant", None, false),
            ("empty annotation", "tenant", Some(annotations("")), false),
            ("own namespace", "platform", None, true),
            (
                "this rule by name",
                "tenant",
                Some(annotations("x,platform/creds")),
                true,
            ),
            (
                "another rule by name",
                "tenant",
                Some(annotations("platform/other")),
                false,
            ),
            (
                "a rule of another namespace",
                "tenant",
                Some(annotations("other/creds")),
                false,
            ),
        ];
        for (case, target, annotations, expected) in cases {
            assert_eq!(
                accepts(&rule, target, true, annotations.as_ref()),
                expected,
                "{case}"
            );
        }
        assert!(
            !accepts(&rule, "platform", false, None),
            "a namespace of the same name in another cluster must consent"
        );
        assert!(
            accepts(&RuleKey::cluster_sync_rule("x"), "tenant", false, None),
            "cluster rules need no consent"
        );
    }

    #[test]
    fn the_message_says_what_to_add() {
        let message = not_accepted_message(&RuleKey::sync_rule("platform", "creds"), "tenant-b");
        assert!(message.contains("mimeo.dev/accept-from=platform"), "{message}");
    }

    #[test]
    fn reading_another_cluster_needs_the_objects_consent() {
        let rule = RuleKey::sync_rule("platform", "creds");
        let with = |value: &str| -> BTreeMap<String, String> {
            [(SHARE_WITH_ANNOTATION.to_owned(), value.to_owned())].into()
        };
        let none = BTreeMap::new();
        assert!(
            shares(&rule, false, &none),
            "this cluster: the rule's own namespace"
        );
        assert!(!shares(&rule, true, &none), "another cluster, no consent");
        assert!(shares(&rule, true, &with("platform")));
        assert!(shares(&rule, true, &with("a, platform")));
        assert!(shares(&rule, true, &with("*")));
        assert!(!shares(&rule, true, &with("plat")));
        assert!(!shares(&rule, true, &with("")));
        assert!(!shares(
            &rule,
            true,
            &[(ACCEPT_FROM_ANNOTATION.to_owned(), "*".to_owned())].into()
        ));
        assert!(shares(&RuleKey::cluster_sync_rule("c"), true, &none));
        let message = not_shared_message(&rule, "eu1", false, 4);
        assert!(
            message.starts_with(
                "4 objects the selector matches are not shared with this rule in namespace platform of RemoteCluster eu1"
            ),
            "{message}"
        );
        assert!(not_shared_message(&rule, "eu1", true, 1).starts_with("the source is not shared"));
        assert!(message.contains("mimeo.dev/share-with=platform"), "{message}");
    }
}
