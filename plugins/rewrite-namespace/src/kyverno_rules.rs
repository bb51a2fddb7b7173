//! `kyverno.io` `Policy` and `ClusterPolicy`: the places in `spec.rules[]` that name a namespace.

use crate::literals::Language;
use crate::rewriter::Rewriter;
use serde_json::{Map, Value};

/// Kyverno's comparison operators for which a precondition on the request's namespace is a
/// comparison of namespace names (`Equal` and `NotEqual` are the deprecated spellings).
const OPERATORS: [&str; 10] = [
    "Equals",
    "NotEquals",
    "Equal",
    "NotEqual",
    "In",
    "AnyIn",
    "AllIn",
    "NotIn",
    "AnyNotIn",
    "AllNotIn",
];

/// The Kyverno variables that hold the namespace of the admission request.
const NAMESPACE_VARIABLES: [&str; 2] = ["request.namespace", "request.object.metadata.namespace"];

/// The API versions of `Policy` and `ClusterPolicy` whose rules this plugin knows.
pub(crate) const VERSIONS: [&str; 2] = ["v1", "v2beta1"];

/// `{{request.namespace}}` or `{{ request.object.metadata.namespace }}`.
pub(crate) fn is_namespace_variable(value: &Value) -> bool {
    value
        .as_str()
        .and_then(|s| s.strip_prefix("{{"))
        .and_then(|s| s.strip_suffix("}}"))
        .is_some_and(|inner| NAMESPACE_VARIABLES.contains(&inner.trim()))
}

impl Rewriter<'_> {
    pub fn rules(&mut self, spec: &mut Value) -> Result<(), String> {
        let Some(Value::Array(rules)) = spec.get_mut("rules") else {
            return Ok(());
        };
        for (i, rule) in rules.iter_mut().enumerate() {
            let Value::Object(rule) = rule else {
                continue;
            };
            let path = format!("spec.rules[{i}]");
            for block in ["match", "exclude"] {
                if let Some(Value::Object(filter)) = rule.get_mut(block) {
                    self.resource_filters(&format!("{path}.{block}"), filter)?;
                }
            }
            if let Some(Value::Object(generate)) = rule.get_mut("generate") {
                self.generate(&format!("{path}.generate"), generate)?;
            }
            if let Some(preconditions) = rule.get_mut("preconditions") {
                self.preconditions(&format!("{path}.preconditions"), preconditions)?;
            }
            if let Some(Value::Array(entries)) = rule.get_mut("context") {
                self.context(&format!("{path}.context"), entries)?;
            }
            if let Some(Value::Array(targets)) = rule.get_mut("mutate").and_then(|m| m.get_mut("targets")) {
                for (t, target) in targets.iter_mut().enumerate() {
                    if let Some(namespace) = target.get_mut("namespace") {
                        self.name(&format!("{path}.mutate.targets[{t}].namespace"), namespace)?;
                    }
                }
            }
            if let Some(namespace) = rule
                .get_mut("validate")
                .and_then(|v| v.get_mut("cel"))
                .and_then(|c| c.get_mut("paramRef"))
                .and_then(|p| p.get_mut("namespace"))
            {
                self.name(&format!("{path}.validate.cel.paramRef.namespace"), namespace)?;
            }
            self.rule_expressions(&path, rule)?;
        }
        Ok(())
    }

    /// With `expressions` on: the JMESPath of `{{ }}` variables anywhere in the rule and of
    /// `context[].variable.jmesPath` / `context[].apiCall.jmesPath`, and the CEL of
    /// `validate.cel` and `celPreconditions`.
    fn rule_expressions(&mut self, path: &str, rule: &mut Map<String, Value>) -> Result<(), String> {
        if !self.config.expressions {
            return Ok(());
        }
        if let Some(Value::Array(entries)) = rule.get_mut("context") {
            for (i, entry) in entries.iter_mut().enumerate() {
                for source in ["variable", "apiCall"] {
                    if let Some(jmes_path) = entry.get_mut(source).and_then(|s| s.get_mut("jmesPath")) {
                        self.expression(
                            &format!("{path}.context[{i}].{source}.jmesPath"),
                            Language::JmesPath,
                            jmes_path,
                        )?;
                    }
                }
            }
        }
        if let Some(cel) = rule.get_mut("validate").and_then(|v| v.get_mut("cel")) {
            self.cel_fields(&format!("{path}.validate.cel"), cel)?;
        }
        if let Some(preconditions) = rule.get_mut("celPreconditions") {
            self.cel_fields(&format!("{path}.celPreconditions"), preconditions)?;
        }
        for (key, value) in rule.iter_mut() {
            let skip: &[&str] = if key == "validate" { &["cel"] } else { &[] };
            if key != "celPreconditions" {
                self.all_variables(&format!("{path}.{key}"), value, skip)?;
            }
        }
        Ok(())
    }

    /// `context[].configMap.namespace`, and the namespace segment of `context[].apiCall.urlPath`
    /// (`/api/v1/namespaces/<ns>/...`, `/apis/<group>/<version>/namespaces/<ns>/...`).
    fn context(&mut self, path: &str, entries: &mut [Value]) -> Result<(), String> {
        for (i, entry) in entries.iter_mut().enumerate() {
            if let Some(namespace) = entry.get_mut("configMap").and_then(|c| c.get_mut("namespace")) {
                self.name(&format!("{path}[{i}].configMap.namespace"), namespace)?;
            }
            if let Some(Value::String(url)) = entry.get_mut("apiCall").and_then(|c| c.get_mut("urlPath")) {
                let mut segments: Vec<Value> = url.split('/').map(|s| Value::String(s.to_owned())).collect();
                for at in 1..segments.len() {
                    if segments[at - 1] == "namespaces" {
                        self.name(&format!("{path}[{i}].apiCall.urlPath"), &mut segments[at])?;
                    }
                }
                let rebuilt: Vec<&str> = segments.iter().filter_map(Value::as_str).collect();
                *url = rebuilt.join("/");
            }
        }
        Ok(())
    }

    /// `match` or `exclude`: `resources`, `any[].resources`, `all[].resources`.
    fn resource_filters(&mut self, path: &str, filter: &mut Map<String, Value>) -> Result<(), String> {
        if let Some(resources) = filter.get_mut("resources") {
            self.resources(&format!("{path}.resources"), resources)?;
        }
        for list in ["any", "all"] {
            if let Some(Value::Array(items)) = filter.get_mut(list) {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Some(resources) = item.get_mut("resources") {
                        self.resources(&format!("{path}.{list}[{i}].resources"), resources)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `namespaces[]` (names, or with `wildcards` on, wildcards), a `namespaceSelector` by name,
    /// and `names[]` when the resources are `Namespace`s only (then the names are namespaces).
    fn resources(&mut self, path: &str, resources: &mut Value) -> Result<(), String> {
        let only_namespaces = resources
            .get("kinds")
            .and_then(Value::as_array)
            .is_some_and(|kinds| {
                !kinds.is_empty()
                    && kinds
                        .iter()
                        .all(|k| matches!(k.as_str(), Some("Namespace" | "v1/Namespace")))
            });
        if only_namespaces && let Some(Value::Array(names)) = resources.get_mut("names") {
            for (i, name) in names.iter_mut().enumerate() {
                self.name_or_wildcard(&format!("{path}.names[{i}]"), name)?;
            }
        }
        if let Some(Value::Array(namespaces)) = resources.get_mut("namespaces") {
            for (i, namespace) in namespaces.iter_mut().enumerate() {
                self.name_or_wildcard(&format!("{path}.namespaces[{i}]"), namespace)?;
            }
        }
        if let Some(selector) = resources.get_mut("namespaceSelector") {
            self.selector(&format!("{path}.namespaceSelector"), selector)?;
        }
        Ok(())
    }

    /// `generate.namespace`, `generate.clone.namespace`, `generate.cloneList.namespace`, and the
    /// namespace of the object `generate.data` makes (`data.metadata.namespace`).
    fn generate(&mut self, path: &str, generate: &mut Map<String, Value>) -> Result<(), String> {
        if let Some(namespace) = generate.get_mut("namespace") {
            self.name(&format!("{path}.namespace"), namespace)?;
        }
        if let Some(namespace) = generate
            .get_mut("data")
            .and_then(|d| d.get_mut("metadata"))
            .and_then(|m| m.get_mut("namespace"))
        {
            self.name(&format!("{path}.data.metadata.namespace"), namespace)?;
        }
        for source in ["clone", "cloneList"] {
            if let Some(namespace) = generate.get_mut(source).and_then(|s| s.get_mut("namespace")) {
                self.name(&format!("{path}.{source}.namespace"), namespace)?;
            }
        }
        Ok(())
    }

    /// `preconditions.any[]`, `preconditions.all[]`, or the legacy list `preconditions[]`.
    fn preconditions(&mut self, path: &str, preconditions: &mut Value) -> Result<(), String> {
        match preconditions {
            Value::Array(conditions) => self.conditions(path, conditions),
            Value::Object(map) => {
                for list in ["any", "all"] {
                    if let Some(Value::Array(conditions)) = map.get_mut(list) {
                        self.conditions(&format!("{path}.{list}"), conditions)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A condition with one of [`OPERATORS`] whose one side is exactly a namespace variable: the
    /// other side, a plain name (or, for `value`, a list of them), is rewritten.
    fn conditions(&mut self, path: &str, conditions: &mut [Value]) -> Result<(), String> {
        for (i, condition) in conditions.iter_mut().enumerate() {
            let Value::Object(condition) = condition else {
                continue;
            };
            let comparison = condition
                .get("operator")
                .and_then(Value::as_str)
                .is_some_and(|op| OPERATORS.contains(&op));
            if !comparison {
                continue;
            }
            let key_is_variable = condition.get("key").is_some_and(is_namespace_variable);
            let value_is_variable = condition.get("value").is_some_and(is_namespace_variable);
            if key_is_variable && !value_is_variable {
                match condition.get_mut("value") {
                    Some(value @ Value::String(_)) => {
                        self.name_or_wildcard(&format!("{path}[{i}].value"), value)?
                    }
                    Some(Value::Array(values)) => {
                        for (v, value) in values.iter_mut().enumerate() {
                            self.name_or_wildcard(&format!("{path}[{i}].value[{v}]"), value)?;
                        }
                    }
                    _ => {}
                }
            } else if value_is_variable
                && !key_is_variable
                && let Some(key) = condition.get_mut("key")
            {
                self.name(&format!("{path}[{i}].key"), key)?;
            }
        }
        Ok(())
    }
}
