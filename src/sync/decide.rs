//! What to do about one copy, given the copy as it should be and the object now in its place:
//! the decision [`crate::sync::plan`] takes for each copy of the plan.

use super::desired::DesiredCopy;
use super::live::{LiveCopy, Marks};
use super::ownership::{
    ADOPT_BY_ANNOTATION, Owner, RuleKey, SOURCE_ANNOTATION, SOURCE_VERSION_ANNOTATION, SealCheck, owner_of,
};
use super::seal::SEAL_ANNOTATION;
use crate::api::ConflictPolicy;
use serde_json::Map;

/// The decision for one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The live copy already is what it should be: no write.
    InSync,
    /// Write the copy this way.
    Write(Write),
    /// Leave the object alone; the reason goes to status.
    Conflict(String),
    /// Leave the object alone, as `conflict: Skip` asks; the copy is `Skipped` with this reason.
    Skip(String),
    /// The copy would be written this way, but it says it was made from a newer version of its
    /// source (`claimed`) than the one decided from: whoever wrote it (another replica, before
    /// this one took the rule over) saw the source later than this replica's cache has. Written
    /// as decided, it would go back to an older source; it is not, unless a fresh read of the
    /// source shows that the claim is false (`Plan::settle_behind`).
    Behind { write: Write, claimed: String },
}

/// How the reason of a copy skipped under `conflict: Skip` begins, so that a rule's status tells
/// such copies from those a plugin skipped.
pub const SKIPPED_FOR_CONFLICT: &str = "skipped (conflict: Skip): ";

/// How a copy is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing is there: create the copy (server-side apply).
    Create,
    /// Our copy is out of date: server-side apply the desired fields.
    Apply,
    /// Fields that others added must go too: replace the whole content, keeping the object.
    Replace,
    /// The object cannot be changed in place (immutable, or a type change): delete, then create.
    Recreate,
}

/// Decides what to do about one copy. `may_take_over` says whether `Adopt`/`Overwrite` apply in
/// this place (a `SyncRule` may take over objects only in its own namespace); `recorded`, whether
/// the rule's own inventory lists a copy there (then its marks are trusted as they are, and a
/// write gives it the seal it lacks). Under `Skip`, what would be a conflict is a skip.
pub fn decide(
    rule: &RuleKey,
    desired: &DesiredCopy,
    live: Option<&LiveCopy>,
    conflict: ConflictPolicy,
    may_take_over: bool,
    recorded: bool,
) -> Decision {
    match decide_taking_over(rule, desired, live, conflict, may_take_over, recorded) {
        Decision::Conflict(why) if conflict == ConflictPolicy::Skip => {
            Decision::Skip(format!("{SKIPPED_FOR_CONFLICT}{why}"))
        }
        decision => decision,
    }
}

/// [`decide`], with `Skip` taking nothing over, as `Fail`.
fn decide_taking_over(
    rule: &RuleKey,
    desired: &DesiredCopy,
    live: Option<&LiveCopy>,
    conflict: ConflictPolicy,
    may_take_over: bool,
    recorded: bool,
) -> Decision {
    let Some(live) = live else {
        return Decision::Write(Write::Create);
    };
    let check = match desired.object["metadata"]["annotations"][SEAL_ANNOTATION].as_str() {
        Some(seal) if !recorded => SealCheck::Expect(seal, &desired.retired_seals),
        _ => SealCheck::Trusted,
    };
    match owner_of(live, rule, check) {
        Owner::ThisRule => match (in_place_change(desired, live), newer_source(desired, live)) {
            (None, _) => Decision::InSync,
            (Some(write), None) => Decision::Write(write),
            (Some(write), Some(claimed)) => Decision::Behind {
                write,
                claimed: claimed.to_owned(),
            },
        },
        Owner::OtherRule(other) => Decision::Conflict(format!("the object is a copy made by {other}")),
        // Its owner asked for this rule to take it over (as `mimeo migrate` prints for the
        // copies another tool made): this object only, whatever `conflict` says.
        Owner::Nobody if adopted_by(live, rule) => match must_recreate(desired, live) {
            true => Decision::Write(Write::Recreate),
            false => Decision::Write(Write::Replace),
        },
        Owner::Forged
            if matches!(conflict, ConflictPolicy::Fail | ConflictPolicy::Skip) || !may_take_over =>
        {
            Decision::Conflict(
                "an object with this name carries the marks of this rule's copy but not the seal mimeo \
             gives it, so mimeo did not make it here; it is left alone (delete it, or remove its \
             mimeo.dev/ labels and annotations)"
                    .to_owned(),
            )
        }
        Owner::Nobody | Owner::Forged => match conflict {
            ConflictPolicy::Fail | ConflictPolicy::Skip => Decision::Conflict(
                "an object not managed by mimeo has this name; it is left alone \
                 (set conflict: Adopt or Overwrite to take it over)"
                    .to_owned(),
            ),
            _ if !may_take_over => Decision::Conflict(
                "an object not managed by mimeo has this name, and a SyncRule may adopt or overwrite \
                 only in its own namespace"
                    .to_owned(),
            ),
            ConflictPolicy::Adopt if must_recreate(desired, live) => Decision::Write(Write::Recreate),
            ConflictPolicy::Adopt => Decision::Write(Write::Replace),
            ConflictPolicy::Overwrite => Decision::Write(Write::Recreate),
        },
    }
}

/// The source version the live copy says it was made from, when that is newer than the one
/// `desired` is made from: the same source (by `mimeo.dev/source`), both versions numbers (the
/// versions of one resource are comparable integers since Kubernetes 1.35, KEP-5504), the
/// copy's larger.
fn newer_source<'a>(desired: &DesiredCopy, live: &'a LiveCopy) -> Option<&'a str> {
    let annotations = &desired.object["metadata"]["annotations"];
    let ours = annotations[SOURCE_VERSION_ANNOTATION]
        .as_str()?
        .parse::<u64>()
        .ok()?;
    if live.annotations().get(SOURCE_ANNOTATION) != annotations[SOURCE_ANNOTATION].as_str() {
        return None;
    }
    let claimed = live.annotations().get(SOURCE_VERSION_ANNOTATION)?;
    (claimed.parse::<u64>().ok()? > ours).then_some(claimed)
}

/// Whether the object's `mimeo.dev/adopt-by` names `rule`.
fn adopted_by(live: &LiveCopy, rule: &RuleKey) -> bool {
    live.annotations()
        .get(ADOPT_BY_ANNOTATION)
        .and_then(|v| v.trim().parse::<RuleKey>().ok())
        .is_some_and(|named| &named == rule)
}

fn desired_content(desired: &DesiredCopy) -> Map<String, serde_json::Value> {
    super::desired::content(&desired.object)
}

/// How our own copy has to change, or `None` when it matches.
fn in_place_change(desired: &DesiredCopy, live: &LiveCopy) -> Option<Write> {
    let want = desired_content(desired);
    let content_matches = live.content.is(&want);
    if content_matches && metadata_matches(desired, live) {
        return None;
    }
    if !content_matches && must_recreate(desired, live) {
        return Some(Write::Recreate);
    }
    if live.content.has_fields_beyond(&want) {
        return Some(Write::Replace);
    }
    Some(Write::Apply)
}

/// Whether the live object refuses in-place changes to its content: it is immutable, or its
/// `type` (a Secret's) differs, which the apiserver never lets change.
fn must_recreate(desired: &DesiredCopy, live: &LiveCopy) -> bool {
    live.content.immutable() || live.content.type_() != desired.object.get("type")
}

/// Every label and annotation of the desired copy is on the live one with the same value, but
/// the source's version, which alone is no reason to write.
fn metadata_matches(desired: &DesiredCopy, live: &LiveCopy) -> bool {
    let sub = |field: &str, live: &Marks| {
        desired.object["metadata"][field].as_object().is_none_or(|want| {
            want.iter()
                .filter(|(k, _)| k.as_str() != SOURCE_VERSION_ANNOTATION)
                .all(|(k, v)| live.get(k) == v.as_str())
        })
    };
    sub("labels", live.labels()) && sub("annotations", live.annotations())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MetadataPolicy, SourceRef};
    use crate::sync::desired::{CopyTarget, desired_copy};
    use kube::api::DynamicObject;
    use serde_json::{Value, json};

    fn summed(live: &DynamicObject) -> LiveCopy {
        LiveCopy::summed_up(live.clone())
    }

    fn rule() -> RuleKey {
        RuleKey::sync_rule("platform", "creds")
    }

    fn source(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "creds", "namespace": "platform"},
               "type": "Opaque", "data": data})
    }

    fn desired(data: Value) -> DesiredCopy {
        desired_copy(
            &rule(),
            &MetadataPolicy::default(),
            &source(data),
            &SourceRef {
                namespace: Some("platform".into()),
                name: "creds".into(),
            },
            CopyTarget {
                cluster: None,
                namespace: Some("tenant".into()),
                name: "creds".into(),
            },
        )
    }

    /// The live object as the apiserver would return the desired one, plus server fields.
    fn live_from(desired: &DesiredCopy) -> DynamicObject {
        let mut object = desired.object.clone();
        object["metadata"]["uid"] = json!("u-1");
        object["metadata"]["resourceVersion"] = json!("42");
        object["metadata"]["labels"]["added-by-someone"] = json!("yes");
        serde_json::from_value(object).unwrap()
    }

    fn unmanaged(data: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "tenant"}, "type": "Opaque", "data": data}))
        .unwrap()
    }

    #[test]
    fn decisions() {
        let want = desired(json!({"k": "djE="}));
        let in_sync = live_from(&want);
        let stale = live_from(&desired(json!({"k": "djA="})));
        let mut with_extra_key = live_from(&want);
        with_extra_key.data["data"]["extra"] = json!("eA==");
        let mut immutable_stale = live_from(&desired(json!({"k": "djA="})));
        immutable_stale.data["immutable"] = json!(true);
        let mut type_changed = live_from(&want);
        type_changed.data["type"] = json!("kubernetes.io/tls");
        let mut label_removed = live_from(&want);
        label_removed
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove("mimeo.dev/managed-by");
        let mut other_rule = live_from(&want);
        other_rule
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("mimeo.dev/rule".into(), "SyncRule/x/y".into());
        let foreign = unmanaged(json!({"k": "b3RoZXI="}));

        use ConflictPolicy::*;
        let cases: Vec<(&str, Option<&DynamicObject>, ConflictPolicy, bool, Decision)> = vec![
            ("nothing there", None, Fail, false, Decision::Write(Write::Create)),
            (
                "our copy, in sync, foreign label ignored",
                Some(&in_sync),
                Fail,
                false,
                Decision::InSync,
            ),
            (
                "our copy, stale",
                Some(&stale),
                Fail,
                false,
                Decision::Write(Write::Apply),
            ),
            (
                "our copy with a key someone added",
                Some(&with_extra_key),
                Fail,
                false,
                Decision::Write(Write::Replace),
            ),
            (
                "our immutable copy, stale",
                Some(&immutable_stale),
                Fail,
                false,
                Decision::Write(Write::Recreate),
            ),
            (
                "our copy with another type",
                Some(&type_changed),
                Fail,
                false,
                Decision::Write(Write::Recreate),
            ),
            (
                "our label stripped: no longer ours",
                Some(&label_removed),
                Fail,
                true,
                conflict_fail(),
            ),
            (
                "another rule's copy",
                Some(&other_rule),
                Overwrite,
                true,
                Decision::Conflict("the object is a copy made by SyncRule/x/y".into()),
            ),
            ("unmanaged, Fail", Some(&foreign), Fail, true, conflict_fail()),
            (
                "unmanaged, Adopt",
                Some(&foreign),
                Adopt,
                true,
                Decision::Write(Write::Replace),
            ),
            (
                "unmanaged, Overwrite",
                Some(&foreign),
                Overwrite,
                true,
                Decision::Write(Write::Recreate),
            ),
            (
                "unmanaged, Skip: left alone, and said to be skipped",
                Some(&foreign),
                Skip,
                true,
                Decision::Skip(match conflict_fail() {
                    Decision::Conflict(why) => format!("{SKIPPED_FOR_CONFLICT}{why}"),
                    other => panic!("{other:?}"),
                }),
            ),
            (
                "another rule's copy, Skip",
                Some(&other_rule),
                Skip,
                true,
                Decision::Skip(format!(
                    "{SKIPPED_FOR_CONFLICT}the object is a copy made by SyncRule/x/y"
                )),
            ),
            (
                "our own stale copy, Skip: written as ever",
                Some(&stale),
                Skip,
                true,
                Decision::Write(Write::Apply),
            ),
            (
                "nothing there, Skip",
                None,
                Skip,
                true,
                Decision::Write(Write::Create),
            ),
        ];
        for (case, live, policy, may_take_over, expected) in cases {
            assert_eq!(
                decide(
                    &rule(),
                    &want,
                    live.map(summed).as_ref(),
                    policy,
                    may_take_over,
                    false
                ),
                expected,
                "{case}"
            );
        }
        let Decision::Conflict(reason) = decide(&rule(), &want, Some(&summed(&foreign)), Adopt, false, false)
        else {
            panic!("a SyncRule must not adopt outside its namespace");
        };
        assert!(reason.contains("only in its own namespace"), "{reason}");
    }

    /// After the seal key was rotated, a copy sealed under the retired key is the rule's copy
    /// still and is written once to carry the new seal; a seal under a key never given is a
    /// forgery, left alone.
    #[test]
    fn a_copy_sealed_under_a_retired_key_is_sealed_anew() {
        use crate::sync::desired::CopyTemplate;
        use crate::sync::seal::SealKey;
        use std::sync::Arc;
        let sealed = |key: SealKey| {
            CopyTemplate::new(
                &rule(),
                &MetadataPolicy::default(),
                &source(json!({"k": "dg=="})),
                &SourceRef {
                    namespace: Some("platform".into()),
                    name: "creds".into(),
                },
            )
            .sealed_by(Some(Arc::new(key)))
            .copy_for(CopyTarget {
                cluster: None,
                namespace: Some("tenant".into()),
                name: "creds".into(),
            })
        };
        let old = SealKey::new(vec![1; 32]).unwrap();
        let rotated = SealKey::new(vec![2; 32])
            .unwrap()
            .with_retired(vec![vec![1; 32]])
            .unwrap();
        let before = summed(&live_from(&sealed(old)));
        let want = sealed(rotated.clone());
        let decided = |live: &LiveCopy| decide(&rule(), &want, Some(live), ConflictPolicy::Fail, true, false);
        assert_eq!(decided(&before), Decision::Write(Write::Apply), "sealed anew");
        assert_eq!(decided(&summed(&live_from(&want))), Decision::InSync);
        let unknown = summed(&live_from(&sealed(SealKey::new(vec![3; 32]).unwrap())));
        assert!(matches!(decided(&unknown), Decision::Conflict(_)), "a forgery");
        let dropped = sealed(SealKey::new(vec![2; 32]).unwrap());
        assert!(
            matches!(
                decide(
                    &rule(),
                    &dropped,
                    Some(&before),
                    ConflictPolicy::Fail,
                    true,
                    false
                ),
                Decision::Conflict(_)
            ),
            "with the retired key dropped, its seals are not accepted"
        );
    }

    /// `mimeo.dev/adopt-by` naming the rule: adopted, whatever `conflict` and wherever the place;
    /// naming another rule, or something that is not a rule: a conflict as before.
    #[test]
    fn adopt_by_names_the_one_rule_that_may_adopt() {
        let want = desired(json!({"k": "dg=="}));
        let marked = |value: &str| {
            let mut live = unmanaged(json!({"k": "dg=="}));
            live.metadata
                .annotations
                .get_or_insert_default()
                .insert(ADOPT_BY_ANNOTATION.to_owned(), value.to_owned());
            live
        };
        for (value, expected) in [
            ("SyncRule/platform/creds", Decision::Write(Write::Replace)),
            (" SyncRule/platform/creds ", Decision::Write(Write::Replace)),
            ("SyncRule/platform/other", conflict_fail()),
            ("ClusterSyncRule/creds", conflict_fail()),
            ("yes", conflict_fail()),
        ] {
            assert_eq!(
                decide(
                    &rule(),
                    &want,
                    Some(&summed(&marked(value))),
                    ConflictPolicy::Fail,
                    false,
                    false
                ),
                expected,
                "{value:?}"
            );
        }
    }

    fn conflict_fail() -> Decision {
        Decision::Conflict(
            "an object not managed by mimeo has this name; it is left alone \
             (set conflict: Adopt or Overwrite to take it over)"
                .into(),
        )
    }

    /// The desired copy of version `version` of the source holding `data`.
    fn desired_at(data: Value, version: &str) -> DesiredCopy {
        let mut source = source(data);
        source["metadata"]["resourceVersion"] = json!(version);
        desired_copy(
            &rule(),
            &MetadataPolicy::default(),
            &source,
            &SourceRef {
                namespace: Some("platform".into()),
                name: "creds".into(),
            },
            CopyTarget {
                cluster: None,
                namespace: Some("tenant".into()),
                name: "creds".into(),
            },
        )
    }

    #[test]
    fn a_copy_made_from_a_newer_source_than_the_one_decided_from_is_not_written_back() {
        let made_from_12 = summed(&live_from(&desired_at(json!({"k": "djM="}), "12")));
        let decide_from = |want: &DesiredCopy, live: &LiveCopy| {
            decide(&rule(), want, Some(live), ConflictPolicy::Fail, false, false)
        };
        // Another replica wrote v3 from version 12; this one's cache still has version 9 (v2).
        assert_eq!(
            decide_from(&desired_at(json!({"k": "djI="}), "9"), &made_from_12),
            Decision::Behind {
                write: Write::Apply,
                claimed: "12".into()
            }
        );
        // A newer source, or a copy as it should be whatever its version says, is as always.
        assert_eq!(
            decide_from(&desired_at(json!({"k": "djQ="}), "15"), &made_from_12),
            Decision::Write(Write::Apply)
        );
        assert_eq!(
            decide_from(&desired_at(json!({"k": "djM="}), "9"), &made_from_12),
            Decision::InSync
        );
        // Only the version moved (a label on the source that is not carried): nothing to write.
        assert_eq!(
            decide_from(&desired_at(json!({"k": "djM="}), "13"), &made_from_12),
            Decision::InSync
        );
        // Versions that are not numbers, or a copy of another source, are not compared.
        let other_source = made_from_12.with_meta(|m| {
            let annotations = m.annotations.as_mut().unwrap();
            annotations.insert(SOURCE_ANNOTATION.into(), "Secret/platform/other".into());
        });
        let opaque = made_from_12.with_meta(|m| {
            let annotations = m.annotations.as_mut().unwrap();
            annotations.insert(SOURCE_VERSION_ANNOTATION.into(), "x12".into());
        });
        for live in [&other_source, &opaque] {
            assert_eq!(
                decide_from(&desired_at(json!({"k": "djI="}), "9"), live),
                Decision::Write(Write::Apply)
            );
        }
    }
}
