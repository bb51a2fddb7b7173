//! The configuration object (`MimeoConfig`) over the flags: what it changes of them, which of its
//! changes take effect while mimeo runs (the kinds, read at each reconcile), and which wait for
//! the next start (the plugin host and the registry client are built once). Pure: the object in,
//! settings and the names of the fields out.

use crate::api::MimeoConfigSpec;
use crate::cli::RunArgs;
use crate::sync::kinds::{AllowedKind, default_allowed_kinds};

/// What the schema could not say is wrong with a configuration object.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigProblem {
    pub field: String,
    pub message: String,
}

/// The flags `args` with what `spec` sets in their place.
pub fn apply(spec: &MimeoConfigSpec, args: &RunArgs) -> Result<RunArgs, ConfigProblem> {
    let mut out = args.clone();
    if let Some(kinds) = &spec.allowed_kinds {
        out.allow_kinds = kinds_of("spec.allowedKinds", kinds)?;
    }
    if let Some(kinds) = &spec.next_to_kinds {
        out.next_to_kinds = kinds_of("spec.nextToKinds", kinds)?;
    }
    if let Some(plugins) = &spec.plugins {
        let limits = &mut out.plugins;
        set(&mut limits.plugin_deadline_ms, plugins.deadline_ms);
        set(&mut limits.plugin_memory_mib, plugins.memory_mib.map(to_usize));
        set(&mut limits.plugin_output_kib, plugins.output_kib.map(to_usize));
        set(&mut limits.plugin_concurrency, plugins.concurrency);
        set(
            &mut limits.plugin_compile_timeout_secs,
            plugins.compile_timeout_secs,
        );
        set(&mut limits.plugin_compile_memory_mib, plugins.compile_memory_mib);
    }
    if let Some(registries) = &spec.registries {
        if let Some((i, host)) = registries
            .allowed
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, h)| !is_registry_host(h))
        {
            return Err(ConfigProblem {
                field: format!("spec.registries.allowed[{i}]"),
                message: format!(
                    "{host:?} is not a registry: write host[:port] as oci:// references name it (registry.example.com:5000), with no scheme or path"
                ),
            });
        }
        set(&mut out.oci.plugin_allowed_registries, registries.allowed.clone());
        set(&mut out.oci.plugin_require_digest, registries.require_digest);
    }
    Ok(out)
}

/// Whether `text` names a registry as an `oci://` reference does: a host, and a port maybe. An
/// entry with a scheme or a path would never match one, and so refuse every plugin.
fn is_registry_host(text: &str) -> bool {
    let (host, port) = text.rsplit_once(':').unwrap_or((text, ""));
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && port.chars().all(|c| c.is_ascii_digit())
        && (port.is_empty() != text.contains(':'))
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn kinds_of(field: &str, kinds: &[String]) -> Result<Vec<AllowedKind>, ConfigProblem> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            kind.parse()
                .map_err(|e: crate::sync::kinds::InvalidAllowedKind| ConfigProblem {
                    field: format!("{field}[{i}]"),
                    message: e.to_string(),
                })
        })
        .collect()
}

/// The kinds that take effect while mimeo runs: those rules may sync (the defaults when none are
/// given) and those `nextTo` may follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub allowed: Vec<AllowedKind>,
    pub next_to: Vec<AllowedKind>,
}

impl Kinds {
    pub fn of(args: &RunArgs) -> Kinds {
        Kinds {
            allowed: match args.allow_kinds.is_empty() {
                true => default_allowed_kinds(),
                false => args.allow_kinds.clone(),
            },
            next_to: args.next_to_kinds.clone(),
        }
    }
}

/// Each setting that takes effect only when mimeo starts: the field of the object that sets it,
/// and its value in `args`.
fn at_start(args: &RunArgs) -> [(&'static str, String); 8] {
    let plugins = &args.plugins;
    [
        ("spec.plugins.deadlineMs", plugins.plugin_deadline_ms.to_string()),
        ("spec.plugins.memoryMiB", plugins.plugin_memory_mib.to_string()),
        ("spec.plugins.outputKiB", plugins.plugin_output_kib.to_string()),
        ("spec.plugins.concurrency", plugins.plugin_concurrency.to_string()),
        (
            "spec.plugins.compileTimeoutSecs",
            plugins.plugin_compile_timeout_secs.to_string(),
        ),
        (
            "spec.plugins.compileMemoryMiB",
            plugins.plugin_compile_memory_mib.to_string(),
        ),
        (
            "spec.registries.allowed",
            args.oci.plugin_allowed_registries.join(","),
        ),
        (
            "spec.registries.requireDigest",
            args.oci.plugin_require_digest.to_string(),
        ),
    ]
}

/// The fields whose setting in `wanted` differs from what mimeo `started` with: they take effect
/// at the next start.
pub fn restart_needed(started: &RunArgs, wanted: &RunArgs) -> Vec<&'static str> {
    at_start(started)
        .into_iter()
        .zip(at_start(wanted))
        .filter(|((_, was), (_, now))| was != now)
        .map(|((field, _), _)| field)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PluginSettings, RegistrySettings};
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn flags(args: &[&str]) -> RunArgs {
        let Command::Run(args) = Cli::try_parse_from(["mimeo", "run"].iter().chain(args))
            .unwrap()
            .command
        else {
            panic!("not run")
        };
        *args
    }

    #[test]
    fn what_the_object_sets_wins_and_what_it_leaves_out_keeps_the_flag() {
        let args = flags(&[
            "--allow-kind=Secret",
            "--plugin-deadline-ms=250",
            "--plugin-require-digest",
        ]);
        let spec = MimeoConfigSpec {
            allowed_kinds: Some(vec!["ConfigMap".into(), "Policy.kyverno.io".into()]),
            plugins: Some(PluginSettings {
                memory_mib: Some(32),
                ..Default::default()
            }),
            ..Default::default()
        };
        let applied = apply(&spec, &args).unwrap();
        let kinds = Kinds::of(&applied);
        assert_eq!(
            kinds.allowed.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["ConfigMap", "Policy.kyverno.io"]
        );
        assert_eq!(applied.plugins.plugin_memory_mib, 32);
        assert_eq!(
            applied.plugins.plugin_deadline_ms, 250,
            "not set by the object: the flag's"
        );
        assert!(applied.oci.plugin_require_digest);
        assert_eq!(restart_needed(&args, &applied), ["spec.plugins.memoryMiB"]);
        assert!(restart_needed(&applied, &applied).is_empty());
    }

    #[test]
    fn an_empty_allow_list_means_the_defaults_and_a_registry_is_a_host() {
        let args = flags(&[]);
        let spec = MimeoConfigSpec {
            allowed_kinds: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(
            Kinds::of(&apply(&spec, &args).unwrap()).allowed,
            default_allowed_kinds()
        );
        for wrong in [
            "https://registry.example.com",
            "registry.example.com/team",
            "host:",
            "",
        ] {
            let spec = MimeoConfigSpec {
                registries: Some(RegistrySettings {
                    allowed: Some(vec!["ok.example.com:5000".into(), wrong.into()]),
                    require_digest: None,
                }),
                ..Default::default()
            };
            let problem = apply(&spec, &args).unwrap_err();
            assert_eq!(problem.field, "spec.registries.allowed[1]", "{wrong:?}");
            assert!(problem.message.contains("not a registry"), "{problem}");
        }
        let spec = MimeoConfigSpec {
            registries: Some(RegistrySettings {
                allowed: Some(vec!["registry.example.com".into()]),
                require_digest: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            restart_needed(&args, &apply(&spec, &args).unwrap()),
            ["spec.registries.allowed"]
        );
    }
}
