//! How a copy records who made it, and how a rule is named in that record.
//!
//! Every copy carries the label [`MANAGED_BY_LABEL`] (so one label-selected watch per kind sees
//! all copies and nothing else) and annotations naming its rule, its source and the digests of
//! what it was made from. An object without them is not mimeo's and is never touched unless the
//! rule says `Adopt` or `Overwrite`.

pub use super::rule_key::{RuleKey, RuleKind};
use super::seal::{Place, SEAL_ANNOTATION, SealKey, same};
use kube::core::ObjectMeta;

/// The field manager of every write mimeo makes.
pub const FIELD_MANAGER: &str = "mimeo";
/// The finalizer on every rule, so copies are cleaned up before the rule goes.
pub const FINALIZER: &str = "mimeo.dev/cleanup";
/// Prefix of every label and annotation mimeo owns; never carried over from a source.
pub const PREFIX: &str = "mimeo.dev/";
pub const MANAGED_BY_LABEL: &str = "mimeo.dev/managed-by";
pub const MANAGED_BY_VALUE: &str = "mimeo";
pub const RULE_ANNOTATION: &str = "mimeo.dev/rule";
pub const SOURCE_ANNOTATION: &str = "mimeo.dev/source";
pub const SOURCE_HASH_ANNOTATION: &str = "mimeo.dev/source-hash";
pub const HASH_ANNOTATION: &str = "mimeo.dev/hash";
/// On a copy: the `resourceVersion` of the source it was last written from. A replica whose
/// source cache is older than that does not write the copy back to the older source
/// (`sync::decide`). Not compared for drift: a source's version moves on changes that leave its
/// copies as they are, and a copy in sync is never written for it alone.
pub const SOURCE_VERSION_ANNOTATION: &str = "mimeo.dev/source-version";
/// On a namespace: which namespaces' `SyncRule`s may write copies into it (`a,b` or `*`).
pub const ACCEPT_FROM_ANNOTATION: &str = "mimeo.dev/accept-from";
/// On a source object in another cluster: which namespaces' `SyncRule`s may read it (`a,b` or `*`).
pub const SHARE_WITH_ANNOTATION: &str = "mimeo.dev/share-with";
/// On an object that is not a copy: the rule (`SyncRule/ns/name`, `ClusterSyncRule/name`) that
/// may adopt it, whatever its `conflict` says. Written by whoever may write the object (`mimeo
/// migrate` prints it for the copies another tool made), so it is that object's owner's consent.
pub const ADOPT_BY_ANNOTATION: &str = "mimeo.dev/adopt-by";

/// On a copy: `Orphan` keeps this copy when mimeo would remove it (its rule or source gone, its
/// place no longer chosen), whatever the rule's `deletion` says: mimeo strips its marks and
/// leaves the object. Written by whoever may write the copy (openMCP's replicator has the same
/// per copy, its `deletion-policy: Keep` label).
pub const DELETION_ANNOTATION: &str = "mimeo.dev/deletion";

/// How a copy is removed: as its own `mimeo.dev/deletion: Orphan` says, else as its rule's
/// `deletion`.
pub fn deletion_of(copy: &impl Marked, rule: crate::api::DeletionPolicy) -> crate::api::DeletionPolicy {
    match copy.annotation(DELETION_ANNOTATION) {
        Some("Orphan") => crate::api::DeletionPolicy::Orphan,
        _ => rule,
    }
}

/// An object's labels and annotations, read from its `ObjectMeta` or from a cached copy
/// (`live::LiveCopy`, which holds them apart).
pub trait Marked {
    fn label(&self, key: &str) -> Option<&str>;
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl Marked for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// Who owns a live object, as far as mimeo is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Not a mimeo copy.
    Nobody,
    /// A copy made by the rule asking.
    ThisRule,
    /// A copy made by another rule, named.
    OtherRule(String),
    /// It carries the marks of a copy made by the rule asking, but not the seal mimeo gives that
    /// copy there: someone else wrote the marks (or moved them from another place). Not a copy.
    Forged,
}

/// What tells the rule's own copy at a place from an object that only carries its marks.
#[derive(Clone, Copy, Debug)]
pub enum SealCheck<'a> {
    /// The seal the rule's copy there carries, and those it may still carry from a retired key
    /// (`seal::SealKey::retired_seals`) until it is next written.
    Expect(&'a str, &'a [String]),
    /// The marks are taken as they are: the rule's own inventory lists a copy in this place
    /// (written by mimeo alone; a copy of a mimeo from before seals has none, and the next write
    /// seals it), or the seal cannot be known (`mimeo diff` does not hold the key).
    Trusted,
}

/// The owner of a live object, seen from `rule`.
pub fn owner_of(meta: &impl Marked, rule: &RuleKey, check: SealCheck) -> Owner {
    let managed = meta.label(MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE);
    let recorded = meta.annotation(RULE_ANNOTATION);
    match (managed, recorded) {
        (true, Some(recorded)) if recorded == rule.to_string() => {
            let seal = meta.annotation(SEAL_ANNOTATION);
            let sealed = match check {
                SealCheck::Trusted => true,
                SealCheck::Expect(want, retired) => {
                    seal.is_some_and(|seal| same(seal, want) || retired.iter().any(|old| same(seal, old)))
                }
            };
            if sealed { Owner::ThisRule } else { Owner::Forged }
        }
        (true, Some(recorded)) => Owner::OtherRule(recorded.to_owned()),
        _ => Owner::Nobody,
    }
}

/// The rule a copy records, if it is one and its seal at `place` is that rule's.
pub fn sealed_rule(meta: &impl Marked, key: &SealKey, place: &Place) -> Option<RuleKey> {
    let rule = recorded_rule(meta)?;
    let seal = meta.annotation(SEAL_ANNOTATION)?;
    key.verifies(seal, &rule, place).then_some(rule)
}

/// The rule recorded on a copy, if it is one.
pub fn recorded_rule(meta: &impl Marked) -> Option<RuleKey> {
    if meta.label(MANAGED_BY_LABEL) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    meta.annotation(RULE_ANNOTATION)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
    }

    #[test]
    fn ownership_needs_label_and_matching_annotation() {
        let rule = RuleKey::sync_rule("platform", "creds");
        let ours = meta(
            &[(MANAGED_BY_LABEL, "mimeo")],
            &[(RULE_ANNOTATION, "SyncRule/platform/creds")],
        );
        let other = meta(
            &[(MANAGED_BY_LABEL, "mimeo")],
            &[(RULE_ANNOTATION, "SyncRule/platform/other")],
        );
        let annotation_only = meta(&[], &[(RULE_ANNOTATION, "SyncRule/platform/creds")]);
        let unchecked = SealCheck::Trusted;
        assert_eq!(owner_of(&ours, &rule, unchecked), Owner::ThisRule);
        assert_eq!(
            owner_of(&other, &rule, unchecked),
            Owner::OtherRule("SyncRule/platform/other".into())
        );
        assert_eq!(owner_of(&annotation_only, &rule, unchecked), Owner::Nobody);
        assert_eq!(owner_of(&ObjectMeta::default(), &rule, unchecked), Owner::Nobody);
        assert_eq!(recorded_rule(&ours), Some(rule));
        assert_eq!(recorded_rule(&annotation_only), None);
    }

    #[test]
    fn only_the_right_seal_makes_a_copy() {
        let rule = RuleKey::sync_rule("platform", "creds");
        let key = SealKey::new(vec![7; 32]).unwrap();
        let place = Place {
            group: "",
            kind: "Secret",
            namespace: Some("team"),
            name: "creds",
        };
        let seal = key.seal(&rule, &place);
        let marks = [(MANAGED_BY_LABEL, "mimeo")];
        let with = |seal: Option<&str>| {
            let mut annotations = vec![(RULE_ANNOTATION, "SyncRule/platform/creds")];
            annotations.extend(seal.map(|s| (SEAL_ANNOTATION, s)));
            meta(&marks, &annotations)
        };
        let sealed = with(Some(&seal));
        let unsealed = with(None);
        let forged = with(Some("v1.AAAA"));
        let retired = key.retired_seals(&rule, &place);
        let rotated = SealKey::new(vec![8; 32])
            .unwrap()
            .with_retired(vec![vec![7; 32]])
            .unwrap();
        let (new_seal, old_seals) = (rotated.seal(&rule, &place), rotated.retired_seals(&rule, &place));
        let cases = [
            (&sealed, SealCheck::Expect(&seal, &retired), Owner::ThisRule),
            (&unsealed, SealCheck::Expect(&seal, &retired), Owner::Forged),
            (&forged, SealCheck::Expect(&seal, &retired), Owner::Forged),
            // Sealed under the key now retired: still the copy.
            (&sealed, SealCheck::Expect(&new_seal, &old_seals), Owner::ThisRule),
            (&forged, SealCheck::Expect(&new_seal, &old_seals), Owner::Forged),
            (&sealed, SealCheck::Expect(&new_seal, &[]), Owner::Forged),
            (&unsealed, SealCheck::Trusted, Owner::ThisRule),
            (&forged, SealCheck::Trusted, Owner::ThisRule),
        ];
        for (i, (meta, check, want)) in cases.into_iter().enumerate() {
            assert_eq!(owner_of(meta, &rule, check), want, "case {i}");
        }
        assert_eq!(sealed_rule(&sealed, &key, &place), Some(rule.clone()));
        assert_eq!(sealed_rule(&unsealed, &key, &place), None);
        assert_eq!(sealed_rule(&forged, &key, &place), None);
        let elsewhere = Place {
            name: "other",
            ..place
        };
        assert_eq!(
            sealed_rule(&sealed, &key, &elsewhere),
            None,
            "a seal moved to another place"
        );
    }
}
