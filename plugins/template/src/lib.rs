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

    /// A secret's value, in the copy and in an input, rendered into every error the plugin can
    /// make at a copy: no message shows it, in plain text or in base64.
    #[test]
    fn no_error_shows_a_value() {
        use base64::Engine as _;
        const CANARY: &str = "c4n4ry-Hunter2";
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let object = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "b"},
            "data": {"password": b64(CANARY), "json": b64(&format!("{{\"k\": {CANARY}")),
                     "yaml": b64(&format!("k: [{CANARY}")), "badb64": b64(&format!("{CANARY}!"))}})
        .to_string();
        let input = mimeo_plugin_sdk::Input {
            name: "registry".into(),
            source: mimeo_plugin_sdk::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: "registry".into(),
            },
            cluster: String::new(),
            object: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "registry", "namespace": "a"}, "data": {"host": CANARY}})
            .to_string(),
        };
        let ctx = |config: serde_json::Value| Context {
            rule: "SyncRule/a/r".into(),
            source: mimeo_plugin_sdk::ObjectRef {
                api_version: "v1".into(),
                kind: "Secret".into(),
                namespace: Some("a".into()),
                name: "s".into(),
            },
            source_cluster: String::new(),
            target: mimeo_plugin_sdk::Target {
                cluster: String::new(),
                namespace: Some("b".into()),
                name: "s".into(),
            },
            config: config.to_string(),
            inputs: vec![input.clone()],
        };
        let pw = "(object.data.password | b64decode)";
        let cases = [
            ("labels", "x", format!("{{{{ {pw} ~ ' x' }}}}")),
            ("labels", "x", format!("{{{{ {pw} * 10 }}}}")),
            ("labels", "x", format!("-{{{{ {pw} }}}}")),
            ("labels", "x", "{{ inputs.registry.data.host ~ '/' }}".into()),
            ("data", "k", format!("{{{{ {pw} }}}}!")),
            ("stringData", "k", format!("{{{{ {pw} | fromjson }}}}")),
            (
                "stringData",
                "k",
                "{{ object.data.json | b64decode | fromjson }}".into(),
            ),
            (
                "stringData",
                "k",
                "{{ object.data.yaml | b64decode | fromyaml }}".into(),
            ),
            ("stringData", "k", format!("{{{{ {pw} | b64decode }}}}")),
            (
                "stringData",
                "k",
                "{{ object.data.badb64 | b64decode | b64decode }}".into(),
            ),
            ("stringData", "k", format!("{{{{ {pw} | int + [] }}}}")),
            ("stringData", "k", format!("{{{{ {pw} + 1 }}}}")),
            ("stringData", "k", format!("{{{{ {pw} | sha256(1) }}}}")),
            ("stringData", "k", format!("{{{{ {pw}[100] }}}}")),
            ("stringData", "k", format!("{{{{ {pw}.nope }}}}")),
            ("stringData", "k", format!("{{{{ object.data[{pw}] }}}}")),
            ("stringData", "k", format!("{{{{ inputs[{pw}] }}}}")),
            (
                "stringData",
                "k",
                format!("{{{{ dockerconfigjson('', {pw}, 'x') }}}}"),
            ),
            (
                "stringData",
                "k",
                format!("{{{{ dockerconfigjson('r', {pw} ~ ':', 'x') }}}}"),
            ),
            (
                "stringData",
                "k",
                format!("{{{{ dockerconfigjson('r', 'u', {pw}, {pw}, {pw}) }}}}"),
            ),
            (
                "stringData",
                "k",
                format!("{{{{ dockerconfigjson({pw}, 'u') }}}}"),
            ),
            ("stringData", "k", format!("{{{{ {pw} * 1000000 }}}}")),
            (
                "stringData",
                "k",
                format!("{{% for c in {pw} %}}{{{{ c + 1 }}}}{{% endfor %}}"),
            ),
            ("stringData", "k", format!("{{{{ range({pw}) }}}}")),
            ("stringData", "k", format!("{{{{ {pw} | tojson(indent={pw}) }}}}")),
            ("stringData", "k", format!("{{{{ {pw} | indent({pw}) }}}}")),
            ("stringData", "k", format!("{{{{ {pw} | join(1, 2) }}}}")),
        ];
        for (field, key, template) in cases {
            let config = serde_json::json!({ field: { key: template } });
            let result = Template::transform(ctx(config), object.clone());
            let Err(error) = result else {
                panic!("{template}: no error");
            };
            for shown in [CANARY.to_owned(), b64(CANARY), CANARY.to_lowercase()] {
                assert!(!error.contains(&shown), "{template}: {error}");
            }
        }
    }
}
