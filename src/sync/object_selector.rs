//! Whether an object is chosen by an [`ObjectSelector`], with openMCP's semantics: a set
//! `matchIdentities` alone decides, otherwise labels and purposes must both match.

use crate::api::{ObjectSelector, PurposeOperator, PurposeRequirement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use std::collections::{BTreeMap, BTreeSet};

/// A label selector that cannot be evaluated, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct InvalidSelector(pub String);

/// Turns a selector into a matcher.
pub fn selector(selector: &LabelSelector) -> Result<Selector, InvalidSelector> {
    Selector::try_from(selector.clone()).map_err(|e| InvalidSelector(e.0))
}

/// What a selector looks at in an object.
#[derive(Clone, Copy, Debug)]
pub struct ObjectFacts<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// The object's `spec.purposes`; empty for kinds that have none.
    pub purposes: &'a [String],
}

/// A selector made ready to match many objects: its label part parsed once.
#[derive(Clone, Debug)]
pub struct Matcher {
    identities: Option<BTreeSet<(String, String)>>,
    labels: kube::core::Selector,
    purposes: Vec<PurposeRequirement>,
}

impl Matcher {
    /// Parses the label part; an invalid requirement (an unknown operator, `In` without values)
    /// is an error rather than a selector that silently matches nothing.
    pub fn new(s: &ObjectSelector) -> Result<Self, InvalidSelector> {
        let labels = selector(&LabelSelector {
            match_labels: s.match_labels.clone(),
            match_expressions: s.match_expressions.clone(),
        })?;
        Ok(Matcher {
            identities: s.match_identities.as_ref().map(|ids| {
                ids.iter()
                    .map(|i| (i.namespace.clone(), i.name.clone()))
                    .collect()
            }),
            labels,
            purposes: s.match_purposes.clone(),
        })
    }

    pub fn matches(&self, object: &ObjectFacts) -> bool {
        if let Some(ids) = &self.identities {
            return ids.contains(&(object.namespace.to_owned(), object.name.to_owned()));
        }
        self.labels.matches(object.labels) && self.purposes.iter().all(|r| purposes_match(r, object.purposes))
    }

    /// Whether the selector asks about purposes (which only some kinds have).
    pub fn uses_purposes(&self) -> bool {
        self.identities.is_none() && !self.purposes.is_empty()
    }
}

/// One purpose requirement against an object's purposes.
pub fn purposes_match(requirement: &PurposeRequirement, purposes: &[String]) -> bool {
    let has = |value: &String| purposes.contains(value);
    match requirement.operator {
        PurposeOperator::ContainsAll => requirement.values.iter().all(has),
        PurposeOperator::ContainsAny => requirement.values.iter().any(has),
        PurposeOperator::ContainsNone => !requirement.values.iter().any(has),
        PurposeOperator::Equals => {
            let wanted: BTreeSet<&String> = requirement.values.iter().collect();
            let held: BTreeSet<&String> = purposes.iter().collect();
            wanted == held
        }
    }
}

/// The purposes of an object as JSON: `spec.purposes`, strings only.
pub fn purposes_of(object: &serde_json::Value) -> Vec<String> {
    object["spec"]["purposes"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectIdentity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| (*s).to_owned()).collect()
    }

    fn requirement(operator: PurposeOperator, values: &[&str]) -> PurposeRequirement {
        PurposeRequirement {
            operator,
            values: strings(values),
        }
    }

    fn matches(s: &ObjectSelector, ns: &str, name: &str, labels: &[(&str, &str)], purposes: &[&str]) -> bool {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let purposes = strings(purposes);
        Matcher::new(s).unwrap().matches(&ObjectFacts {
            namespace: ns,
            name,
            labels: &labels,
            purposes: &purposes,
        })
    }

    #[test]
    fn each_purpose_operator_reads_as_openmcp_documents_it() {
        use PurposeOperator::*;
        let held = strings(&["workload", "single"]);
        assert!(purposes_match(
            &requirement(ContainsAll, &["single", "workload"]),
            &held
        ));
        assert!(!purposes_match(
            &requirement(ContainsAll, &["single", "mcp"]),
            &held
        ));
        assert!(purposes_match(
            &requirement(ContainsAny, &["mcp", "workload"]),
            &held
        ));
        assert!(!purposes_match(&requirement(ContainsAny, &["mcp"]), &held));
        assert!(purposes_match(
            &requirement(ContainsNone, &["mcp", "platform"]),
            &held
        ));
        assert!(!purposes_match(&requirement(ContainsNone, &["single"]), &held));
        assert!(purposes_match(
            &requirement(Equals, &["single", "workload", "single"]),
            &held
        ));
        assert!(!purposes_match(&requirement(Equals, &["workload"]), &held));
    }

    #[test]
    fn labels_and_purposes_must_both_match() {
        let s = ObjectSelector {
            match_labels: Some([("foo".to_owned(), "bar".to_owned())].into()),
            match_purposes: vec![requirement(PurposeOperator::ContainsAny, &["mcp"])],
            ..Default::default()
        };
        assert!(matches(&s, "a", "x", &[("foo", "bar")], &["mcp", "other"]));
        assert!(!matches(&s, "a", "x", &[("foo", "bar")], &["other"]));
        assert!(!matches(&s, "a", "x", &[], &["mcp"]));
    }

    #[test]
    fn identities_alone_decide_when_set_and_an_empty_list_matches_nothing() {
        let only = ObjectSelector {
            match_identities: Some(vec![ObjectIdentity {
                name: "myobject".into(),
                namespace: "default".into(),
            }]),
            match_labels: Some([("foo".to_owned(), "bar".to_owned())].into()),
            ..Default::default()
        };
        assert!(matches(&only, "default", "myobject", &[], &[]));
        assert!(!matches(&only, "default", "other", &[("foo", "bar")], &[]));
        let none = ObjectSelector {
            match_identities: Some(vec![]),
            ..Default::default()
        };
        assert!(!matches(&none, "default", "myobject", &[], &[]));
        assert!(matches(&ObjectSelector::default(), "any", "thing", &[], &[]));
    }

    #[test]
    fn a_bad_label_requirement_is_an_error() {
        let s = ObjectSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "k".into(),
                operator: "Sometimes".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(Matcher::new(&s).is_err());
    }

    #[test]
    fn purposes_are_read_from_the_spec_and_non_strings_are_skipped() {
        let cluster = json!({"spec": {"purposes": ["workload", 3, "single"]}});
        assert_eq!(purposes_of(&cluster), strings(&["workload", "single"]));
        assert!(purposes_of(&json!({"spec": {}})).is_empty());
    }
}
