//! Consent on the receiving side: a namespace decides which namespaces' `SyncRule`s may write into it.

use super::ownership::{ACCEPT_FROM_ANNOTATION, RuleKey, RuleKind};
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
    annotations
        .and_then(|a| a.get(ACCEPT_FROM_ANNOTATION))
        .is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|entry| entry == "*" || entry == from)
        })
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
}
