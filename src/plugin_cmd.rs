//! `mimeo plugin test` and `mimeo plugin inspect`: the plugin author's loop, with the same host,
//! limits and output checks as the controller.

use anyhow::{Context, bail};
use mimeo::cli::{PluginInspectArgs, PluginTestArgs};
use mimeo::plugin::{ChainOutcome, PluginHost, TransformContext};
use std::process::ExitCode;

/// Exit code when the chain skipped the copy.
const EXIT_SKIPPED: u8 = 3;

pub fn test(args: PluginTestArgs) -> anyhow::Result<ExitCode> {
    let host = PluginHost::new(args.limits.host_settings())?;
    let text =
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let mut object: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not a YAML or JSON object", args.file.display()))?;
    if !object.is_object() {
        bail!("{} does not hold an object", args.file.display());
    }
    if let Some(ns) = &args.target_namespace {
        object["metadata"]["namespace"] = ns.clone().into();
    }
    if let Some(name) = &args.target_name {
        object["metadata"]["name"] = name.clone().into();
    }
    let mut chain = Vec::new();
    for (i, path) in args.plugins.iter().enumerate() {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let plugin = host
            .load(&path.display().to_string(), &bytes)
            .with_context(|| format!("loading {}", path.display()))?;
        let config = match args.configs.get(i).map(String::as_str) {
            Some(file) if file.starts_with('@') => std::fs::read_to_string(&file[1..])
                .with_context(|| format!("reading config {}", &file[1..]))?,
            Some(json) => json.to_owned(),
            None => "{}".to_owned(),
        };
        serde_json::from_str::<serde_json::Value>(&config)
            .with_context(|| format!("the config for {} is not JSON", path.display()))?;
        if let Err(e) = host.validate_config(&plugin, &config) {
            eprintln!("error: {}: {e}", path.display());
            return Ok(ExitCode::FAILURE);
        }
        chain.push((plugin, config));
    }
    let mut ctx = TransformContext {
        rule: args.rule.clone(),
        source_api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
        source_kind: object["kind"].as_str().unwrap_or_default().to_owned(),
        source_namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
        source_name: object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
        source_cluster: String::new(),
        target_cluster: String::new(),
        target_namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
        target_name: object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
    };
    if let Some(path) = &args.context {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let given: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        apply_context(&mut ctx, &given).with_context(|| format!("in {}", path.display()))?;
    }
    match host.run_chain(&chain, &ctx, object) {
        Ok(ChainOutcome::Write(out)) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!("{}", serde_yaml_ng::to_string(&out)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Ok(ChainOutcome::Skip { plugin, reason }) => {
            eprintln!("skipped by plugin {plugin}: {reason}");
            Ok(ExitCode::from(EXIT_SKIPPED))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Overrides context fields from a JSON object with the documented keys.
fn apply_context(ctx: &mut TransformContext, given: &serde_json::Value) -> anyhow::Result<()> {
    let Some(given) = given.as_object() else {
        bail!("the context is not a JSON object")
    };
    for (key, value) in given {
        let text = || -> anyhow::Result<String> {
            value
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("{key} must be a string"))
        };
        let namespace = || -> anyhow::Result<Option<String>> {
            match value {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::String(s) => Ok(Some(s.clone())),
                _ => bail!("{key} must be a string or null"),
            }
        };
        match key.as_str() {
            "rule" => ctx.rule = text()?,
            "sourceApiVersion" => ctx.source_api_version = text()?,
            "sourceKind" => ctx.source_kind = text()?,
            "sourceNamespace" => ctx.source_namespace = namespace()?,
            "sourceName" => ctx.source_name = text()?,
            "sourceCluster" => ctx.source_cluster = text()?,
            "targetCluster" => ctx.target_cluster = text()?,
            "targetNamespace" => ctx.target_namespace = namespace()?,
            "targetName" => ctx.target_name = text()?,
            other => bail!("unknown context key {other:?}"),
        }
    }
    Ok(())
}

pub fn inspect(args: PluginInspectArgs) -> anyhow::Result<ExitCode> {
    let host = PluginHost::new(args.limits.host_settings())?;
    let bytes = std::fs::read(&args.plugin).with_context(|| format!("reading {}", args.plugin.display()))?;
    let plugin = host.load(&args.plugin.display().to_string(), &bytes)?;
    println!("plugin:      {} {}", plugin.info.name, plugin.info.version);
    println!("description: {}", plugin.info.description);
    let kinds = if plugin.info.kinds.is_empty() {
        "any".to_owned()
    } else {
        plugin.info.kinds.join(", ")
    };
    println!("kinds:       {kinds}");
    println!("interface:   mimeo:transform@{}", plugin.interface_version);
    println!("size:        {} bytes", plugin.size);
    println!("digest:      {}", plugin.digest);
    println!("exports:");
    for export in &plugin.exports {
        println!("  {export}");
    }
    println!("imports:");
    for import in &plugin.imports {
        println!("  {import}");
    }
    Ok(ExitCode::SUCCESS)
}
