//! Kyverno's CEL policy family (`policies.kyverno.io`): the namespace selectors of
//! `matchConstraints` and `targetMatchConstraints`, and, with `expressions` on, the string
//! literals of every CEL expression under `spec`.

use crate::literals::Language;
use crate::rewriter::Rewriter;
use serde_json::Value;

/// The kinds of `policies.kyverno.io` this plugin knows (Kyverno 1.19).
pub(crate) const KINDS: [&str; 11] = [
    "ValidatingPolicy",
    "MutatingPolicy",
    "GeneratingPolicy",
    "DeletingPolicy",
    "ImageValidatingPolicy",
    "NamespacedValidatingPolicy",
    "NamespacedMutatingPolicy",
    "NamespacedGeneratingPolicy",
    "NamespacedDeletingPolicy",
    "NamespacedImageValidatingPolicy",
    "PolicyException",
];

/// The versions of `policies.kyverno.io` whose fields this plugin knows (not every kind serves
/// `v1alpha1`; the apiserver refuses a rule naming one that a kind lacks).
pub(crate) const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// The fields that hold a CEL expression, wherever they are in these kinds' specs:
/// `matchConditions[].expression`, `variables[].expression`, `validations[].messageExpression`,
/// `auditAnnotations[].valueExpression`, `attestors[].cosign.keyless.identities[].subjectExpression`,
/// `mutations[].jsonPatch.expression`, `generate[].expression`, `conditions[].expression`, ...
pub(crate) const CEL_FIELDS: [&str; 4] = [
    "expression",
    "messageExpression",
    "valueExpression",
    "subjectExpression",
];

impl Rewriter<'_> {
    pub fn cel_policy(&mut self, spec: &mut Value) -> Result<(), String> {
        for constraints in ["matchConstraints", "targetMatchConstraints"] {
            if let Some(selector) = spec
                .get_mut(constraints)
                .and_then(|c| c.get_mut("namespaceSelector"))
            {
                self.selector(&format!("spec.{constraints}.namespaceSelector"), selector)?;
            }
        }
        self.cel_fields("spec", spec)
    }

    /// With `expressions` on, the CEL of every [`CEL_FIELDS`] field under `value`.
    pub fn cel_fields(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        if !self.config.expressions {
            return Ok(());
        }
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.cel_fields(&format!("{path}[{i}]"), item)?;
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    let at = format!("{path}.{key}");
                    if CEL_FIELDS.contains(&key.as_str()) && item.is_string() {
                        self.expression(&at, Language::Cel, item)?;
                    } else {
                        self.cel_fields(&at, item)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}
