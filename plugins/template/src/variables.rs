//! What a template sees: the copy, the rule's inputs by name, where the copy comes from and goes.

use mimeo_plugin_sdk::{Context, parse_object};
use minijinja::value::{Serde, Value};
use serde_json::{Map, json};

/// The variables `object`, `inputs`, `source`, `target` and `rule`. A cluster-scoped source or
/// target has namespace `""`, as in set-metadata, so printing it never shows `none`.
pub fn variables(ctx: &Context, object: &Map<String, serde_json::Value>) -> Result<Value, String> {
    let mut inputs = Map::new();
    for input in &ctx.inputs {
        let parsed = parse_object(&input.object).map_err(|e| format!("input {:?}: {e}", input.name))?;
        inputs.insert(input.name.clone(), parsed.into());
    }
    let variables = json!({
        "object": object,
        "inputs": inputs,
        "source": {
            "apiVersion": ctx.source.api_version,
            "kind": ctx.source.kind,
            "namespace": ctx.source.namespace.as_deref().unwrap_or_default(),
            "name": ctx.source.name,
            "cluster": ctx.source_cluster,
        },
        "target": {
            "cluster": ctx.target.cluster,
            "namespace": ctx.target.namespace.as_deref().unwrap_or_default(),
            "name": ctx.target.name,
        },
        "rule": ctx.rule,
    });
    Ok(Value::from(Serde(variables)))
}
