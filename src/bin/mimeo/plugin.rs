//! `mimeo plugin test`, `inspect`, `push` and `pull`: the plugin author's loop, with the same
//! host, limits and output checks as the controller, and the registry client it uses.

use anyhow::{Context, bail};
use mimeo::cli::{
    PluginInspectArgs, PluginLocation, PluginNewArgs, PluginPullArgs, PluginPushArgs, PluginTestArgs,
    RegistryArgs,
};
use mimeo::cmd::plugin_fixtures::{self, Ran};
use mimeo::plugin::oci::{
    ANNOTATION_DESCRIPTION, Credentials, Fetched, Oci, OciReference, credentials_from_docker_config,
    helper_for, plugin_annotations, run_helper,
};
use mimeo::plugin::{ChainOutcome, Plugin, PluginError, PluginHost, TransformContext, TransformInput};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code when the chain skipped the copy.
const EXIT_SKIPPED: u8 = 3;

/// The registry client for a command that names `references`.
fn registry_client(args: &RegistryArgs, references: &[&OciReference]) -> anyhow::Result<Oci> {
    let registries: Vec<&str> = references.iter().map(|r| r.registry.as_str()).collect();
    Ok(Oci::new(args.oci_settings(&registries)?)?)
}

/// Credentials for `registry`: the flags (or their environment variables), else the Docker
/// config's entry, else none.
fn credentials(args: &RegistryArgs, registry: &str) -> anyhow::Result<Credentials> {
    match (&args.username, &args.password) {
        (Some(username), Some(password)) => {
            return Ok(Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        (None, None) => {}
        _ => bail!(
            "give both --username and --password (or MIMEO_REGISTRY_USERNAME and MIMEO_REGISTRY_PASSWORD)"
        ),
    }
    let (path, explicit) = match &args.docker_config {
        Some(path) => (path.clone(), true),
        None => match default_docker_config() {
            Some(path) => (path, false),
            None => return Ok(Credentials::Anonymous),
        },
    };
    let json = match std::fs::read(&path) {
        Ok(json) => json,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => return Ok(Credentials::Anonymous),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let found =
        credentials_from_docker_config(&json, registry).with_context(|| format!("in {}", path.display()))?;
    if let Some(found) = found {
        return Ok(found);
    }
    // No password in `auths`: the helper the config names for the registry, as docker runs it.
    let Some(helper) = helper_for(&json, registry) else {
        return Ok(Credentials::Anonymous);
    };
    match run_helper(&helper, registry)? {
        Some(found) => Ok(found),
        None => {
            eprintln!(
                "note: the credential helper docker-credential-{helper} has nothing for {registry}: trying without credentials"
            );
            Ok(Credentials::Anonymous)
        }
    }
}

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
fn default_docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".docker/config.json"))
}

async fn fetch(oci: &Oci, args: &RegistryArgs, reference: &OciReference) -> anyhow::Result<Fetched> {
    let credentials = credentials(args, &reference.registry)?;
    oci.fetch(reference, &credentials)
        .await
        .with_context(|| format!("pulling {reference}"))
}

/// The bytes of each plugin, in order, with the name it is loaded under.
async fn plugin_bytes(
    locations: &[PluginLocation],
    args: &RegistryArgs,
) -> anyhow::Result<Vec<(String, Vec<u8>, Option<Fetched>)>> {
    let references: Vec<&OciReference> = locations
        .iter()
        .filter_map(|l| match l {
            PluginLocation::Oci(reference) => Some(reference),
            PluginLocation::File(_) => None,
        })
        .collect();
    let oci = if references.is_empty() {
        None
    } else {
        Some(registry_client(args, &references)?)
    };
    let mut plugins = Vec::new();
    for location in locations {
        match (location, &oci) {
            (PluginLocation::File(path), _) => {
                let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                plugins.push((path.display().to_string(), bytes, None));
            }
            (PluginLocation::Oci(reference), Some(oci)) => {
                let fetched = fetch(oci, args, reference).await?;
                let name = reference.pinned(&fetched.manifest_digest).to_string();
                plugins.push((name, fetched.bytes.to_vec(), Some(fetched)));
            }
            (PluginLocation::Oci(_), None) => unreachable!("a client is made when there is a reference"),
        }
    }
    Ok(plugins)
}

/// `mimeo plugin new`: writes the new plugin's files into DIR/NAME, which must not hold any.
pub fn new(args: PluginNewArgs) -> anyhow::Result<ExitCode> {
    use std::os::unix::fs::PermissionsExt;
    let files = mimeo::cmd::plugin_new::files(args.lang, &args.name)?;
    let folder = args.dir.join(&args.name);
    if folder.exists() && std::fs::read_dir(&folder).map_or(true, |mut d| d.next().is_some()) {
        bail!(
            "{} exists and is not empty: mimeo plugin new writes into a new folder",
            folder.display()
        );
    }
    for file in &files {
        let path = folder.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
        }
        std::fs::write(&path, &file.content).with_context(|| format!("writing {}", path.display()))?;
        if file.executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    println!("wrote {} files into {}", files.len(), folder.display());
    println!(
        "next: cd {} && ./build.sh && mimeo plugin test --fixtures fixtures build/{}.wasm",
        folder.display(),
        args.name
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn test(args: PluginTestArgs) -> anyhow::Result<ExitCode> {
    mimeo::telemetry::init_plugin_log();
    let plugins = plugin_bytes(&args.plugins, &args.registry).await?;
    tokio::task::block_in_place(|| {
        let host = PluginHost::new(args.limits.host_settings())?;
        // A Python or JavaScript component compiles for 15 to 20 s the first time: say so on a
        // terminal (in a pipe, nothing but the result).
        let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let loaded = plugins
            .iter()
            .map(|(name, bytes, _)| {
                let started = std::time::Instant::now();
                if on_terminal {
                    eprintln!("loading {name} (compiled on first use, then cached)...");
                }
                let plugin = host
                    .load(name, bytes)
                    .with_context(|| format!("loading {name}"))?;
                if on_terminal {
                    eprintln!("loaded {name} in {:.1} s", started.elapsed().as_secs_f64());
                }
                Ok((name.clone(), plugin))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        match &args.fixtures {
            Some(dir) => run_fixtures(&host, &loaded, &args, dir),
            None => run_test(&host, &loaded, &args),
        }
    })
}

/// The plugins, loaded once, with the name each is shown under.
type Loaded = [(String, Arc<Plugin>)];

/// One run of the chain: the object and what the context, configs and inputs come from.
struct OneRun<'a> {
    object: &'a Path,
    /// Per plugin, in order: JSON, or `@file`.
    configs: Vec<String>,
    context: Option<&'a Path>,
    /// `NAME=FILE`, in the rule's order.
    inputs: Vec<String>,
}

/// What a run gave, and wasmtime's frames when a plugin trapped.
struct Outcome {
    ran: Ran,
    frames: Option<String>,
}

/// `mimeo plugin test -f FILE`: the outcome on stderr, the object written on stdout.
fn run_test(host: &PluginHost, loaded: &Loaded, args: &PluginTestArgs) -> anyhow::Result<ExitCode> {
    let file = args.file.as_deref().context("give -f FILE (or --fixtures DIR)")?;
    let run = OneRun {
        object: file,
        configs: args.configs.clone(),
        context: args.context.as_deref(),
        inputs: args.inputs.clone(),
    };
    let outcome = run_once(host, loaded, args, &run)?;
    match outcome.ran {
        Ran::Write { object, unchanged } => {
            // On a line of its own, so that a script (or an author) can tell the two apart.
            let outcome = if unchanged { "unchanged" } else { "write" };
            eprintln!("outcome: {outcome}");
            if args.json || args.output == mimeo::cli::ObjectOutput::Json {
                println!("{}", serde_json::to_string_pretty(&object)?);
            } else {
                print!("{}", serde_yaml_ng::to_string(&object)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Ran::Skip(said) => {
            eprintln!("{said}");
            Ok(ExitCode::from(EXIT_SKIPPED))
        }
        Ran::Error(message) => {
            eprintln!("error: {message}");
            if let (true, Some(frames)) = (args.verbose, outcome.frames) {
                eprintln!("{frames}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `mimeo plugin test --fixtures DIR`: every case of the folder (`cmd::plugin_fixtures`), a line
/// each; exit 1 when one did not come out as it expects.
fn run_fixtures(
    host: &PluginHost,
    loaded: &Loaded,
    args: &PluginTestArgs,
    dir: &Path,
) -> anyhow::Result<ExitCode> {
    let cases = plugin_fixtures::cases(dir)?;
    let mut failed = 0;
    for case in &cases {
        let run = OneRun {
            object: &case.object,
            configs: case.config.iter().map(|c| format!("@{}", c.display())).collect(),
            context: case.context.as_deref(),
            inputs: case
                .inputs
                .iter()
                .map(|(name, file)| format!("{name}={}", file.display()))
                .collect(),
        };
        let judged = run_once(host, loaded, args, &run)
            .map_err(|e| format!("{e:#}"))
            .and_then(|outcome| plugin_fixtures::check(&case.expected, &outcome.ran));
        match judged {
            Ok(()) => println!("ok    {}", case.name),
            Err(why) => {
                failed += 1;
                println!("FAIL  {}: {why}", case.name);
            }
        }
    }
    println!(
        "{} of {} cases passed{}",
        cases.len() - failed,
        cases.len(),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        }
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the chain once. A file that cannot be read is an error; what the plugins and mimeo's
/// checks say is the outcome.
fn run_once(
    host: &PluginHost,
    loaded: &Loaded,
    args: &PluginTestArgs,
    run: &OneRun,
) -> anyhow::Result<Outcome> {
    let text =
        std::fs::read_to_string(run.object).with_context(|| format!("reading {}", run.object.display()))?;
    let mut object: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not a YAML or JSON object", run.object.display()))?;
    if !object.is_object() {
        bail!("{} does not hold an object", run.object.display());
    }
    if let Some(ns) = &args.target_namespace {
        object["metadata"]["namespace"] = ns.clone().into();
    }
    if let Some(name) = &args.target_name {
        object["metadata"]["name"] = name.clone().into();
    }
    let mut chain = Vec::new();
    for (i, (name, plugin)) in loaded.iter().enumerate() {
        let config = match run.configs.get(i).map(String::as_str) {
            Some(file) if file.starts_with('@') => std::fs::read_to_string(&file[1..])
                .with_context(|| format!("reading config {}", &file[1..]))?,
            Some(json) => json.to_owned(),
            None => "{}".to_owned(),
        };
        serde_json::from_str::<serde_json::Value>(&config)
            .with_context(|| format!("the config for {name} is not JSON"))?;
        if let Err(e) = host.validate_config(plugin, &config) {
            return Ok(Outcome {
                ran: Ran::Error(format!("{name}: {e}")),
                frames: None,
            });
        }
        chain.push((plugin.clone(), config));
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
        inputs: Default::default(),
    };
    if let Some(path) = run.context {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let given: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        apply_context(&mut ctx, &given).with_context(|| format!("in {}", path.display()))?;
    }
    ctx.inputs = run
        .inputs
        .iter()
        .map(|given| read_input(given, &ctx.source_cluster))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into();
    let input = object.clone();
    Ok(match host.run_chain(&chain, &ctx, object) {
        Ok(ChainOutcome::Write(out)) => Outcome {
            ran: Ran::Write {
                unchanged: out == input,
                object: out,
            },
            frames: None,
        },
        Ok(ChainOutcome::Skip { plugin, reason }) => Outcome {
            ran: Ran::Skip(format!("skipped by plugin {plugin}: {reason}")),
            frames: None,
        },
        Err(e) => Outcome {
            frames: match &e.error {
                PluginError::Trap { frames, .. } => Some(frames.clone()),
                _ => None,
            },
            ran: Ran::Error(e.to_string()),
        },
    })
}

/// One `--input NAME=FILE`: the object read from the file, its reference from its own fields.
fn read_input(given: &str, cluster: &str) -> anyhow::Result<TransformInput> {
    let Some((name, file)) = given.split_once('=') else {
        bail!("--input {given}: give NAME=FILE")
    };
    let text = std::fs::read_to_string(file).with_context(|| format!("reading input {name} from {file}"))?;
    let object: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("input {name}: {file} is not YAML or JSON"))?;
    if !object.is_object() {
        bail!("input {name}: {file} does not hold an object");
    }
    let field = |path: &str| object.pointer(path).and_then(|v| v.as_str()).map(str::to_owned);
    Ok(TransformInput {
        name: name.to_owned(),
        api_version: field("/apiVersion").unwrap_or_default(),
        kind: field("/kind").unwrap_or_default(),
        namespace: field("/metadata/namespace"),
        object_name: field("/metadata/name").unwrap_or_default(),
        cluster: cluster.to_owned(),
        object: object.to_string(),
    })
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

pub async fn inspect(args: PluginInspectArgs) -> anyhow::Result<ExitCode> {
    let mut plugins = plugin_bytes(std::slice::from_ref(&args.plugin), &args.registry).await?;
    let (name, bytes, fetched) = plugins.pop().expect("one plugin asked, one returned");
    let host = PluginHost::new(args.limits.host_settings())?;
    let plugin = tokio::task::block_in_place(|| host.load(&name, &bytes))?;
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
    if let Some(fetched) = &fetched {
        println!("reference:   {name}");
        println!("manifest:    {}", fetched.manifest_digest);
    }
    println!("exports:");
    for export in &plugin.exports {
        println!("  {export}");
    }
    println!("imports:");
    for import in &plugin.imports {
        println!("  {import}");
    }
    if let Some(fetched) = fetched.filter(|f| !f.annotations.is_empty()) {
        println!("annotations:");
        for (key, value) in &fetched.annotations {
            println!("  {key}: {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn push(args: PluginPushArgs) -> anyhow::Result<ExitCode> {
    let file = &args.file;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    // The controller's own checks: a component, exporting an interface version this mimeo runs,
    // that links against the host and describes itself.
    let host = PluginHost::new(args.limits.host_settings())?;
    let plugin = tokio::task::block_in_place(|| host.load(&file.display().to_string(), &bytes))
        .with_context(|| format!("{} is not a plugin this mimeo can run", file.display()))?;
    let mut annotations = plugin_annotations(&plugin.interface_version, &plugin.info);
    if let Some(description) = &args.description {
        annotations.insert(ANNOTATION_DESCRIPTION.to_owned(), description.clone());
    }
    let oci = registry_client(&args.registry, &[&args.reference])?;
    let credentials = credentials(&args.registry, &args.reference.registry)?;
    let digest = oci
        .push(&bytes, &args.reference, &credentials, annotations)
        .await
        .with_context(|| format!("pushing {}", args.reference))?;
    println!("digest: {digest}");
    println!("pinned: {}", args.reference.pinned(&digest));
    Ok(ExitCode::SUCCESS)
}

pub async fn pull(args: PluginPullArgs) -> anyhow::Result<ExitCode> {
    let oci = registry_client(&args.registry, &[&args.reference])?;
    let fetched = fetch(&oci, &args.registry, &args.reference).await?;
    write_atomically(&args.output, &fetched.bytes)
        .with_context(|| format!("writing {}", args.output.display()))?;
    println!("digest: {}", fetched.manifest_digest);
    println!("pinned: {}", args.reference.pinned(&fetched.manifest_digest));
    println!("layer:  {} ({} bytes)", fetched.layer_digest, fetched.bytes.len());
    Ok(ExitCode::SUCCESS)
}

/// Writes beside the target, then renames: an interrupted pull leaves no half a component.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    std::fs::write(&partial, bytes)
        .and_then(|()| std::fs::rename(&partial, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })
}
