//! A copy's name, from `targets[].name`: a fixed name, or a small template over what the copy is
//! made from and where it goes, such as `sp-crossplane-{{source.name}}`, so that one target
//! (a selector of sources, or of namespaces and clusters) writes copies under names that the
//! source and the place decide.
//!
//! The placeholders are `{{source.name}}`, `{{source.namespace}}`, `{{target.namespace}}` and
//! `{{target.cluster}}` (the `RemoteCluster`'s name, empty in the cluster mimeo runs in). Nothing
//! else is evaluated: a name is no place for logic (and plugins keep the copy's name).

use std::fmt;

/// What a name template may say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    SourceName,
    SourceNamespace,
    TargetNamespace,
    TargetCluster,
}

impl Var {
    fn parse(name: &str) -> Option<Var> {
        Some(match name {
            "source.name" => Var::SourceName,
            "source.namespace" => Var::SourceNamespace,
            "target.namespace" => Var::TargetNamespace,
            "target.cluster" => Var::TargetCluster,
            _ => return None,
        })
    }
}

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// A parsed `targets[].name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameTemplate(Vec<Piece>);

/// What a copy's name is made from.
#[derive(Clone, Copy, Debug, Default)]
pub struct NameOf<'a> {
    pub source_name: &'a str,
    pub source_namespace: Option<&'a str>,
    pub target_namespace: Option<&'a str>,
    pub target_cluster: Option<&'a str>,
}

/// A `targets[].name` that is no usable name template, or a copy name it gave that Kubernetes
/// would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    #[error("targets[].name {template:?}: {why}")]
    Template { template: String, why: String },
    #[error(
        "targets[].name {template:?} gives {name:?}, which is no valid object name (at most 253 lowercase letters, digits, '-' and '.', a letter or digit at each end)"
    )]
    Rendered { template: String, name: String },
}

impl NameTemplate {
    /// Parses a name, checking every placeholder and that the text around them could stand in a
    /// name: with sample values put in, the name must be valid.
    pub fn parse(template: &str) -> Result<NameTemplate, InvalidName> {
        let invalid = |why: String| InvalidName::Template {
            template: template.to_owned(),
            why,
        };
        let mut pieces = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| invalid("a {{ without its }}".into()))?;
            let name = after[..close].trim();
            let var = Var::parse(name).ok_or_else(|| {
                invalid(format!(
                    "unknown placeholder {{{{{name}}}}}: use source.name, source.namespace, target.namespace or target.cluster"
                ))
            })?;
            pieces.push(Piece::Var(var));
            rest = &after[close + 2..];
        }
        if rest.contains("}}") {
            return Err(invalid("a }} without its {{".into()));
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        let parsed = NameTemplate(pieces);
        let sample = NameOf {
            source_name: "a",
            source_namespace: Some("a"),
            target_namespace: Some("a"),
            target_cluster: Some("a"),
        };
        parsed.render(template, &sample)?;
        Ok(parsed)
    }

    /// Whether the name depends on anything: a fixed name is written as given.
    pub fn is_template(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::Var(_)))
    }

    /// The copy's name for these values; `template` is the text it was parsed from, for the
    /// error.
    pub fn render(&self, template: &str, of: &NameOf) -> Result<String, InvalidName> {
        let mut name = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => name.push_str(text),
                Piece::Var(var) => name.push_str(match var {
                    Var::SourceName => of.source_name,
                    Var::SourceNamespace => of.source_namespace.unwrap_or_default(),
                    Var::TargetNamespace => of.target_namespace.unwrap_or_default(),
                    Var::TargetCluster => of.target_cluster.unwrap_or_default(),
                }),
            }
        }
        match is_object_name(&name) {
            true => Ok(name),
            false => Err(InvalidName::Rendered {
                template: template.to_owned(),
                name,
            }),
        }
    }
}

impl fmt::Display for NameTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => f.write_str(text)?,
                Piece::Var(var) => write!(
                    f,
                    "{{{{{}}}}}",
                    match var {
                        Var::SourceName => "source.name",
                        Var::SourceNamespace => "source.namespace",
                        Var::TargetNamespace => "target.namespace",
                        Var::TargetCluster => "target.cluster",
                    }
                )?,
            }
        }
        Ok(())
    }
}

/// A DNS subdomain, as Kubernetes names Secrets, ConfigMaps and policies.
fn is_object_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of() -> NameOf<'static> {
        NameOf {
            source_name: "registry",
            source_namespace: Some("openmcp-system"),
            target_namespace: Some("mcp--1234"),
            target_cluster: None,
        }
    }

    #[test]
    fn placeholders_are_put_in() {
        for (template, want) in [
            ("registry-credentials", "registry-credentials"),
            ("sp-crossplane-{{source.name}}", "sp-crossplane-registry"),
            ("{{ source.name }}.{{target.namespace}}", "registry.mcp--1234"),
            ("{{source.namespace}}-{{source.name}}", "openmcp-system-registry"),
        ] {
            let parsed = NameTemplate::parse(template).unwrap();
            assert_eq!(parsed.render(template, &of()).unwrap(), want, "{template}");
            assert_eq!(parsed.to_string().replace(' ', ""), template.replace(' ', ""));
        }
        assert!(!NameTemplate::parse("fixed").unwrap().is_template());
        assert!(NameTemplate::parse("x-{{target.cluster}}").unwrap().is_template());
    }

    #[test]
    fn bad_templates_are_refused_with_what_to_change() {
        for (template, says) in [
            ("{{source.labels.team}}", "unknown placeholder"),
            ("{{object.name}}", "unknown placeholder"),
            ("{{source.name", "without its }}"),
            ("a}}", "without its {{"),
            ("Upper-{{source.name}}", "no valid object name"),
            ("under_score", "no valid object name"),
        ] {
            let error = NameTemplate::parse(template).map(|_| ()).unwrap_err().to_string();
            assert!(error.contains(says), "{template}: {error}");
        }
    }

    #[test]
    fn a_name_that_comes_out_invalid_is_an_error_for_that_copy() {
        let template = "{{source.name}}-{{target.cluster}}";
        let parsed = NameTemplate::parse(template).unwrap();
        // In the cluster mimeo runs in, target.cluster is empty: a trailing '-' is no name.
        assert!(matches!(
            parsed.render(template, &of()),
            Err(InvalidName::Rendered { .. })
        ));
        let long = "x".repeat(250);
        let parsed = NameTemplate::parse("{{source.name}}-copy").unwrap();
        let named = NameOf {
            source_name: &long,
            ..of()
        };
        assert!(parsed.render("{{source.name}}-copy", &named).is_err());
    }
}
