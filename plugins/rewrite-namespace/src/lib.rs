//! `rewrite-namespace`: rewrites namespace references inside a Kyverno `Policy` or
//! `ClusterPolicy` (`kyverno.io/v1`, `kyverno.io/v2beta1`) for the copy's target: the namespaces of
//! `match`/`exclude` resource filters, the namespaces of `generate` (its target, `clone` and
//! `cloneList`), and preconditions that compare the request's namespace with a plain name. Only
//! plain namespace names are rewritten, never Kyverno variables, JMESPath or wildcards, and
//! nothing outside `spec.rules[]` (in particular never `metadata`: the host sets the copy's
//! namespace). Other objects are written unchanged.

use mimeo_plugin_sdk::template::{self, Piece};
use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo, log, outcome, parse_object};
use serde_json::{Map, Value};

/// The placeholders `to` may use, in the order the error message lists them.
const PLACEHOLDERS: [&str; 3] = ["target.namespace", "target.cluster", "source.namespace"];

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
const VERSIONS: [&str; 2] = ["v1", "v2beta1"];

const EXAMPLE: &str = r#"{"rewrites": [{"from": "default", "to": "{{target.namespace}}"}]}"#;

/// Whether `s` is a namespace name: a DNS-1123 label (at most 63 lowercase letters, digits and
/// '-', starting and ending with a letter or digit).
fn is_namespace_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// What a JSON value is, for error messages.
fn describe_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => format!("the boolean {v}"),
        Value::Number(_) => format!("the number {v}"),
        Value::String(_) => format!("the string {v}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Placeholder {
    TargetNamespace,
    TargetCluster,
    SourceNamespace,
}

impl Placeholder {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "target.namespace" => Some(Self::TargetNamespace),
            "target.cluster" => Some(Self::TargetCluster),
            "source.namespace" => Some(Self::SourceNamespace),
            _ => None,
        }
    }

    /// Its value for a copy; an error naming it when that is empty.
    fn value(self, ctx: &Context) -> Result<&str, String> {
        let (value, name, why) = match self {
            Self::TargetNamespace => (
                ctx.target.namespace.as_deref(),
                "target.namespace",
                "the copy has no namespace (a cluster-scoped kind such as ClusterPolicy)",
            ),
            Self::TargetCluster => (
                Some(ctx.target.cluster.as_str()),
                "target.cluster",
                "the copy goes to the cluster mimeo runs in",
            ),
            Self::SourceNamespace => (
                ctx.source.namespace.as_deref(),
                "source.namespace",
                "the source has no namespace (a cluster-scoped kind such as ClusterPolicy)",
            ),
        };
        match value {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(format!("{{{{{name}}}}} is empty: {why}")),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Part {
    Text(String),
    Var(Placeholder),
}

/// A `to` value: a namespace name, possibly with `{{placeholder}}`s (spaces inside the braces
/// allowed).
#[derive(Debug, PartialEq)]
struct Template {
    text: String,
    parts: Vec<Part>,
}

impl Template {
    fn parse(value: &str) -> Result<Self, String> {
        let parts = template::split(value)?
            .into_iter()
            .map(|piece| match piece {
                Piece::Text(text) => Ok(Part::Text(text.to_owned())),
                Piece::Placeholder(name) => Placeholder::parse(name).map(Part::Var).ok_or_else(|| {
                    let known: Vec<String> = PLACEHOLDERS.iter().map(|p| format!("{{{{{p}}}}}")).collect();
                    format!(
                        "{value:?} uses the unknown placeholder {{{{{name}}}}}; known: {}",
                        known.join(", ")
                    )
                }),
            })
            .collect::<Result<Vec<Part>, String>>()?;
        let template = Template {
            text: value.to_owned(),
            parts,
        };
        if template.parts.iter().all(|p| matches!(p, Part::Text(_))) {
            if !is_namespace_name(value) {
                return Err(format!(
                    "{value:?} is not a namespace name (at most 63 lowercase letters, digits and '-', \
                     starting and ending with a letter or digit)"
                ));
            }
        } else {
            for part in &template.parts {
                if let Part::Text(text) = part
                    && !text
                        .bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                {
                    return Err(format!(
                        "{value:?} has {text:?} around its placeholders; a namespace name has only \
                         lowercase letters, digits and '-'"
                    ));
                }
            }
        }
        Ok(template)
    }

    /// The namespace name for a copy.
    fn render(&self, ctx: &Context) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Var(placeholder) => out.push_str(placeholder.value(ctx)?),
            }
        }
        if is_namespace_name(&out) {
            Ok(out)
        } else {
            Err(format!("it gives {out:?}, which is not a namespace name"))
        }
    }
}

#[derive(Debug, PartialEq)]
enum From {
    /// `*`: any namespace name.
    Any,
    Name(String),
}

#[derive(Debug)]
struct Rewrite {
    /// Where the rewrite is in the config (`rewrites[0]`), for messages.
    at: String,
    from: From,
    to: Template,
}

impl Rewrite {
    /// Reads one `{"from": ..., "to": ...}`; `at` says where it is in the config (empty for the
    /// shorthand config that is just one rewrite).
    fn parse(at: &str, value: &Value) -> Result<Self, String> {
        let field = |name: &str| {
            if at.is_empty() {
                name.to_owned()
            } else {
                format!("{at}.{name}")
            }
        };
        let Value::Object(map) = value else {
            return Err(format!(
                "{at} must be an object {{\"from\": ..., \"to\": ...}}, not {}",
                describe_value(value)
            ));
        };
        if let Some(unknown) = map.keys().find(|k| *k != "from" && *k != "to") {
            let prefix = if at.is_empty() {
                String::new()
            } else {
                format!("{at}: ")
            };
            return Err(format!(
                "{prefix}unknown field `{unknown}`, expected `from` and `to`"
            ));
        }
        let string = |name: &str| -> Result<&str, String> {
            match map.get(name) {
                None => Err(format!("missing field `{}`", field(name))),
                Some(Value::String(s)) if s.is_empty() => Err(format!("{} is empty", field(name))),
                Some(Value::String(s)) => Ok(s),
                Some(other) => Err(format!(
                    "{} must be a string, not {}",
                    field(name),
                    describe_value(other)
                )),
            }
        };
        let from = match string("from")? {
            "*" => From::Any,
            name if is_namespace_name(name) => From::Name(name.to_owned()),
            name => {
                return Err(format!(
                    "{} {name:?} is not a namespace name: give an exact name, or \"*\" alone for any \
                     namespace",
                    field("from")
                ));
            }
        };
        let to = Template::parse(string("to")?).map_err(|e| format!("{}: {e}", field("to")))?;
        let at = if at.is_empty() {
            "the rewrite".to_owned()
        } else {
            at.to_owned()
        };
        Ok(Rewrite { at, from, to })
    }

    fn applies_to(&self, name: &str) -> bool {
        match &self.from {
            From::Any => is_namespace_name(name),
            From::Name(from) => from == name,
        }
    }
}

#[derive(Debug)]
struct Config {
    rewrites: Vec<Rewrite>,
}

impl Config {
    fn parse(config: &str) -> Result<Self, String> {
        let config = if config.trim().is_empty() { "{}" } else { config };
        let value: Value = serde_json::from_str(config).map_err(|e| format!("invalid config: {e}"))?;
        Self::from_value(&value).map_err(|e| format!("invalid config: {e}"))
    }

    fn from_value(value: &Value) -> Result<Self, String> {
        let Value::Object(top) = value else {
            return Err(format!(
                "expected an object such as {EXAMPLE}, not {}",
                describe_value(value)
            ));
        };
        let rewrites = if let Some(rewrites) = top.get("rewrites") {
            if let Some(unknown) = top.keys().find(|k| *k != "rewrites") {
                return Err(format!("unknown field `{unknown}`, expected `rewrites`"));
            }
            match rewrites {
                Value::Array(list) if list.is_empty() => {
                    return Err(format!("rewrites is empty: give at least one, as in {EXAMPLE}"));
                }
                Value::Array(list) => list
                    .iter()
                    .enumerate()
                    .map(|(i, r)| Rewrite::parse(&format!("rewrites[{i}]"), r))
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Object(_) => vec![Rewrite::parse("rewrites", rewrites)?],
                other => {
                    return Err(format!(
                        "rewrites must be a list of {{\"from\": ..., \"to\": ...}} objects, not {}",
                        describe_value(other)
                    ));
                }
            }
        } else if top.contains_key("from") || top.contains_key("to") {
            vec![Rewrite::parse("", value)?]
        } else if let Some(unknown) = top.keys().next() {
            return Err(format!(
                "unknown field `{unknown}`, expected `rewrites` (or `from` and `to` for a single rewrite)"
            ));
        } else {
            return Err(format!("missing field `rewrites`, as in {EXAMPLE}"));
        };
        for (i, rewrite) in rewrites.iter().enumerate() {
            match &rewrite.from {
                From::Any if i + 1 < rewrites.len() => {
                    return Err(format!(
                        "{} has from \"*\", which matches every namespace: it must be the last rewrite, \
                         or {} would never apply",
                        rewrite.at,
                        rewrites[i + 1].at
                    ));
                }
                From::Name(name) => {
                    if let Some(earlier) = rewrites[..i].iter().find(|r| r.from == rewrite.from) {
                        return Err(format!(
                            "{} rewrites {name:?} again; {} already does",
                            rewrite.at, earlier.at
                        ));
                    }
                }
                From::Any => {}
            }
        }
        Ok(Config { rewrites })
    }

    /// The first rewrite that applies to `name`.
    fn find(&self, name: &str) -> Option<&Rewrite> {
        self.rewrites.iter().find(|r| r.applies_to(name))
    }
}

/// Whether `value` is exactly one Kyverno variable holding the request's namespace, such as
/// `{{request.namespace}}` or `{{ request.object.metadata.namespace }}`.
fn is_namespace_variable(value: &Value) -> bool {
    value
        .as_str()
        .and_then(|s| s.strip_prefix("{{"))
        .and_then(|s| s.strip_suffix("}}"))
        .is_some_and(|inner| NAMESPACE_VARIABLES.contains(&inner.trim()))
}

/// Rewrites the namespace names it is shown, and remembers what it changed.
struct Rewriter<'a> {
    config: &'a Config,
    ctx: &'a Context,
    changes: Vec<String>,
}

impl Rewriter<'_> {
    /// Rewrites `value` at `path` if it is a string that a rewrite applies to.
    fn name(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        let Value::String(name) = value else {
            return Ok(());
        };
        let Some(rewrite) = self.config.find(name) else {
            return Ok(());
        };
        let to = rewrite.to.render(self.ctx).map_err(|e| {
            format!(
                "{path}: cannot rewrite {name:?} with {} (to {:?}): {e}",
                rewrite.at, rewrite.to.text
            )
        })?;
        if to != *name {
            self.changes.push(format!("{path}: {name} -> {to}"));
            *name = to;
        }
        Ok(())
    }

    /// Rewrites the strings of a list at `path`; anything else is left alone.
    fn names(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        if let Value::Array(items) = value {
            for (i, item) in items.iter_mut().enumerate() {
                self.name(&format!("{path}[{i}]"), item)?;
            }
        }
        Ok(())
    }

    fn rules(&mut self, spec: &mut Value) -> Result<(), String> {
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

    fn resources(&mut self, path: &str, resources: &mut Value) -> Result<(), String> {
        if let Some(namespaces) = resources.get_mut("namespaces") {
            self.names(&format!("{path}.namespaces"), namespaces)?;
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
                    Some(value @ Value::String(_)) => self.name(&format!("{path}[{i}].value"), value)?,
                    Some(values @ Value::Array(_)) => self.names(&format!("{path}[{i}].value"), values)?,
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

struct RewriteNamespace;

impl Guest for RewriteNamespace {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "rewrite-namespace".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Rewrites namespace references in a Kyverno Policy or ClusterPolicy (match/exclude \
                          namespaces, generate namespaces, namespace preconditions) for the copy's target"
                .into(),
            kinds: VERSIONS
                .iter()
                .flat_map(|v| ["Policy", "ClusterPolicy"].map(|k| format!("kyverno.io/{v}/{k}")))
                .collect(),
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        Config::parse(&config).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        let before = parse_object(&object)?;
        let api_version = before
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = before.get("kind").and_then(Value::as_str).unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if group != "kyverno.io" || !matches!(kind, "Policy" | "ClusterPolicy") {
            log::debug(&format!(
                "{api_version} {kind} is not a Kyverno Policy or ClusterPolicy: left unchanged"
            ));
            return Ok(Outcome::Unchanged);
        }
        if !VERSIONS.contains(&version) {
            return Err(format!(
                "{api_version} {kind}: this plugin knows the rules of kyverno.io/v1 and kyverno.io/v2beta1 \
                 only"
            ));
        }
        let mut after = before.clone();
        let mut rewriter = Rewriter {
            config: &config,
            ctx: &ctx,
            changes: Vec::new(),
        };
        if let Some(spec) = after.get_mut("spec") {
            rewriter.rules(spec)?;
        }
        if rewriter.changes.is_empty() {
            log::debug("no namespace references to rewrite");
        } else {
            let n = rewriter.changes.len();
            log::debug(&format!(
                "rewrote {n} namespace reference{}: {}",
                if n == 1 { "" } else { "s" },
                rewriter.changes.join("; ")
            ));
        }
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(RewriteNamespace);

#[cfg(test)]
mod tests {
    use super::*;
    use mimeo_plugin_sdk::{ObjectRef, Target};
    use serde_json::json;

    fn context(config: &Value, source_ns: Option<&str>, target_ns: Option<&str>, cluster: &str) -> Context {
        Context {
            rule: "SyncRule/platform/test".into(),
            source: ObjectRef {
                api_version: "kyverno.io/v1".into(),
                kind: "Policy".into(),
                namespace: source_ns.map(Into::into),
                name: "p".into(),
            },
            source_cluster: String::new(),
            target: Target {
                cluster: cluster.into(),
                namespace: target_ns.map(Into::into),
                name: "p".into(),
            },
            config: config.to_string(),
        }
    }

    /// Transforms `object` for a copy from `default` to `tenant-a` in cluster `eu1`.
    fn run(config: Value, object: &Value) -> Result<Value, String> {
        run_in(context(&config, Some("default"), Some("tenant-a"), "eu1"), object)
    }

    fn run_in(ctx: Context, object: &Value) -> Result<Value, String> {
        RewriteNamespace::validate_config(ctx.config.clone())?;
        match RewriteNamespace::transform(ctx, object.to_string())? {
            Outcome::Unchanged => Ok(object.clone()),
            Outcome::Write(json) => Ok(serde_json::from_str(&json).unwrap()),
            Outcome::Skip(reason) => panic!("skipped: {reason}"),
        }
    }

    fn policy(rule: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
               "metadata": {"name": "p", "namespace": "tenant-a"},
               "spec": {"rules": [rule]}})
    }

    fn to_target() -> Value {
        json!({"rewrites": [{"from": "default", "to": "{{target.namespace}}"},
                            {"from": "shared", "to": "shared-{{ target.cluster }}"}]})
    }

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<RewriteNamespace>(env!("CARGO_MANIFEST_DIR"));
    }

    #[test]
    fn config() {
        let err = |c: &str| Config::parse(c).unwrap_err();
        assert!(err("").contains("missing field `rewrites`"));
        assert!(err("{}").contains("missing field `rewrites`"));
        assert!(err("[]").contains("expected an object"));
        assert!(err("{").starts_with("invalid config: "));
        assert!(err(r#"{"rewrite": []}"#).contains("unknown field `rewrite`"));
        assert!(err(r#"{"rewrites": [], "x": 1}"#).contains("unknown field `x`, expected `rewrites`"));
        assert!(err(r#"{"rewrites": []}"#).contains("rewrites is empty"));
        assert!(err(r#"{"rewrites": "default"}"#).contains("rewrites must be a list"));
        assert!(err(r#"{"rewrites": ["default"]}"#).contains("rewrites[0] must be an object"));
        assert!(err(r#"{"rewrites": [{"from": "a"}]}"#).contains("missing field `rewrites[0].to`"));
        assert!(err(r#"{"rewrites": [{"to": "a"}]}"#).contains("missing field `rewrites[0].from`"));
        assert!(
            err(r#"{"rewrites": [{"from": 1, "to": "a"}]}"#)
                .contains("rewrites[0].from must be a string, not the number 1")
        );
        assert!(err(r#"{"rewrites": [{"from": "", "to": "a"}]}"#).contains("rewrites[0].from is empty"));
        assert!(err(r#"{"rewrites": [{"from": "a", "to": ""}]}"#).contains("rewrites[0].to is empty"));
        assert!(
            err(r#"{"rewrites": [{"from": "team-*", "to": "a"}]}"#)
                .contains("rewrites[0].from \"team-*\" is not a namespace name")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b", "too": "c"}]}"#)
                .contains("rewrites[0]: unknown field `too`, expected `from` and `to`")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "{{target.name}}"}]}"#).contains(
                "unknown placeholder {{target.name}}; known: {{target.namespace}}, {{target.cluster}}, \
                 {{source.namespace}}"
            )
        );
        assert!(err(r#"{"from": "a", "to": "{{target.namespace"}"#).contains("without a closing"));
        assert!(
            err(r#"{"from": "a", "to": "Tenant_A"}"#).contains("to: \"Tenant_A\" is not a namespace name")
        );
        assert!(err(r#"{"from": "a", "to": "t_{{target.namespace}}"}"#).contains("around its placeholders"));
        assert!(err(r#"{"from": "a", "to": "b", "x": 1}"#).contains("unknown field `x`, expected `from`"));
        assert!(
            err(r#"{"rewrites": [{"from": "*", "to": "a"}, {"from": "b", "to": "c"}]}"#)
                .contains("it must be the last rewrite, or rewrites[1] would never apply")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}]}"#)
                .contains("rewrites[1] rewrites \"a\" again; rewrites[0] already does")
        );
        // The shorthands: one object instead of the list, and the config being that object.
        for shorthand in [
            r#"{"from": "default", "to": "{{target.namespace}}"}"#,
            r#"{"rewrites": {"from": "default", "to": "{{target.namespace}}"}}"#,
        ] {
            let config = Config::parse(shorthand).unwrap();
            assert_eq!(config.rewrites.len(), 1);
            assert_eq!(config.rewrites[0].from, From::Name("default".into()));
        }
        assert!(
            Config::parse(r#"{"rewrites": [{"from": "a", "to": "b"}, {"from": "*", "to": "c"}]}"#).is_ok()
        );
    }

    #[test]
    fn names_and_variables() {
        assert!(is_namespace_name("default"));
        assert!(is_namespace_name("team-a1"));
        assert!(!is_namespace_name("*"));
        assert!(!is_namespace_name("kube-*"));
        assert!(!is_namespace_name("?*"));
        assert!(!is_namespace_name("Default"));
        assert!(!is_namespace_name("{{request.namespace}}"));
        assert!(!is_namespace_name(&"a".repeat(64)));
        assert!(is_namespace_variable(&json!("{{request.namespace}}")));
        assert!(is_namespace_variable(&json!(
            "{{ request.object.metadata.namespace }}"
        )));
        assert!(!is_namespace_variable(&json!("{{request.object.metadata.name}}")));
        assert!(!is_namespace_variable(&json!("ns-{{request.namespace}}")));
        assert!(!is_namespace_variable(&json!(" {{request.namespace}}")));
        assert!(!is_namespace_variable(&json!(["{{request.namespace}}"])));
    }

    #[test]
    fn every_path() {
        let rule = json!({
            "name": "r",
            "match": {"resources": {"namespaces": ["default", "kube-system"]},
                      "any": [{"resources": {"namespaces": ["shared"]}}],
                      "all": [{"resources": {"namespaces": ["default"], "kinds": ["Pod"]}}]},
            "exclude": {"resources": {"namespaces": ["default"]},
                        "any": [{"resources": {"namespaces": ["default"]}}],
                        "all": [{"resources": {"namespaces": ["shared"]}}]},
            "generate": {"namespace": "default", "clone": {"namespace": "shared", "name": "default"},
                         "cloneList": {"namespace": "default", "kinds": ["v1/Secret"]}},
            "preconditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals", "value": "default"}],
                              "all": [{"key": "shared", "operator": "NotEquals",
                                       "value": "{{request.object.metadata.namespace}}"},
                                      {"key": "{{ request.namespace }}", "operator": "AnyIn",
                                       "value": ["default", "other", 3, "shared"]}]}
        });
        let got = run(to_target(), &policy(rule)).unwrap();
        let want = policy(json!({
            "name": "r",
            "match": {"resources": {"namespaces": ["tenant-a", "kube-system"]},
                      "any": [{"resources": {"namespaces": ["shared-eu1"]}}],
                      "all": [{"resources": {"namespaces": ["tenant-a"], "kinds": ["Pod"]}}]},
            "exclude": {"resources": {"namespaces": ["tenant-a"]},
                        "any": [{"resources": {"namespaces": ["tenant-a"]}}],
                        "all": [{"resources": {"namespaces": ["shared-eu1"]}}]},
            "generate": {"namespace": "tenant-a", "clone": {"namespace": "shared-eu1", "name": "default"},
                         "cloneList": {"namespace": "tenant-a", "kinds": ["v1/Secret"]}},
            "preconditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals", "value": "tenant-a"}],
                              "all": [{"key": "shared-eu1", "operator": "NotEquals",
                                       "value": "{{request.object.metadata.namespace}}"},
                                      {"key": "{{ request.namespace }}", "operator": "AnyIn",
                                       "value": ["tenant-a", "other", 3, "shared-eu1"]}]}
        }));
        assert_eq!(got, want);
        // Idempotent: the result has nothing left to rewrite.
        let ctx = context(&to_target(), Some("default"), Some("tenant-a"), "eu1");
        assert!(matches!(
            RewriteNamespace::transform(ctx, want.to_string()),
            Ok(Outcome::Unchanged)
        ));
    }

    #[test]
    fn leaves_alone() {
        let rule = json!({
            "name": "r",
            "match": {"any": [{"resources": {"namespaces": ["kube-*", "*", "?efault", "{{request.namespace}}"],
                                             "namespaceSelector": {"matchLabels": {"ns": "default"}}},
                               "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]}]},
            "generate": {"namespace": "{{request.object.metadata.name}}",
                         "foreach": [{"namespace": "default"}],
                         "data": {"data": {"from": "default"}}},
            "mutate": {"targets": [{"name": "default"}],
                       "patchStrategicMerge": {"metadata": {"namespace": "default"}}},
            "validate": {"deny": {"conditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals",
                                                          "value": "default"}]}}},
            "preconditions": {"any": [
                // the other side is not the request's namespace
                {"key": "{{request.object.metadata.labels.env}}", "operator": "Equals", "value": "default"},
                // not a comparison of names
                {"key": "{{request.namespace}}", "operator": "GreaterThan", "value": "default"},
                {"key": "{{request.namespace}}", "value": "default"},
                // wildcards and variables on the plain side
                {"key": "{{request.namespace}}", "operator": "Equals", "value": "def*"},
                {"key": "{{request.namespace}}", "operator": "Equals", "value": "{{request.namespace}}"},
                // a list key
                {"key": ["default"], "operator": "AnyIn", "value": "{{request.namespace}}"}
            ]}
        });
        let mut object = policy(rule);
        object["metadata"]["namespace"] = json!("default");
        object["spec"]["webhookConfiguration"] = json!({"namespace": "default"});
        object["status"] = json!({"autogen": {"rules": [{"generate": {"namespace": "default"}}]}});
        let ctx = context(&to_target(), Some("default"), Some("tenant-a"), "eu1");
        let answer = RewriteNamespace::transform(ctx, object.to_string());
        assert!(matches!(answer, Ok(Outcome::Unchanged)), "{answer:?}");
    }

    #[test]
    fn wildcard_from() {
        let config = json!({"rewrites": [{"from": "kube-system", "to": "kube-system"},
                                         {"from": "*", "to": "{{target.namespace}}"}]});
        let rule = json!({"match": {"any": [{"resources": {"namespaces":
            ["default", "kube-system", "team-1", "kube-*", "*", "{{request.namespace}}"]}}]}});
        let got = run(config, &policy(rule)).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["match"]["any"][0]["resources"]["namespaces"],
            json!([
                "tenant-a",
                "kube-system",
                "tenant-a",
                "kube-*",
                "*",
                "{{request.namespace}}"
            ])
        );
    }

    #[test]
    fn legacy_preconditions_and_v2beta1() {
        let mut object = policy(json!({"preconditions": [
            {"key": "{{request.namespace}}", "operator": "In", "value": ["default", "shared"]},
            {"key": "default", "operator": "Equals", "value": "{{request.namespace}}"}]}));
        object["apiVersion"] = json!("kyverno.io/v2beta1");
        let got = run(to_target(), &object).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["preconditions"],
            json!([{"key": "{{request.namespace}}", "operator": "In", "value": ["tenant-a", "shared-eu1"]},
                   {"key": "tenant-a", "operator": "Equals", "value": "{{request.namespace}}"}])
        );
    }

    #[test]
    fn other_kinds_and_versions() {
        let config = json!({"from": "default", "to": "{{target.namespace}}"});
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "c", "namespace": "tenant-a"},
                               "spec": {"rules": [{"generate": {"namespace": "default"}}]}});
        let exception = json!({"apiVersion": "kyverno.io/v2", "kind": "PolicyException",
                               "metadata": {"name": "e", "namespace": "tenant-a"},
                               "spec": {"match": {"any": [{"resources": {"namespaces": ["default"]}}]}}});
        let other_group = json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "Policy",
                                 "metadata": {"name": "e", "namespace": "tenant-a"},
                                 "spec": {"rules": [{"generate": {"namespace": "default"}}]}});
        for object in [configmap, exception, other_group] {
            let ctx = context(&config, Some("default"), Some("tenant-a"), "");
            assert!(matches!(
                RewriteNamespace::transform(ctx, object.to_string()),
                Ok(Outcome::Unchanged)
            ));
        }
        let mut future = policy(json!({"generate": {"namespace": "default"}}));
        future["apiVersion"] = json!("kyverno.io/v3");
        assert!(run(config, &future).unwrap_err().contains(
            "kyverno.io/v3 Policy: this plugin knows the rules of kyverno.io/v1 and kyverno.io/v2beta1"
        ));
    }

    #[test]
    fn empty_placeholders() {
        let mut cluster_policy = policy(json!({"generate": {"namespace": "default"}}));
        cluster_policy["kind"] = json!("ClusterPolicy");
        cluster_policy["metadata"] = json!({"name": "p"});
        let err = run_in(context(&to_target(), None, None, "eu1"), &cluster_policy).unwrap_err();
        assert!(
            err.contains(
                "spec.rules[0].generate.namespace: cannot rewrite \"default\" with rewrites[0] \
                 (to \"{{target.namespace}}\"): {{target.namespace}} is empty"
            ),
            "{err}"
        );
        // Nothing to rewrite: the empty placeholder does not matter.
        let mut other = cluster_policy.clone();
        other["spec"]["rules"][0]["generate"]["namespace"] = json!("kyverno");
        assert_eq!(
            run_in(context(&to_target(), None, None, "eu1"), &other).unwrap(),
            other
        );
        // An empty cluster name, and a source namespace.
        let mut shared = cluster_policy.clone();
        shared["spec"]["rules"][0]["generate"]["namespace"] = json!("shared");
        let err = run_in(context(&to_target(), None, None, ""), &shared).unwrap_err();
        assert!(err.contains("{{target.cluster}} is empty: the copy goes to the cluster mimeo runs in"));
        let config = json!({"from": "default", "to": "from-{{source.namespace}}"});
        let err = run_in(context(&config, None, None, ""), &cluster_policy).unwrap_err();
        assert!(err.contains("{{source.namespace}} is empty"));
        let got = run_in(context(&config, Some("platform"), None, ""), &cluster_policy).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["generate"]["namespace"],
            json!("from-platform")
        );
        // A result that is not a namespace name.
        let config = json!({"from": "default", "to": "{{target.namespace}}-{{target.namespace}}"});
        let long = "a".repeat(40);
        let err = run_in(context(&config, None, Some(&long), ""), &cluster_policy).unwrap_err();
        assert!(err.contains("which is not a namespace name"), "{err}");
    }

    #[test]
    fn never_touches_metadata_or_other_fields() {
        let mut object = policy(json!({"generate": {"namespace": "default"}}));
        object["metadata"]["namespace"] = json!("default");
        object["metadata"]["labels"] = json!({"ns": "default"});
        let got = run(to_target(), &object).unwrap();
        assert_eq!(got["metadata"], object["metadata"]);
        assert_eq!(
            got["spec"]["rules"][0]["generate"]["namespace"],
            json!("tenant-a")
        );
    }
}
