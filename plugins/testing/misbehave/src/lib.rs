//! `misbehave`: a plugin for the tests of mimeo's plugin host, which misbehaves as its config
//! says. See README.md for the config.

use mimeo_plugin_sdk::log::{self, Level};
use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo, parse_config, parse_object};
use serde::Deserialize;
use serde_json::Value;
use std::hint::black_box;

/// Everything `do` may say.
const ACTIONS: [&str; 18] = [
    "ok",
    "loop",
    "alloc",
    "trap",
    "huge-output",
    "invalid-json",
    "change-kind",
    "change-namespace",
    "drop-ownership",
    "skip",
    "error",
    "log",
    "unchanged",
    "merge",
    "sleep",
    "poll-clock",
    "recurse",
    "recurse-big-frames",
];

/// What `validate-config` can be made to do too (with `"during": "validate-config"`).
const IN_VALIDATE: [&str; 8] = [
    "ok",
    "loop",
    "alloc",
    "trap",
    "error",
    "log",
    "sleep",
    "poll-clock",
];

/// How long `sleep` sleeps and `poll-clock` polls: far past any deadline.
const AN_HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

const HUGE_DEFAULT: usize = 64 << 20;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    /// The misbehaviour; absent means `ok`.
    #[serde(default = "ok", rename = "do")]
    action: String,
    /// Skip (only) when the target namespace is this one.
    skip_namespace: Option<String>,
    /// `transform` (default) or `validate-config`: when to misbehave.
    #[serde(default = "transform")]
    during: String,
    /// Size of the string `huge-output` tries to return (default 64 MiB).
    #[serde(default)]
    bytes: Option<usize>,
    /// Number of lines `log` logs (default 1000).
    #[serde(default)]
    lines: Option<usize>,
    /// What `merge` merges into the object (a JSON merge patch: `null` removes a field).
    #[serde(default)]
    patch: Option<Value>,
    /// The text of `skip`'s reason and `error`'s message instead of the usual one; `{data}` in it
    /// becomes the object's `data`, as a plugin that leaks its input would write it.
    #[serde(default)]
    say: Option<String>,
    /// Milliseconds `transform` spends busy (reading the clock) before it does `do`: a plugin
    /// slow to make its output.
    #[serde(default)]
    busy_ms: Option<u64>,
}

/// A JSON merge patch (RFC 7386) applied to `target`.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

impl Config {
    /// `say` with `{data}` filled in from `object`, or `usual`.
    fn said(&self, object: &str, usual: &str) -> String {
        let Some(say) = &self.say else {
            return usual.to_owned();
        };
        let data = serde_json::from_str::<Value>(object)
            .ok()
            .and_then(|o| o.get("data").cloned())
            .unwrap_or(Value::Null);
        say.replace("{data}", &data.to_string())
    }
}

fn ok() -> String {
    "ok".into()
}
fn transform() -> String {
    "transform".into()
}

impl Config {
    /// Parses without misbehaving: a config the plugin cannot read is a real error.
    fn parse(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        if !ACTIONS.contains(&config.action.as_str()) {
            return Err(format!(
                "do: unknown {:?}; known: {}",
                config.action,
                ACTIONS.join(", ")
            ));
        }
        match config.during.as_str() {
            "transform" => {}
            "validate-config" if IN_VALIDATE.contains(&config.action.as_str()) => {}
            "validate-config" => {
                return Err(format!(
                    "do {:?} cannot happen during validate-config; these can: {}",
                    config.action,
                    IN_VALIDATE.join(", ")
                ));
            }
            other => {
                return Err(format!(
                    "during: unknown {other:?}; known: transform, validate-config"
                ));
            }
        }
        Ok(config)
    }
}

/// The misbehaviours that need no object; `None` when `action` is not one of them.
fn common(config: &Config) -> Option<Result<(), String>> {
    match config.action.as_str() {
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = black_box(n.wrapping_add(1));
            }
        }
        "alloc" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Write into each MiB so that it is really used, whatever the allocator does.
                let mut chunk = vec![0u8; 1 << 20];
                for i in (0..chunk.len()).step_by(4096) {
                    chunk[i] = 1;
                }
                hoard.push(black_box(chunk));
            }
        }
        "sleep" => {
            // Blocks in WASI (a monotonic-clock pollable), where epoch interruption cannot reach.
            std::thread::sleep(AN_HOUR);
            Some(Ok(()))
        }
        "poll-clock" => {
            // Asks the host for the time without end: many short host calls, no blocking.
            let start = std::time::Instant::now();
            while black_box(start.elapsed()) < AN_HOUR {}
            Some(Ok(()))
        }
        "trap" => panic!("asked to trap"),
        "recurse" => {
            // Without end, and not a tail call: the host's stack limit must stop it.
            #[allow(unconditional_recursion)]
            fn deeper(n: u64) -> u64 {
                black_box(deeper(black_box(n + 1))) + 1
            }
            Some(Ok(black_box(deeper(0))).map(|_| ()))
        }
        "recurse-big-frames" => {
            // Each frame holds 64 KiB in linear memory, where a Rust guest keeps its stack (1 MiB,
            // at the bottom of memory): that stack runs out, below address 0, long before the
            // host's stack limit is reached, and the access traps as out of bounds.
            #[allow(unconditional_recursion)]
            fn deeper(n: u64) -> u64 {
                let mut frame = [0u8; 64 << 10];
                frame[(n as usize) % frame.len()] = n as u8;
                black_box(&mut frame);
                black_box(deeper(black_box(n + 1))) + u64::from(frame[0])
            }
            Some(Ok(black_box(deeper(0))).map(|_| ()))
        }
        "error" => Some(Err("asked to fail".into())),
        "log" => {
            let lines = config.lines.unwrap_or(1000);
            let levels = [Level::Trace, Level::Debug, Level::Info, Level::Warn, Level::Error];
            for i in 0..lines {
                log::log(
                    levels[i % levels.len()],
                    &format!("misbehave: log line {} of {lines}", i + 1),
                );
            }
            Some(Ok(()))
        }
        "ok" | "unchanged" => Some(Ok(())),
        _ => None,
    }
}

/// `json` (an object) with one more field, `"misbehave"`, holding `want` bytes of 'x': or as many
/// as this instance can allocate, halving the size until the allocation succeeds.
fn huge_output(json: &str, want: usize) -> String {
    let head = json.strip_suffix('}').unwrap_or(json);
    let comma = if head.trim_end().ends_with('{') { "" } else { "," };
    let mut size = want.max(1);
    loop {
        let mut out = String::new();
        if out.try_reserve_exact(head.len() + size + 32).is_ok() {
            out.push_str(head);
            out.push_str(comma);
            out.push_str(r#""misbehave":""#);
            out.extend(std::iter::repeat_n('x', size));
            out.push_str(r#""}"#);
            return out;
        }
        log::warn(&format!("misbehave: cannot allocate {size} bytes, trying half"));
        size /= 2;
    }
}

struct Misbehave;

impl Guest for Misbehave {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "misbehave".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Misbehaves as its config says, for tests of mimeo's plugin host".into(),
            kinds: vec![],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        let config = Config::parse(&config)?;
        if config.during == "validate-config" {
            return common(&config).unwrap_or(Ok(()));
        }
        Ok(())
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        if let Some(ns) = &config.skip_namespace
            && ctx.target.namespace.as_deref() == Some(ns.as_str())
        {
            return Ok(Outcome::Skip(format!("asked to skip namespace {ns}")));
        }
        if config.during != "transform" {
            return Ok(Outcome::Unchanged);
        }
        if let Some(ms) = config.busy_ms {
            let start = std::time::Instant::now();
            while black_box(start.elapsed()) < std::time::Duration::from_millis(ms) {}
        }
        if config.action == "error" {
            return Err(config.said(&object, "asked to fail"));
        }
        if let Some(result) = common(&config) {
            return result.map(|()| Outcome::Unchanged);
        }
        let mut o = parse_object(&object)?;
        match config.action.as_str() {
            "skip" => return Ok(Outcome::Skip(config.said(&object, "asked to skip"))),
            "merge" => {
                let mut whole = Value::Object(o);
                merge(&mut whole, config.patch.as_ref().unwrap_or(&Value::Null));
                return Ok(Outcome::Write(whole.to_string()));
            }
            "invalid-json" => return Ok(Outcome::Write(r#"{"apiVersion": "v1", "kind": not json"#.into())),
            "huge-output" => {
                // Valid JSON, so that only the size is wrong.
                let json = Value::Object(o).to_string();
                return Ok(Outcome::Write(huge_output(
                    &json,
                    config.bytes.unwrap_or(HUGE_DEFAULT),
                )));
            }
            "change-kind" => {
                let kind = if o.get("kind").and_then(Value::as_str) == Some("Secret") {
                    "ConfigMap"
                } else {
                    "Secret"
                };
                o.insert("kind".into(), kind.into());
            }
            "change-namespace" => {
                let ns = ctx.target.namespace.as_deref().unwrap_or("cluster");
                if let Some(Value::Object(meta)) = o.get_mut("metadata") {
                    meta.insert("namespace".into(), format!("{ns}-elsewhere").into());
                }
            }
            "drop-ownership" => {
                if let Some(Value::Object(labels)) = o.get_mut("metadata").and_then(|m| m.get_mut("labels")) {
                    labels.remove("mimeo.dev/managed-by");
                }
            }
            other => unreachable!("action {other} is in ACTIONS but not handled"),
        }
        Ok(Outcome::Write(Value::Object(o).to_string()))
    }
}

mimeo_plugin_sdk::export!(Misbehave);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<Misbehave>(env!("CARGO_MANIFEST_DIR"));
    }

    #[test]
    fn config() {
        assert!(
            Config::parse(r#"{"do": "explode"}"#)
                .unwrap_err()
                .contains("unknown \"explode\"")
        );
        assert!(
            Config::parse(r#"{"do": "skip", "during": "validate-config"}"#)
                .unwrap_err()
                .contains("cannot happen")
        );
        assert_eq!(Config::parse("{}").unwrap().action, "ok");
        assert!(
            Misbehave::validate_config(r#"{"do": "error", "during": "validate-config"}"#.into())
                .unwrap_err()
                .contains("asked to fail")
        );
        assert!(Misbehave::validate_config(r#"{"do": "error"}"#.into()).is_ok());
    }

    #[test]
    fn huge_output_is_valid_json() {
        let ctx = |config: &str| Context {
            rule: "SyncRule/a/b".into(),
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
            config: config.into(),
            inputs: Vec::new(),
        };
        let object = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#.to_string();
        let Ok(Outcome::Write(out)) =
            Misbehave::transform(ctx(r#"{"do": "huge-output", "bytes": 1000}"#), object)
        else {
            panic!("no write");
        };
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["misbehave"].as_str().unwrap().len(), 1000);
        assert_eq!(v["kind"], "Secret");
    }
}
