//! `template`: renders a Secret's or ConfigMap's data, labels and annotations from MiniJinja
//! templates over the copy, the rule's inputs and the context, e.g. a `.dockerconfigjson` from a
//! username/password Secret and a ConfigMap naming the registry. See README.md.

mod apply;
mod config;
mod engine;
mod filters;
mod variables;

use apply::{Kind, Rendered};
use engine::Templates;
use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo, outcome, parse_object};

struct Template;

impl Guest for Template {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "template".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Renders data, labels and annotations from MiniJinja templates over the copy, \
                          the rule's inputs and the context"
                .into(),
            kinds: vec!["Secret".into(), "ConfigMap".into()],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        let config = config::parse(&config)?;
        Templates::compile(&config.entries).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = config::parse(&ctx.config)?;
        let templates = Templates::compile(&config.entries)?;
        let before = parse_object(&object)?;
        let kind = Kind::of(&before)?;
        let variables = variables::variables(&ctx, &before)?;
        let rendered = config
            .entries
            .iter()
            .map(|entry| {
                Ok(Rendered {
                    field: entry.field,
                    key: &entry.key,
                    name: entry.name(),
                    text: templates.render(entry, &variables)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut after = before.clone();
        apply::apply(&mut after, kind, rendered, config.replace_data)?;
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(Template);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_config_compiles_but_does_not_render() {
        let syntax = Template::validate_config(r#"{"labels": {"a": "{{ x"}}"#.into()).unwrap_err();
        assert!(syntax.starts_with("labels[a], line 1: syntax error"), "{syntax}");
        // Whether `x` exists is known only with a copy.
        assert_eq!(
            Template::validate_config(r#"{"labels": {"a": "{{ x }}"}}"#.into()),
            Ok(())
        );
        let info = Template::describe();
        assert_eq!(
            (info.name.as_str(), info.kinds),
            ("template", vec!["Secret".into(), "ConfigMap".into()])
        );
    }

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<Template>(env!("CARGO_MANIFEST_DIR"));
    }
}
