//! The plugin's config: the rewrites (`from` a namespace name, `to` a template of one) and the
//! opt-in places beyond plain namespace names (literals in expressions, wildcards).

use mimeo_plugin_sdk::Context;
use mimeo_plugin_sdk::template::{self, Piece};
use serde_json::Value;

/// The placeholders `to` may use, in the order the error message lists them.
const PLACEHOLDERS: [&str; 3] = ["target.namespace", "target.cluster", "source.namespace"];

/// Kyverno's comparison operators for which a precondition on the request's namespace is a
pub(crate) const EXAMPLE: &str = r#"{"rewrites": [{"from": "default", "to": "{{target.namespace}}"}]}"#;

/// Whether `s` is a namespace name: a DNS-1123 label (at most 63 lowercase letters, digits and
/// '-', starting and ending with a letter or digit).
pub(crate) fn is_namespace_name(s: &str) -> bool {
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
pub(crate) struct Template {
    pub text: String,
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
    pub fn render(&self, ctx: &Context) -> Result<String, String> {
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
pub(crate) enum From {
    /// `*`: any namespace name.
    Any,
    Name(String),
}

#[derive(Debug)]
pub(crate) struct Rewrite {
    /// Where the rewrite is in the config (`rewrites[0]`), for messages.
    pub at: String,
    pub from: From,
    pub to: Template,
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
pub(crate) struct Config {
    pub rewrites: Vec<Rewrite>,
    /// Also rewrite string literals inside CEL and JMESPath expressions (`"expressions": true`).
    pub expressions: bool,
    /// Also rewrite Kyverno wildcards whose fixed prefix is a `from` name (`"wildcards": true`).
    pub wildcards: bool,
}

impl Config {
    pub fn parse(config: &str) -> Result<Self, String> {
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
            if let Some(unknown) = top
                .keys()
                .find(|k| !["rewrites", "expressions", "wildcards"].contains(&k.as_str()))
            {
                return Err(format!(
                    "unknown field `{unknown}`, expected `rewrites`, `expressions` or `wildcards`"
                ));
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
            if let Some(option) = ["expressions", "wildcards"]
                .into_iter()
                .find(|o| top.contains_key(*o))
            {
                return Err(format!(
                    "{option} goes beside a list of rewrites: {{\"rewrites\": [{{\"from\": ..., \"to\": ...}}], \"{option}\": true}}"
                ));
            }
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
        let flag = |name: &str| match top.get(name) {
            None | Some(Value::Bool(false)) => Ok(false),
            Some(Value::Bool(true)) => Ok(true),
            Some(other) => Err(format!(
                "{name} must be true or false, not {}",
                describe_value(other)
            )),
        };
        Ok(Config {
            expressions: flag("expressions")?,
            wildcards: flag("wildcards")?,
            rewrites,
        })
    }

    /// The first rewrite that applies to `name`.
    pub fn find(&self, name: &str) -> Option<&Rewrite> {
        self.rewrites.iter().find(|r| r.applies_to(name))
    }

    /// The rewrite whose `from` is exactly `name`: inside an expression or a wildcard, where a
    /// string is not known to be a namespace name, `*` never applies.
    pub fn find_exact(&self, name: &str) -> Option<&Rewrite> {
        self.rewrites
            .iter()
            .find(|r| matches!(&r.from, From::Name(from) if from == name))
    }
}
