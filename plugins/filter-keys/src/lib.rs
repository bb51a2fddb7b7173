//! `filter-keys`: keeps only the keys of `data` and `binaryData` that match `include` (all keys
//! when it is absent) and no `exclude` glob.

use mimeo_plugin_sdk::{
    Context, DATA_FIELDS, Guest, Outcome, PluginInfo, glob_matches, outcome, parse_config, parse_object,
};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Globs of the keys to keep; `None` keeps every key not excluded.
    include: Option<Vec<String>>,
    /// Globs of the keys to drop, even when included.
    #[serde(default)]
    exclude: Vec<String>,
}

impl Config {
    fn parse(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        if config.include.as_ref().is_some_and(Vec::is_empty) {
            return Err(
                "include is empty, which would drop every key: list the keys to keep, or leave \
                        include out to keep all keys but the excluded ones"
                    .into(),
            );
        }
        let patterns = config.include.iter().flatten().chain(&config.exclude);
        if patterns.clone().any(String::is_empty) {
            return Err(
                "a pattern is empty: patterns are key names, where '*' matches any run of characters".into(),
            );
        }
        Ok(config)
    }

    fn keeps(&self, key: &str) -> bool {
        self.include
            .as_ref()
            .is_none_or(|include| include.iter().any(|p| glob_matches(p, key)))
            && !self.exclude.iter().any(|p| glob_matches(p, key))
    }
}

struct FilterKeys;

impl Guest for FilterKeys {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "filter-keys".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "Keeps only the data and binaryData keys that match include globs and no exclude glob".into(),
            kinds: vec!["Secret".into(), "ConfigMap".into()],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        let config = Config::parse(&config)?;
        if config.include.is_none() && config.exclude.is_empty() {
            mimeo_plugin_sdk::log::warn("neither include nor exclude given: every key is kept");
        }
        Ok(())
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        let before = parse_object(&object)?;
        let mut after = before.clone();
        for field in DATA_FIELDS {
            if let Some(Value::Object(map)) = after.get_mut(field) {
                map.retain(|key, _| config.keeps(key));
            }
        }
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(FilterKeys);

#[cfg(test)]
mod tests {
    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<super::FilterKeys>(env!("CARGO_MANIFEST_DIR"));
    }
}
