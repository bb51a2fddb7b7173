//! The rewriter both policy families share: one namespace name, a list of them, a label selector
//! by `kubernetes.io/metadata.name`, a Kyverno wildcard, and the literals of an expression.

use crate::config::{Config, Rewrite};
use crate::literals::{self, Language};
use mimeo_plugin_sdk::{Context, log};
use serde_json::{Map, Value};

/// The label every namespace carries with its own name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Rewrites the namespace names it is shown, and remembers what it changed.
pub(crate) struct Rewriter<'a> {
    pub config: &'a Config,
    pub ctx: &'a Context,
    pub changes: Vec<String>,
}

impl Rewriter<'_> {
    /// The new name `rewrite` gives `name` at `path`, or an error naming both.
    fn render(&self, path: &str, rewrite: &Rewrite, name: &str) -> Result<String, String> {
        rewrite.to.render(self.ctx).map_err(|e| {
            format!(
                "{path}: cannot rewrite {name:?} with {} (to {:?}): {e}",
                rewrite.at, rewrite.to.text
            )
        })
    }

    /// Rewrites `value` at `path` if it is a string that a rewrite applies to.
    pub fn name(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        let Value::String(name) = value else {
            return Ok(());
        };
        let Some(rewrite) = self.config.find(name) else {
            return Ok(());
        };
        let to = self.render(path, rewrite, name)?;
        if to != *name {
            self.changes.push(format!("{path}: {name} -> {to}"));
            *name = to;
        }
        Ok(())
    }

    /// Rewrites the strings of a list at `path`; anything else is left alone.
    pub fn names(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        if let Value::Array(items) = value {
            for (i, item) in items.iter_mut().enumerate() {
                self.name(&format!("{path}[{i}]"), item)?;
            }
        }
        Ok(())
    }

    /// A name where Kyverno also takes wildcards (`*`, `?`): a plain name is rewritten as
    /// [`Self::name`] does; with `wildcards` on, a wildcard whose fixed prefix (before its first
    /// `*` or `?`) is a `from` name, alone or followed by `-`, gets the new name in its place
    /// (`default-*` -> `tenant-a-*`).
    pub fn name_or_wildcard(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        let Value::String(pattern) = value else {
            return Ok(());
        };
        let Some(wild) = pattern.find(['*', '?']) else {
            return self.name(path, value);
        };
        if !self.config.wildcards {
            return Ok(());
        }
        let prefix = &pattern[..wild];
        let Some((rewrite, from)) = self.config.rewrites.iter().find_map(|r| match &r.from {
            crate::config::From::Name(from)
                if prefix == from
                    || prefix
                        .strip_prefix(from.as_str())
                        .is_some_and(|rest| rest.starts_with('-')) =>
            {
                Some((r, from.len()))
            }
            _ => None,
        }) else {
            return Ok(());
        };
        let to = self.render(path, rewrite, pattern)?;
        let new = format!("{to}{}", &pattern[from..]);
        if new != *pattern {
            self.changes.push(format!("{path}: {pattern} -> {new}"));
            *pattern = new;
        }
        Ok(())
    }

    /// A label selector: `matchLabels["kubernetes.io/metadata.name"]`, and the values of its
    /// `matchExpressions` on that label with `In` or `NotIn`.
    pub fn selector(&mut self, path: &str, selector: &mut Value) -> Result<(), String> {
        if let Some(name) = selector
            .get_mut("matchLabels")
            .and_then(|l| l.get_mut(NAME_LABEL))
        {
            self.name(&format!("{path}.matchLabels[{NAME_LABEL:?}]"), name)?;
        }
        if let Some(Value::Array(expressions)) = selector.get_mut("matchExpressions") {
            for (i, expression) in expressions.iter_mut().enumerate() {
                let on_name = expression.get("key").and_then(Value::as_str) == Some(NAME_LABEL)
                    && matches!(
                        expression.get("operator").and_then(Value::as_str),
                        Some("In" | "NotIn")
                    );
                if on_name && let Some(values) = expression.get_mut("values") {
                    self.names(&format!("{path}.matchExpressions[{i}].values"), values)?;
                }
            }
        }
        Ok(())
    }

    /// With `expressions` on, the string literals of the expression `value` at `path` that equal a
    /// `from` name exactly. An expression that does not parse is an error: what it names cannot
    /// be known, and it is not copied half rewritten.
    pub fn expression(&mut self, path: &str, language: Language, value: &mut Value) -> Result<(), String> {
        let Value::String(source) = value else {
            return Ok(());
        };
        if !self.config.expressions {
            return Ok(());
        }
        if let Some(new) = self.rewrite_literals(path, language, source)? {
            *source = new;
        }
        Ok(())
    }

    /// The literals of `source` rewritten, or `None` when none needed it.
    ///
    /// Kyverno's JMESPath is a dialect (it has a ternary `a ? b : c`, which the `jmespath`
    /// crate's grammar lacks), so a JMESPath expression this parser cannot read is left as it is,
    /// with a warning, unless a quoted `from` name appears in it: then it may hold a namespace
    /// literal that cannot be rewritten safely, and the copy fails. CEL's grammar is one, so CEL
    /// that does not parse always fails.
    fn rewrite_literals(
        &mut self,
        path: &str,
        language: Language,
        source: &str,
    ) -> Result<Option<String>, String> {
        if language == Language::JmesPath
            && let Err(e) = literals::find(language, source)
            && !self.quotes_a_from(source)
        {
            log::warn(&format!(
                "{path}: left as it is: this JMESPath parser cannot read it ({e}), and it quotes no \
                 namespace that is rewritten"
            ));
            return Ok(None);
        }
        let mut changes = Vec::new();
        let new = literals::replace(language, source, |literal| {
            let Some(rewrite) = self.config.find_exact(&literal.value) else {
                return Ok(None);
            };
            let to = self.render(path, rewrite, &literal.value)?;
            changes.push(format!("{path}: literal {:?} -> {to:?}", literal.value));
            Ok(Some(to))
        })
        .map_err(|e| {
            if e.starts_with(path) {
                e
            } else {
                format!(
                    "{path}: {e} (this {} expression is where namespace literals are rewritten, as \
                     \"expressions\": true asks)",
                    language.name()
                )
            }
        })?;
        if new.is_some() {
            self.changes.extend(changes);
        }
        Ok(new)
    }

    /// Whether `source` holds a `from` name in quotes (`'ns'`, `"ns"` or `` `"ns"` ``).
    fn quotes_a_from(&self, source: &str) -> bool {
        self.config.rewrites.iter().any(|r| match &r.from {
            crate::config::From::Name(name) => {
                source.contains(&format!("'{name}'")) || source.contains(&format!("\"{name}\""))
            }
            crate::config::From::Any => false,
        })
    }

    /// With `expressions` on, the JMESPath inside each of Kyverno's `{{ }}` variables in the
    /// string `value` at `path`.
    pub fn variables(&mut self, path: &str, value: &mut Value) -> Result<(), String> {
        let Value::String(text) = value else {
            return Ok(());
        };
        if !self.config.expressions || !text.contains("{{") {
            return Ok(());
        }
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        let mut changed = false;
        for (start, end) in variable_bodies(text) {
            if let Some(new) = self.rewrite_literals(path, Language::JmesPath, &text[start..end])? {
                out.push_str(&text[copied..start]);
                out.push_str(&new);
                copied = end;
                changed = true;
            }
        }
        if changed {
            out.push_str(&text[copied..]);
            *text = out;
        }
        Ok(())
    }

    /// [`Self::variables`] on every string under `value`, but for the keys in `skip`.
    pub fn all_variables(&mut self, path: &str, value: &mut Value, skip: &[&str]) -> Result<(), String> {
        match value {
            Value::String(_) => self.variables(path, value),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.all_variables(&format!("{path}[{i}]"), item, skip)?;
                }
                Ok(())
            }
            Value::Object(map) => self.all_variables_in(path, map, skip),
            _ => Ok(()),
        }
    }

    fn all_variables_in(
        &mut self,
        path: &str,
        map: &mut Map<String, Value>,
        skip: &[&str],
    ) -> Result<(), String> {
        for (key, item) in map.iter_mut() {
            if !skip.contains(&key.as_str()) {
                self.all_variables(&format!("{path}.{key}"), item, &[])?;
            }
        }
        Ok(())
    }
}

/// The byte ranges of the expressions inside Kyverno's variables in `text`, as Kyverno's own
/// pattern finds them: `{{`, not after a backslash, then characters other than braces or
/// `{...}` groups without braces inside, then `}}`.
pub(crate) fn variable_bodies(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if !(bytes[i] == b'{' && bytes[i + 1] == b'{') || (i > 0 && bytes[i - 1] == b'\\') {
            i += 1;
            continue;
        }
        let start = i + 2;
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            match bytes[j] {
                b'}' if bytes.get(j + 1) == Some(&b'}') => {
                    end = Some(j);
                    break;
                }
                b'}' => break,
                b'{' => match bytes[j + 1..].iter().position(|b| *b == b'{' || *b == b'}') {
                    Some(k) if bytes[j + 1 + k] == b'}' => j += k + 2,
                    _ => break,
                },
                _ => j += 1,
            }
        }
        match end {
            Some(end) => {
                found.push((start, end));
                i = end + 2;
            }
            None => i += 1,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::variable_bodies;

    #[test]
    fn kyverno_variables() {
        let bodies = |t: &str| -> Vec<String> {
            variable_bodies(t)
                .into_iter()
                .map(|(a, b)| t[a..b].to_owned())
                .collect()
        };
        assert_eq!(bodies("{{request.namespace}}"), ["request.namespace"]);
        assert_eq!(bodies("a-{{ x }}-{{y}}"), [" x ", "y"]);
        assert_eq!(bodies(r"\{{ not }} {{ yes }}"), [" yes "]);
        assert_eq!(bodies("{{ {a: b}.a }}"), [" {a: b}.a "]);
        assert_eq!(bodies("{{ unclosed"), Vec::<String>::new());
        assert_eq!(bodies("{{ a } b }}"), Vec::<String>::new());
        assert_eq!(bodies("plain"), Vec::<String>::new());
    }
}
