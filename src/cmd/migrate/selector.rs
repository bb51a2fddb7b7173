//! Kubernetes label selectors written as text (`team=a,env notin (dev,test),!legacy`), as the
//! tools mimeo migrates from take them in annotations: parsed into a `LabelSelector`, and matched
//! against labels to know which copies those tools made.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeMap;

/// The label every namespace carries with its own name.
pub(super) const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A selector parsed from text.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// Parses `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`
    /// and `!key`, separated by commas. The empty text selects everything.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut requirements = Vec::new();
        for part in split_top(text)? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(requirement(part)?);
        }
        Ok(Selector(requirements))
    }

    /// Everything.
    pub fn all() -> Selector {
        Selector(Vec::new())
    }

    /// Namespaces named one of `names`, by the label each namespace carries with its name.
    pub fn names(names: Vec<String>) -> Selector {
        Selector(vec![Requirement::In(NAME_LABEL.to_owned(), names)])
    }

    /// What both select.
    pub fn and(&self, other: &Selector) -> Selector {
        Selector(self.0.iter().chain(&other.0).cloned().collect())
    }

    /// Never `name` (by its name label).
    pub fn except(&self, name: &str) -> Selector {
        let mut out = self.clone();
        out.0
            .push(Requirement::NotIn(NAME_LABEL.to_owned(), vec![name.to_owned()]));
        out
    }

    /// The names this selector allows, when it is only a list of names (`name in (...)`).
    pub fn only_names(&self) -> Option<&[String]> {
        match self.0.as_slice() {
            [Requirement::In(key, names)] if key == NAME_LABEL => Some(names),
            _ => None,
        }
    }

    /// Whether an object with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => !labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// The same selector as a `LabelSelector` (`matchLabels` for equalities, `matchExpressions`
    /// for the rest; `!=` is `NotIn`, which like it also selects objects without the label).
    pub fn to_label_selector(&self) -> LabelSelector {
        let mut match_labels = BTreeMap::new();
        let mut expressions = Vec::new();
        let expression = |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values,
        };
        for r in &self.0 {
            match r {
                Requirement::Equals(k, v) => {
                    match_labels.insert(k.clone(), v.clone());
                }
                Requirement::NotEquals(k, v) => {
                    expressions.push(expression(k, "NotIn", Some(vec![v.clone()])))
                }
                Requirement::In(k, vs) => expressions.push(expression(k, "In", Some(vs.clone()))),
                Requirement::NotIn(k, vs) => expressions.push(expression(k, "NotIn", Some(vs.clone()))),
                Requirement::Exists(k) => expressions.push(expression(k, "Exists", None)),
                Requirement::DoesNotExist(k) => expressions.push(expression(k, "DoesNotExist", None)),
            }
        }
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then_some(match_labels),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        }
    }
}

/// Splits at commas outside parentheses.
fn split_top(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("{text:?}: a ')' without its '('"))?
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("{text:?}: a '(' without its ')'"));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement(part: &str) -> Result<Requirement, String> {
    let key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        let valid = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if valid {
            Ok(k.to_owned())
        } else {
            Err(format!("{part:?}: {k:?} is not a label key"))
        }
    };
    if let Some(rest) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key(rest)?));
    }
    for (operator, set) in [(" notin ", true), (" in ", false)] {
        if let Some(at) = part.find(operator) {
            let values = part[at + operator.len()..].trim();
            let inner = values
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or_else(|| format!("{part:?}: the values of `{}` go in parentheses", operator.trim()))?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = key(&part[..at])?;
            return Ok(if set {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, v.trim().to_owned()));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::Equals(key(k)?, v.trim().to_owned()));
    }
    Ok(Requirement::Exists(key(part)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches_as_kubernetes_does() {
        // The example of kubernetes-replicator's README.
        let s = Selector::parse("my-label=value,my-other-label,my-other-label notin (foo,bar)\n").unwrap();
        assert!(s.matches(&labels(&[("my-label", "value"), ("my-other-label", "x")])));
        assert!(!s.matches(&labels(&[("my-label", "value"), ("my-other-label", "foo")])));
        assert!(!s.matches(&labels(&[("my-label", "value")])));
        let s = Selector::parse("env in (prod, staging),!legacy,tier!=db,app==web").unwrap();
        assert!(s.matches(&labels(&[("env", "prod"), ("app", "web")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("app", "web"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("env", "dev"), ("app", "web")])));
        assert!(Selector::parse("").unwrap().matches(&labels(&[])));
        let selector = s.to_label_selector();
        assert_eq!(
            serde_json::to_value(&selector).unwrap(),
            serde_json::json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "NotIn", "values": ["db"]}]})
        );
        for bad in ["env in prod", "a=(b", "a b=c", "=x"] {
            assert!(Selector::parse(bad).is_err(), "{bad:?}");
        }
    }
}
