//! `mimeo reseal`: the way back when the seal key is lost.
//!
//! A copy is mimeo's only while its seal is right under the key (`sync::seal`). When the key's
//! Secret is lost (its namespace deleted, the installation moved), mimeo makes a new one, and
//! every copy it made looks forged: each is left alone as a conflict. An administrator, who may
//! read the new key, names the rules whose copies to take back; this seals anew each object
//! whose marks name that rule, in a place where the rule copies now, from the source the rule
//! copies there, and whose seal annotation a field manager named `mimeo` wrote. Anything else
//! carrying the rule's marks is refused with the reason. The last check tells a forgery made
//! with `kubectl` from a copy, but a field manager's name is not proof: nothing after the key's
//! loss is, which is why the admin looks first (the default prints, `--apply` writes).
//!
//! Only this cluster is read; copies in `RemoteCluster`s are named as not resealed.

use crate::cmd::diff::{DiffError, LocalPlan, RuleDocument, local_plan};
use crate::sync::ownership::{FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RULE_ANNOTATION, RuleKey};
use crate::sync::plan::{PlannedCopy, source_of};
use crate::sync::seal::{Place, SEAL_ANNOTATION, SealKey};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ObjectMeta;
use kube::{Client, ResourceExt};
use serde_json::json;

/// The field manager of the seals this command writes.
pub const RESEAL_MANAGER: &str = "mimeo-reseal";

/// What to do with one object carrying a rule's marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its seal is right under the key: it is the rule's copy already.
    Sealed,
    /// Its marks name the rule, this place and the source the rule copies here: seal it anew.
    Reseal,
    /// Left as it is, with why.
    Refused(String),
}

/// What an object in a copy's place says of itself.
#[derive(Clone, Debug)]
pub struct Marks<'a> {
    pub rule: Option<&'a str>,
    pub source: crate::api::SourceRef,
    pub seal: Option<&'a str>,
    /// A field manager named `mimeo` wrote its seal annotation.
    pub sealed_by_mimeo: bool,
}

impl<'a> Marks<'a> {
    pub fn of(object: &'a DynamicObject) -> Self {
        let annotations = object.annotations();
        Marks {
            rule: annotations.get(RULE_ANNOTATION).map(String::as_str),
            source: source_of(&object.metadata),
            seal: annotations.get(SEAL_ANNOTATION).map(String::as_str),
            sealed_by_mimeo: mimeo_wrote_its_seal(&object.metadata),
        }
    }
}

/// Whether an entry of `mimeo`'s own field manager holds the seal annotation.
pub fn mimeo_wrote_its_seal(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(FIELD_MANAGER)
            && entry.fields_v1.as_ref().is_some_and(|fields| {
                fields.0["f:metadata"]["f:annotations"]
                    .get(format!("f:{SEAL_ANNOTATION}"))
                    .is_some()
            })
    })
}

/// Decides about the object at `place` carrying `marks`, given where the rule copies now (`planned`,
/// its copy at that place if it places one there).
pub fn judge(
    key: &SealKey,
    rule: &RuleKey,
    place: &Place,
    marks: &Marks,
    planned: Option<&PlannedCopy>,
) -> Verdict {
    let refused = |why: String| Verdict::Refused(why);
    if marks.rule != Some(rule.to_string().as_str()) {
        return refused(format!(
            "its marks name {}, not this rule",
            marks.rule.unwrap_or("no rule")
        ));
    }
    if marks.seal.is_some_and(|seal| key.verifies(seal, rule, place)) {
        return Verdict::Sealed;
    }
    let Some(planned) = planned else {
        return refused("the rule places no copy here".into());
    };
    if planned.from.is_none() {
        let why = planned.message.as_deref().unwrap_or("no reason given");
        return refused(format!(
            "the rule makes no copy here now ({:?}: {why})",
            planned.state
        ));
    }
    if marks.source != planned.source {
        return refused(format!(
            "its marks name the source {}, the rule copies {} here",
            source_text(&marks.source),
            source_text(&planned.source)
        ));
    }
    if !marks.sealed_by_mimeo {
        return refused("its seal was not written by mimeo (no field manager named mimeo holds it)".into());
    }
    Verdict::Reseal
}

fn source_text(source: &crate::api::SourceRef) -> String {
    match (&source.namespace, source.name.as_str()) {
        (_, "") => "none".into(),
        (Some(ns), name) => format!("{ns}/{name}"),
        (None, name) => name.into(),
    }
}

/// Why a rule's copies could not be looked at.
#[derive(Debug, thiserror::Error)]
pub enum ResealError {
    #[error("{rule}: {source}")]
    Rule {
        rule: RuleKey,
        #[source]
        source: DiffError,
    },
    #[error("{rule}: listing its copies ({kind} labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}): {source}")]
    List {
        rule: RuleKey,
        kind: String,
        #[source]
        source: kube::Error,
    },
}

/// What one run found and did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One line per rule and per object, for the admin to look at.
    pub lines: Vec<String>,
    pub sealed: usize,
    /// Sealed anew (with `--apply`), else to be.
    pub resealed: usize,
    pub refused: usize,
    /// Rules that could not be read and seals that could not be written.
    pub failed: usize,
}

/// Looks at the objects carrying the marks of each of `rules` in this cluster, and with `apply`
/// seals anew those [`judge`] lets through.
pub async fn reseal(client: &Client, key: &SealKey, rules: &[RuleKey], apply: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for rule in rules {
        if let Err(e) = reseal_rule(client, key, rule, apply, &mut outcome).await {
            outcome.lines.push(format!("! {e}"));
            outcome.failed += 1;
        }
    }
    outcome
}

async fn reseal_rule(
    client: &Client,
    key: &SealKey,
    rule: &RuleKey,
    apply: bool,
    outcome: &mut Outcome,
) -> Result<(), ResealError> {
    let in_rule = |source| ResealError::Rule {
        rule: rule.clone(),
        source,
    };
    let document = RuleDocument::read(client, rule).await.map_err(in_rule)?;
    let LocalPlan { resource, copies } = local_plan(client, &document).await.map_err(in_rule)?;
    let listed = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")))
        .await
        .map_err(|source| ResealError::List {
            rule: rule.clone(),
            kind: resource.kind.clone(),
            source,
        })?;
    outcome.lines.push(format!("{rule} ({}):", resource.kind));
    let named = rule.to_string();
    let mut marked: Vec<DynamicObject> = listed
        .items
        .into_iter()
        .filter(|o| o.annotations().get(RULE_ANNOTATION) == Some(&named))
        .collect();
    marked.sort_by_key(|o| (o.namespace(), o.name_any()));
    for object in &marked {
        let (namespace, name) = (object.namespace(), object.name_any());
        let place = Place {
            group: &resource.group,
            kind: &resource.kind,
            namespace: namespace.as_deref(),
            name: &name,
        };
        let planned = copies
            .iter()
            .find(|c| c.target.cluster.is_none() && c.target.namespace == namespace && c.target.name == name);
        let at = namespace
            .as_deref()
            .map_or(name.clone(), |ns| format!("{ns}/{name}"));
        match judge(key, rule, &place, &Marks::of(object), planned) {
            Verdict::Sealed => {
                outcome.sealed += 1;
                outcome.lines.push(format!("  sealed   {at}"));
            }
            Verdict::Refused(why) => {
                outcome.refused += 1;
                outcome.lines.push(format!("  refused  {at}: {why}"));
            }
            Verdict::Reseal if !apply => {
                outcome.resealed += 1;
                outcome.lines.push(format!("  reseal   {at}"));
            }
            Verdict::Reseal => match write_seal(client, &resource, object, key.seal(rule, &place)).await {
                Ok(()) => {
                    outcome.resealed += 1;
                    outcome.lines.push(format!("  resealed {at}"));
                }
                Err(e) => {
                    outcome.failed += 1;
                    outcome.lines.push(format!("! {at}: writing its seal: {e}"));
                }
            },
        }
    }
    if document
        .spec()
        .targets
        .iter()
        .any(|t| t.cluster.as_deref().is_some_and(|c| !c.is_empty()) || t.cluster_selector.is_some())
    {
        outcome
            .lines
            .push("  note: the rule's copies in RemoteClusters are not read here, nor resealed".into());
    }
    Ok(())
}

/// Writes the seal on exactly the object judged: a change since it was listed fails the write
/// (its `resourceVersion` is a precondition of the patch), to be looked at again.
async fn write_seal(
    client: &Client,
    resource: &kube::core::ApiResource,
    object: &DynamicObject,
    seal: String,
) -> kube::Result<()> {
    let api: Api<DynamicObject> = match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let patch = json!({"metadata": {
        "resourceVersion": object.resource_version(),
        "annotations": {SEAL_ANNOTATION: seal},
    }});
    let params = PatchParams {
        field_manager: Some(RESEAL_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&object.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CopyState, SourceRef};
    use crate::sync::desired::CopyTarget;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn rule() -> RuleKey {
        RuleKey::sync_rule("platform", "creds")
    }

    fn place(ns: &str) -> Place<'_> {
        Place {
            group: "",
            kind: "Secret",
            namespace: Some(ns),
            name: "creds",
        }
    }

    fn source(name: &str) -> SourceRef {
        SourceRef {
            namespace: Some("platform".into()),
            name: name.into(),
        }
    }

    fn planned(ns: &str, made: bool) -> PlannedCopy {
        let target = CopyTarget {
            cluster: None,
            namespace: Some(ns.into()),
            name: "creds".into(),
        };
        let mut copy = PlannedCopy::blocked(
            target,
            source("creds"),
            CopyState::NotAccepted,
            "no consent".into(),
        );
        if made {
            copy.from = Some((0, 0));
            copy.state = CopyState::Synced;
        }
        copy
    }

    fn marks<'a>(rule: &'a str, source_name: &str, seal: Option<&'a str>, by_mimeo: bool) -> Marks<'a> {
        Marks {
            rule: Some(rule),
            source: source(source_name),
            seal,
            sealed_by_mimeo: by_mimeo,
        }
    }

    #[test]
    fn only_marks_naming_the_rule_its_place_and_source_are_resealed() {
        let key = SealKey::generate().unwrap();
        let lost = SealKey::generate().unwrap();
        let named = rule().to_string();
        let right = key.seal(&rule(), &place("a"));
        let old = lost.seal(&rule(), &place("a"));
        let here = planned("a", true);
        let blocked = planned("a", false);
        // (case, marks, the rule's copy there, what the verdict says)
        let cases = [
            (
                "sealed under the key",
                marks(&named, "creds", Some(&right), true),
                Some(&here),
                "sealed",
            ),
            (
                "sealed under the lost key",
                marks(&named, "creds", Some(&old), true),
                Some(&here),
                "reseal",
            ),
            (
                "another rule's marks",
                marks("SyncRule/x/y", "creds", Some(&old), true),
                Some(&here),
                "SyncRule/x/y, not this rule",
            ),
            (
                "a place the rule does not copy to",
                marks(&named, "creds", Some(&old), true),
                None,
                "places no copy",
            ),
            (
                "a place the rule copies to no more",
                marks(&named, "creds", Some(&old), true),
                Some(&blocked),
                "NotAccepted: no consent",
            ),
            (
                "another source",
                marks(&named, "other", Some(&old), true),
                Some(&here),
                "source platform/other",
            ),
            (
                "a seal another manager wrote",
                marks(&named, "creds", Some(&old), false),
                Some(&here),
                "not written by mimeo",
            ),
        ];
        for (case, marks, planned, expected) in cases {
            let verdict = match judge(&key, &rule(), &place("a"), &marks, planned) {
                Verdict::Sealed => "sealed".to_owned(),
                Verdict::Reseal => "reseal".to_owned(),
                Verdict::Refused(why) => why,
            };
            assert!(verdict.contains(expected), "{case}: {verdict}");
        }
    }

    #[test]
    fn the_seal_is_mimeos_only_where_its_field_manager_holds_it() {
        let entry = |manager: &str, fields: serde_json::Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let seal = json!({"f:metadata": {"f:annotations": {"f:mimeo.dev/seal": {}}}});
        let other = json!({"f:metadata": {"f:annotations": {"f:mimeo.dev/rule": {}}}});
        let meta = |entries: Vec<ManagedFieldsEntry>| ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        };
        assert!(mimeo_wrote_its_seal(&meta(vec![entry("mimeo", seal.clone())])));
        assert!(!mimeo_wrote_its_seal(&meta(vec![entry(
            "kubectl-client-side-apply",
            seal
        )])));
        assert!(!mimeo_wrote_its_seal(&meta(vec![entry("mimeo", other)])));
        assert!(!mimeo_wrote_its_seal(&ObjectMeta::default()));
    }
}
