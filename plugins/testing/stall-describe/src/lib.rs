//! `stall-describe` (tests only): a plugin whose `describe`, which mimeo calls when it loads a
//! plugin, sleeps for an hour in a WASI call. Loading it must end at the host's deadline.

use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo};

struct StallDescribe;

impl Guest for StallDescribe {
    fn describe() -> PluginInfo {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        PluginInfo {
            name: "stall-describe".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Sleeps in describe".into(),
            kinds: vec![],
        }
    }

    fn validate_config(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn transform(_ctx: Context, _object: String) -> Result<Outcome, String> {
        Ok(Outcome::Unchanged)
    }
}

mimeo_plugin_sdk::export!(StallDescribe);
