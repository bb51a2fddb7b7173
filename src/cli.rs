//! The command line: flags parsed into plain values, then handed to the parts that do the work.

use crate::plugin::oci::{CaArgument, RegistryTrust};
use crate::sync::kinds::AllowedKind;
use crate::telemetry::LogFormat;
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "mimeo",
    version,
    about = "Copies Kubernetes objects between namespaces and clusters"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Which cluster a command talks to, as kubectl's flags say it: on every command that talks to
/// one (not on `plugin`'s, whose `test --context` is the transform's context). `run` and `init`
/// take the in-cluster service account when there is no kubeconfig.
#[derive(Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// The kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config (else, in a pod, its
    /// service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context. Default: its current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions mimeo serves, as YAML.
    Crds,
    /// Install or upgrade what `run` needs in the cluster: the CRDs, and the seal key.
    ///
    /// Applies mimeo's CRDs (server-side, as field manager `mimeo`, taking over fields another
    /// manager set), waits until each is Established, and creates the seal key Secret when it
    /// is missing. Safe to run any number of times, also over an older mimeo's CRDs with rules
    /// in use: it removes nothing. Exit status 0 when all of it holds, 1 with what failed. This
    /// is what openMCP's init Job runs; it needs rights on CRDs that `run` does not.
    Init(InitArgs),
    /// Run the controller.
    ///
    /// Runs against the current kubeconfig, or the in-cluster service account.
    Run(Box<RunArgs>),
    /// Show rules and their copies as a tree: each copy's state, since when and why.
    ///
    /// Reads with your own kubeconfig and permissions: the rule and its status, and the metadata
    /// (never the content) of its copies in the rule's cluster. Copies in sync are listed where
    /// you may list them; the rest are counted from the rule's status, with why they are not
    /// listed. Copies not in sync are named by the status wherever they are, RemoteClusters
    /// included. Colours when stdout is a terminal (not with NO_COLOR set).
    Status(StatusArgs),
    /// Test, inspect, push and pull transform plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Work with the clusters that `RemoteCluster`s name.
    #[command(subcommand)]
    Remote(RemoteCommand),
    /// Plan and apply the move from another copy tool to mimeo.
    ///
    /// Prints, as a plan on stdout, the mimeo rules for what another copy tool copies in the
    /// current kubeconfig's cluster, and applies such a plan with --apply (docs/migrating.md).
    /// HelmDeployer's copies on its target clusters are read, and their entries applied, only
    /// through --cluster-kubeconfig.
    /// Exit status: 0 the plan was printed or applied, 1 the cluster could not be read or a part
    /// of the plan was not applied.
    Migrate(MigrateArgs),
    /// Show what applying a rule would do, without writing anything.
    ///
    /// Prints what applying a SyncRule or ClusterSyncRule would do, read with your own kubeconfig
    /// and permissions and decided by the controller's own code: each copy to create, change
    /// (a unified diff; Secret values as digests), delete or orphan, and each left alone with
    /// the reason (a conflict, no consent, a plugin's skip or failure). The transform chain runs
    /// here, under the plugin limits below. Nothing is written. Exit status as `kubectl diff`,
    /// the worst over the file's rules: 0 no change, 1 changes, 2 a rule would be refused, the
    /// diff failed, or a copy is undecided (a `! Failed`, `! PluginFailed`, `! Unreachable` or
    /// `! Unauthorized` line: it could not be read or made); a `! Conflict`, `! NotAccepted` or
    /// other `!` line is decided and counts as no change. Copies in RemoteClusters are not shown;
    /// a mimeo migrate plan's annotations on openMCP Clusters are, read with
    /// --cluster-kubeconfig (else a note says they were not read).
    Diff(DiffArgs),
    /// Seal anew the copies of the rules named, after the seal key was lost.
    ///
    /// When the seal key's Secret is lost, mimeo makes a new key and leaves every copy it made
    /// before alone as a conflict (docs/operator.md, "When the seal key is lost"). This reads
    /// the new key and lists each object in this cluster carrying a rule's marks: `sealed` (its
    /// seal is right), `reseal` (its marks name the rule, a place where the rule copies now and
    /// the source it copies there, and a field manager named mimeo wrote its seal) or `refused`
    /// with why. Look at the list, then run again with --apply to seal the `reseal` ones under
    /// the key; the controller then takes them back as the rule's copies. Copies in
    /// RemoteClusters are not read. Needs the right to read the key's Secret and to list and
    /// patch the copied kind. Exit status: 0 every rule was read (and with --apply every seal
    /// written), 1 otherwise.
    Reseal(ResealArgs),
    /// Stop a rule without deleting its copies: sets spec.suspend.
    ///
    /// mimeo then writes and removes nothing for the rule (its status says Suspended) until it
    /// is resumed; deleting it still removes its copies per its deletion policy. Exit status 0
    /// when the rule was patched, 1 otherwise.
    Suspend(RuleActionArgs),
    /// Let a suspended rule go on: clears spec.suspend.
    ///
    /// Exit status 0 when the rule was patched, 1 otherwise.
    Resume(RuleActionArgs),
    /// Ask for a pass over a rule now, and wait for it.
    ///
    /// Annotates the rule openmcp.cloud/operation=reconcile; mimeo makes a pass and removes the
    /// annotation, and this prints the rule's Ready condition then. Refused for a suspended or
    /// ignored rule. Exit status 0 when the pass was made, 1 otherwise (not taken up within
    /// --timeout: is the controller running?).
    Reconcile(ReconcileArgs),
    /// Print a shell completion script: `source <(mimeo completion bash)`.
    Completion(CompletionArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RuleActionArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The rule: NAME (a SyncRule in the namespace), syncrule/NAME or clustersyncrule/NAME.
    #[arg(value_name = "RULE")]
    pub rule: String,
    /// The namespace of the SyncRule. Default: the kubeconfig context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub rule: RuleActionArgs,
    /// How long to wait for mimeo to make the pass: `90s`, `2m`, or seconds.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Args, Debug, Clone)]
pub struct CompletionArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug, Clone)]
pub struct ResealArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The rules, as copies name them: SyncRule/NAMESPACE/NAME or ClusterSyncRule/NAME.
    #[arg(value_name = "RULE", required = true, value_parser = parse_rule_key)]
    pub rules: Vec<crate::sync::ownership::RuleKey>,
    /// The Secret holding the seal key: the controller's --seal-key-secret. [default:
    /// `$POD_NAMESPACE/mimeo-seal-key`, else `default/mimeo-seal-key`]
    #[arg(long, env = "MIMEO_SEAL_KEY_SECRET", value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub seal_key_secret: Option<(String, String)>,
    /// Write the seals; without it, only list what would be resealed.
    #[arg(long)]
    pub apply: bool,
}

/// `90s`, `2m`, `1h` or a number of seconds, as kubectl's `--timeout` takes them.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("{text:?} is no duration: write 90s, 2m or 1h")),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is no duration: write 90s, 2m or 1h"))?;
    Ok(std::time::Duration::from_secs(number * seconds))
}

fn parse_rule_key(text: &str) -> Result<crate::sync::ownership::RuleKey, String> {
    text.parse().map_err(|()| {
        format!("{text:?} names no rule: write SyncRule/NAMESPACE/NAME or ClusterSyncRule/NAME")
    })
}

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The rule: NAME (a SyncRule in the namespace), syncrule/NAME, clustersyncrule/NAME, or
    /// clustersyncrules for every ClusterSyncRule. Default: every SyncRule of the namespace.
    #[arg(value_name = "RULE")]
    pub rule: Option<String>,
    /// The namespace of the SyncRules. Default: the kubeconfig context's.
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every SyncRule of every namespace, and every ClusterSyncRule.
    #[arg(short = 'A', long, conflicts_with = "rule")]
    pub all_namespaces: bool,
    /// Only the rules that are not Ready (or have no status yet).
    #[arg(long)]
    pub problems: bool,
    /// `text`: a tree; `json`: the same as `{"rules": [...]}`, times as RFC 3339.
    #[arg(short = 'o', long, value_enum, default_value_t = StatusOutput::Text)]
    pub output: StatusOutput,
    /// Colour the tree: `auto` when stdout is a terminal and NO_COLOR is not set.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// How a command prints an object or a document.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectOutput {
    Yaml,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusOutput {
    Text,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The rule, as YAML or JSON (`-` for stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Show Secret values in the diff instead of their size and digest (you can read them anyway:
    /// the diff reads them with your permissions).
    #[arg(long)]
    pub show_secrets: bool,
    /// Where `file://` plugins are read from: a local copy of the controller's --plugin-dir.
    #[arg(long, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// The kinds the controller syncs, as its --allow-kind says (the same default).
    #[arg(long = "allow-kind", value_name = "KIND", value_delimiter = ',')]
    pub allow_kinds: Vec<AllowedKind>,
    /// The kinds targets[].nextTo may follow, as the controller's --next-to-kinds says (default:
    /// none). Their objects are listed with your permissions.
    #[arg(long = "next-to-kinds", value_name = "KIND", value_delimiter = ',')]
    pub next_to_kinds: Vec<AllowedKind>,
    #[command(flatten)]
    pub limits: PluginLimitArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// The kubeconfig file of an openMCP Cluster (NAMESPACE/NAME of the Cluster object) that
    /// HelmDeployer (toTargetCluster) or the resource replicator (location: Onto) copies onto.
    /// Repeat for each. With it, migrate reads that cluster and plans consent and adoption of
    /// their copies there, --apply writes those entries there, and diff shows them. Without it
    /// they are not read, and not applied.
    #[arg(long = "cluster-kubeconfig", value_name = "NAMESPACE/NAME=PATH", value_parser = parse_cluster_kubeconfig)]
    pub cluster_kubeconfigs: Vec<ClusterKubeconfig>,
}

#[derive(Args, Debug, Clone)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The tool to migrate from: replicator (mittwald's kubernetes-replicator), reflector
    /// (emberstack's kubernetes-reflector), kubed (config-syncer), kyverno (generate rules that
    /// clone with synchronize: true), openmcp-helmdeployer (openMCP's HelmDeployer
    /// secretsToCopy) or openmcp-resource-replicator (openMCP's Replicas and ClusterReplicas).
    /// Repeat, or separate with commas. Default: each that shows a sign of having run here (its
    /// marks on a copy; for Kyverno and the openMCP tools, their kinds served); a tool named here
    /// is translated even without one.
    #[arg(long = "from", value_name = "TOOL", value_delimiter = ',', value_parser = ["replicator", "reflector", "kubed", "kyverno", "openmcp-helmdeployer", "openmcp-resource-replicator"])]
    pub from: Vec<String>,
    /// The namespace HelmDeployer's pod runs in: the sources its HelmDeployerConfig names are
    /// there.
    #[arg(long, value_name = "NAMESPACE", default_value = crate::cmd::migrate::helmdeployer::DEFAULT_NAMESPACE)]
    pub helmdeployer_namespace: String,
    /// Also ask kube-system, kube-public and kube-node-lease for consent, and adopt copies there.
    #[arg(long)]
    pub allow_system_namespaces: bool,
    /// Apply a plan this command printed earlier, exactly as the file reads: add its
    /// accept-from entries and adopt-by marks with patches (nothing else of those objects is
    /// touched, and nothing is created), then create its rules. Nothing is read for a new plan.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "allow_system_namespaces"])]
    pub apply: Option<PathBuf>,
    /// How to print the plan: `yaml` or `json` (--apply reads either).
    #[arg(short = 'o', long, value_enum, default_value_t = ObjectOutput::Yaml, conflicts_with = "apply")]
    pub output: ObjectOutput,
    /// The kubeconfig file of an openMCP Cluster (NAMESPACE/NAME of the Cluster object) that
    /// HelmDeployer (toTargetCluster) or the resource replicator (location: Onto) copies onto.
    /// Repeat for each. With it, migrate reads that cluster and plans consent and adoption of
    /// their copies there, --apply writes those entries there, and diff shows them. Without it
    /// they are not read, and not applied.
    #[arg(long = "cluster-kubeconfig", value_name = "NAMESPACE/NAME=PATH", value_parser = parse_cluster_kubeconfig)]
    pub cluster_kubeconfigs: Vec<ClusterKubeconfig>,
}

impl MigrateArgs {
    /// What to translate.
    pub fn options(&self) -> crate::cmd::migrate::Options {
        crate::cmd::migrate::Options {
            named: self
                .from
                .iter()
                .filter_map(|f| crate::cmd::migrate::Tool::named(f))
                .collect(),
            allow_system_namespaces: self.allow_system_namespaces,
            helmdeployer_namespace: self.helmdeployer_namespace.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum RemoteCommand {
    /// Print the RBAC a RemoteCluster's identity needs in its cluster.
    ///
    /// Prints the RBAC that the identity in a RemoteCluster's kubeconfig needs inside the remote
    /// cluster, as multi-document YAML to apply there (`kubectl apply -f -`): a ClusterRole and
    /// ClusterRoleBinding (for a target, or a source with a Kyverno kind), a Role and RoleBinding
    /// per namespace, and for a service account its Namespace and the ServiceAccount.
    Rbac(RemoteRbacArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RemoteRbacArgs {
    /// A kind mimeo copies with this cluster: Secret, ConfigMap, Policy or ClusterPolicy (Kyverno),
    /// or one of Kyverno's CEL policy kinds (ValidatingPolicy, NamespacedValidatingPolicy, ...);
    /// its plural, `Kind.group` (Policy.kyverno.io) or lowercase work too. Repeat for several.
    #[arg(long = "kind", value_name = "KIND", default_value = "Secret")]
    pub kinds: Vec<String>,
    /// A namespace mimeo writes copies to (with --source: reads from), for the namespaced kinds.
    /// Repeat for several. For a target without any, the ClusterRole grants writing copies in
    /// every namespace. A cluster-scoped kind (ClusterPolicy) takes none: it is granted
    /// cluster-wide.
    #[arg(short = 'n', long = "namespace", value_name = "NS")]
    pub namespaces: Vec<String>,
    /// The cluster is a source: grant get, list and watch in the given namespaces (a cluster-scoped
    /// kind cluster-wide), and no writes.
    #[arg(long, conflicts_with = "create_namespaces")]
    pub source: bool,
    /// Also grant create on namespaces (cluster-wide), for a target.
    #[arg(long)]
    pub create_namespaces: bool,
    /// The ServiceAccount the kubeconfig authenticates as.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value = crate::clusters::remote_rbac::DEFAULT_SERVICE_ACCOUNT,
        conflicts_with = "user"
    )]
    pub service_account: String,
    /// The user the kubeconfig authenticates as, instead of a ServiceAccount.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The name of the ClusterRole, ClusterRoleBinding, Roles and RoleBindings [default:
    /// mimeo-remote, with --source mimeo-remote-source].
    #[arg(long)]
    pub name: Option<String>,
}

impl RemoteRbacArgs {
    pub fn options(
        &self,
    ) -> Result<crate::clusters::remote_rbac::RbacOptions, crate::clusters::remote_rbac::RbacError> {
        use crate::clusters::remote_rbac::{Identity, RbacOptions, Use};
        let identity = match &self.user {
            Some(user) => Identity::User(user.clone()),
            None => Identity::service_account(&self.service_account)?,
        };
        Ok(RbacOptions {
            kinds: self.kinds.clone(),
            namespaces: self.namespaces.clone(),
            usage: if self.source { Use::Source } else { Use::Target },
            create_namespaces: self.create_namespaces,
            identity,
            name: self.name.clone(),
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Start a plugin: a folder with a buildable plugin, the WIT, a build script and fixtures.
    ///
    /// For python, javascript, go and c, the repository's example in that language (it adds an
    /// annotation) under the new name; for rust, a crate on wit-bindgen that does the same.
    /// `./build.sh` then writes build/NAME.wasm, and `mimeo plugin test --fixtures fixtures
    /// build/NAME.wasm` runs its cases.
    New(PluginNewArgs),
    /// Run a plugin, or a chain of plugins, on an object, as the controller would.
    ///
    /// Runs the chain in order with the controller's limits and checks, and prints the object to
    /// write as YAML. Exit codes: 0 written (or unchanged), 1 the plugin failed or broke a rule,
    /// 3 the plugin skipped the copy. With --fixtures, every case of a fixtures folder, a line
    /// each: exit 0 when all pass, 1 otherwise.
    Test(PluginTestArgs),
    /// Show what a plugin is: interface version, description, imports, exports, size, digest.
    Inspect(PluginInspectArgs),
    /// Push a plugin to an OCI registry as a Wasm artifact.
    ///
    /// Uses the CNCF layout (config application/vnd.wasm.config.v0+json, one application/wasm
    /// layer), after checking that it is a component implementing an interface version this mimeo
    /// runs. Prints the manifest digest and the pinned reference.
    Push(PluginPushArgs),
    /// Pull a plugin from an OCI registry and write its component, byte for byte as pushed.
    ///
    /// Accepts layers of type application/wasm and application/vnd.wasm.content.layer.v1+wasm.
    /// Prints the manifest digest and the pinned reference.
    Pull(PluginPullArgs),
    /// Compiles the component on stdin into the cache, with limits: what `mimeo run` starts for
    /// each plugin it compiles. Not for use by hand.
    #[command(name = "compile-into-cache", hide = true)]
    CompileIntoCache(CompileIntoCacheArgs),
}

/// The settings of the controller's plugin host that decide what a compiled artifact is, and
/// the compile's memory and CPU time limits.
#[derive(Args, Debug, Clone)]
pub struct CompileIntoCacheArgs {
    #[arg(long)]
    pub digest: String,
    #[arg(long)]
    pub cache_dir: PathBuf,
    #[arg(long)]
    pub cache_mib: u64,
    #[arg(long)]
    pub memory_mib: usize,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    #[arg(long)]
    pub max_compile_mib: u64,
    #[arg(long)]
    pub max_compile_cpu_secs: u64,
}

impl CompileIntoCacheArgs {
    pub fn host_settings(&self) -> crate::plugin::HostSettings {
        crate::plugin::HostSettings {
            cache_dir: self.cache_dir.clone(),
            cache_max_bytes: self.cache_mib.saturating_mul(1 << 20),
            max_memory_bytes: self.memory_mib << 20,
            concurrency: self.concurrency,
            ..Default::default()
        }
    }
}

/// A plugin named on the command line: a component file, or an artifact in an OCI registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginLocation {
    File(PathBuf),
    Oci(crate::plugin::oci::OciReference),
}

impl std::str::FromStr for PluginLocation {
    type Err = crate::plugin::oci::OciError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.starts_with("oci://") {
            text.parse().map(PluginLocation::Oci)
        } else {
            Ok(PluginLocation::File(PathBuf::from(text)))
        }
    }
}

impl std::fmt::Display for PluginLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginLocation::File(path) => write!(f, "{}", path.display()),
            PluginLocation::Oci(reference) => write!(f, "{reference}"),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct PluginTestArgs {
    /// Plugins, run in the order given: component files (`.wasm`) or
    /// `oci://host[:port]/repository:tag` (or `@sha256:<digest>`) references.
    #[arg(required = true, value_name = "PLUGIN")]
    pub plugins: Vec<PluginLocation>,
    /// The object to transform, as YAML or JSON.
    #[arg(short = 'f', long = "file", required_unless_present = "fixtures")]
    pub file: Option<PathBuf>,
    /// Run every case of a fixtures folder instead (a folder per case: object.yaml, config.json,
    /// context.json, inputs/, and expected.yaml, expected-skip.txt or expected-error.txt; see
    /// docs/plugins.md): a line per case, exit 1 when one fails.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "configs", "context", "inputs"])]
    pub fixtures: Option<PathBuf>,
    /// A plugin's config as JSON, or @file; give one per plugin, in order (missing ones are `{}`).
    #[arg(long = "config")]
    pub configs: Vec<String>,
    /// The namespace the copy is written to (also set on the object).
    #[arg(long)]
    pub target_namespace: Option<String>,
    /// The name of the copy (also set on the object); defaults to the object's name.
    #[arg(long)]
    pub target_name: Option<String>,
    /// The rule the plugin is told it runs for.
    #[arg(long, default_value = "SyncRule/default/plugin-test")]
    pub rule: String,
    /// The rest of the context as a JSON file, with any of the keys `rule`, `sourceApiVersion`,
    /// `sourceKind`, `sourceNamespace`, `sourceName`, `sourceCluster`, `targetCluster`,
    /// `targetNamespace`, `targetName` (a null namespace: cluster-scoped). What it leaves out comes
    /// from the object and the flags above.
    #[arg(long)]
    pub context: Option<PathBuf>,
    /// One of the rule's inputs, as `NAME=FILE` (the object as YAML or JSON), handed to plugins of
    /// interface 0.2.0 and later; repeat it for each, in the rule's order.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// How to print the object written: `yaml` or `json`.
    #[arg(short = 'o', long, value_enum, default_value_t = ObjectOutput::Yaml)]
    pub output: ObjectOutput,
    /// The same as `-o json` (kept for scripts written before -o).
    #[arg(long, hide = true)]
    pub json: bool,
    /// When a plugin traps, print wasmtime's raw backtrace (its frames) too.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub limits: PluginLimitArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Args, Debug, Clone)]
pub struct PluginNewArgs {
    /// The plugin's name: its folder, component file and crate (lowercase letters, digits, '-').
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The language to write it in.
    #[arg(long, value_enum)]
    pub lang: crate::cmd::plugin_new::Lang,
    /// The folder to make the plugin's folder in.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct PluginInspectArgs {
    /// A plugin component file (`.wasm`) or an `oci://` reference.
    #[arg(value_name = "PLUGIN")]
    pub plugin: PluginLocation,
    #[command(flatten)]
    pub limits: PluginLimitArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Args, Debug, Clone)]
pub struct PluginPushArgs {
    /// The plugin component file (`.wasm`).
    pub file: PathBuf,
    /// Where to push it: `oci://host[:port]/repository:tag`.
    #[arg(value_name = "OCI_REF")]
    pub reference: crate::plugin::oci::OciReference,
    /// The description annotation (org.opencontainers.image.description) [default: the
    /// description the plugin gives of itself].
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    #[command(flatten)]
    pub limits: PluginLimitArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Args, Debug, Clone)]
pub struct PluginPullArgs {
    /// What to pull: `oci://host[:port]/repository:tag`, `…@sha256:<digest>`, or both.
    #[arg(value_name = "OCI_REF")]
    pub reference: crate::plugin::oci::OciReference,
    /// The file to write the component to.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// How to reach OCI registries, and where pulled artifacts are kept.
#[derive(Args, Debug, Clone)]
pub struct RegistryArgs {
    /// Registry user name, with --password. Without them, the Docker config's entry for the
    /// registry is used if there is one, else the credential helper it names (credHelpers,
    /// credsStore: docker-credential-<name> on the PATH), else no credentials.
    #[arg(long, env = "MIMEO_REGISTRY_USERNAME", value_name = "NAME")]
    pub username: Option<String>,
    /// Registry password or token, with --username.
    #[arg(
        long,
        env = "MIMEO_REGISTRY_PASSWORD",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub password: Option<String>,
    /// A Docker config file to take registry credentials from (its "auths", credHelpers and
    /// credsStore) [default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json, when present].
    #[arg(long, value_name = "PATH")]
    pub docker_config: Option<PathBuf>,
    /// Reach the registry over plain HTTP instead of HTTPS (loopback registries are, unless given
    /// --ca-file).
    #[arg(long, conflicts_with = "ca_file")]
    pub insecure: bool,
    /// PEM file with the CA certificates the registry's TLS certificate is signed by, trusted
    /// beside the system's roots (a registry with a certificate from a private CA). The registry
    /// is reached over HTTPS, loopback ones too.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Directory for pulled artifacts, content-addressed: a digest found there is not downloaded
    /// again.
    #[arg(long, env = "MIMEO_ARTIFACT_CACHE_DIR", value_name = "DIR", default_value_os_t = crate::plugin::private_dir::default_cache_dir("oci-cache"))]
    pub artifact_cache_dir: PathBuf,
    /// Largest artifact pushed or pulled, in MiB.
    #[arg(long, default_value_t = 100, value_name = "MIB")]
    pub max_artifact_mib: u64,
    /// Longest one registry exchange (resolving a tag, reading a manifest or a layer, a whole
    /// push) may take, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub registry_timeout_secs: u64,
}

impl RegistryArgs {
    /// Settings for a command that talks to `registries` (marked insecure with --insecure, or
    /// trusting --ca-file).
    pub fn oci_settings(
        &self,
        registries: &[&str],
    ) -> Result<crate::plugin::oci::OciSettings, crate::plugin::oci::TrustError> {
        let cas: Vec<CaArgument> = match &self.ca_file {
            Some(path) => registries
                .iter()
                .map(|registry| CaArgument {
                    registry: Some(registry.to_ascii_lowercase()),
                    path: path.clone(),
                })
                .collect(),
            None => vec![],
        };
        Ok(crate::plugin::oci::OciSettings {
            cache_dir: self.artifact_cache_dir.clone(),
            cache_max_bytes: crate::plugin::oci::OciSettings::default().cache_max_bytes,
            max_artifact_bytes: self.max_artifact_mib << 20,
            insecure_registries: if self.insecure {
                registries.iter().map(|r| r.to_string()).collect()
            } else {
                vec![]
            },
            trust: RegistryTrust::load(&cas, &[])?,
            timeout: std::time::Duration::from_secs(self.registry_timeout_secs),
            // The command line gets the controller's defaults: no private networks opened, the
            // credentials only for the registry's own host.
            ..crate::plugin::oci::OciSettings::default()
        })
    }
}

/// The limits a plugin runs under, as in the controller.
#[derive(Args, Debug, Clone)]
pub struct PluginLimitArgs {
    /// Longest a plugin may run on one object, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub deadline_ms: u64,
    /// Most memory one plugin call may use, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: usize,
    /// Largest object a plugin may return, in KiB.
    #[arg(long, default_value_t = 4096)]
    pub output_kib: usize,
    /// Directory for compiled plugins.
    #[arg(long, env = "MIMEO_PLUGIN_CACHE_DIR", default_value_os_t = crate::plugin::private_dir::default_cache_dir("plugin-cache"))]
    pub cache_dir: PathBuf,
    /// Most disk the compiled plugins may use, in MiB; the least recently used go first.
    #[arg(
        long,
        env = "MIMEO_PLUGIN_CACHE_MIB",
        default_value_t = 512,
        value_name = "MIB"
    )]
    pub cache_mib: u64,
}

impl PluginLimitArgs {
    pub fn host_settings(&self) -> crate::plugin::HostSettings {
        crate::plugin::HostSettings {
            cache_dir: self.cache_dir.clone(),
            cache_max_bytes: self.cache_mib.saturating_mul(1 << 20),
            deadline: std::time::Duration::from_millis(self.deadline_ms),
            max_memory_bytes: self.memory_mib << 20,
            max_output_bytes: self.output_kib << 10,
            concurrency: 2,
            compile_concurrency: 1,
            compiler: None,
        }
    }
}

/// The flags the openmcp-operator gives every platform service's `init` and `run`.
#[derive(Args, Debug, Clone, Default)]
pub struct PlatformArgs {
    /// The openMCP environment this installation belongs to, as the openmcp-operator names it;
    /// logged at start.
    #[arg(long, env = "MIMEO_ENVIRONMENT", value_name = "NAME")]
    pub environment: Option<String>,
    /// The log level as openMCP names it: DEBUG, INFO or ERROR (any case; empty means INFO).
    /// When given, it replaces --log-level.
    #[arg(long, env = "MIMEO_VERBOSITY", value_name = "LEVEL", value_parser = parse_verbosity)]
    pub verbosity: Option<Verbosity>,
    /// The name of the openMCP PlatformService that installed mimeo, logged at start; `run` reads
    /// and follows the MimeoConfig of this name, whose settings win over the flags'.
    #[arg(long, env = "MIMEO_PROVIDER_NAME", value_name = "NAME")]
    pub provider_name: Option<String>,
}

/// openMCP's log levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    Debug,
    Info,
    /// Errors only: no INFO line, and no warning either.
    Error,
}

impl Verbosity {
    /// The log filter this level stands for.
    pub fn filter(self) -> &'static str {
        match self {
            Verbosity::Debug => "debug",
            Verbosity::Info => "info",
            Verbosity::Error => "error",
        }
    }
}

fn parse_verbosity(text: &str) -> Result<Verbosity, String> {
    match text.to_ascii_lowercase().as_str() {
        "debug" => Ok(Verbosity::Debug),
        "info" | "" => Ok(Verbosity::Info),
        "error" => Ok(Verbosity::Error),
        _ => Err(format!("{text:?}: expected DEBUG, INFO or ERROR")),
    }
}

/// The logging flags of `init` and `run`.
#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log filter: a level (`info`, `debug`) or per-target directives (`mimeo=debug,kube=info`).
    #[arg(long, env = "MIMEO_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: `json` for machines, `pretty` for humans, `auto` picks pretty on a terminal.
    #[arg(long, env = "MIMEO_LOG_FORMAT", value_enum, default_value = "auto")]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// The log filter: openMCP's --verbosity when given, else --log-level.
    pub fn filter<'a>(&'a self, platform: &PlatformArgs) -> &'a str {
        match platform.verbosity {
            Some(level) => level.filter(),
            None => &self.log_level,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct InitArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub platform: PlatformArgs,
    #[command(flatten)]
    pub log: LogArgs,
    /// The Secret (`NAMESPACE/NAME`) holding the key mimeo seals its copies with, created with a
    /// random key when missing and never replaced; as `run --seal-key-secret`. [default:
    /// `$POD_NAMESPACE/mimeo-seal-key`, else `default/mimeo-seal-key`]
    #[arg(long, env = "MIMEO_SEAL_KEY_SECRET", value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub seal_key_secret: Option<(String, String)>,
    /// How long to wait for each CRD to be Established.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub wait_seconds: u64,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub platform: PlatformArgs,
    #[command(flatten)]
    pub log: LogArgs,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "MIMEO_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served, as the openmcp-operator says it
    /// (`:8080` is every address); when given, it replaces --http-addr.
    #[arg(long, env = "MIMEO_METRICS_BIND_ADDRESS", value_name = "[HOST]:PORT", value_parser = parse_bind_address)]
    pub metrics_bind_address: Option<SocketAddr>,
    /// Serve /metrics over HTTPS. mimeo serves plain HTTP only: `false` is accepted (what the
    /// openmcp-operator passes), `true` is refused.
    #[arg(long, env = "MIMEO_METRICS_SECURE", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_secure: Option<bool>,
    /// Limit mimeo to this namespace: repeat it, or separate namespaces with commas. mimeo then
    /// reads and writes only there (Roles suffice): it reconciles their SyncRules, writes copies
    /// only into them, and reads no ClusterSyncRules or RemoteClusters. Default: the whole
    /// cluster.
    #[arg(
        long = "watch-namespace",
        env = "MIMEO_WATCH_NAMESPACE",
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    pub watch_namespaces: Vec<String>,
    /// The Secret (`NAMESPACE/NAME`) holding the key mimeo seals its copies with: only an object
    /// whose seal is right is a copy mimeo may update, delete or report. Created with a random key
    /// when missing; never replaced. Keep it: with a new key, copies look forged. To rotate it,
    /// keep the old key beside the new one under a data entry named `retired...` (its seals are
    /// accepted, and each copy is sealed anew when next written). [default:
    /// `$POD_NAMESPACE/mimeo-seal-key`, else `default/mimeo-seal-key`]
    #[arg(long, env = "MIMEO_SEAL_KEY_SECRET", value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub seal_key_secret: Option<(String, String)>,
    /// The credentials providers of `ClusterInventory`s of ClusterProfiles: a KEP-5339 provider
    /// file (`{"providers": [{"name", "execConfig"}]}`, as Argo CD and MultiKueue read it). Only
    /// this file names the exec plugins mimeo runs.
    #[arg(long, env = "MIMEO_CLUSTER_PROFILE_PROVIDERS", value_name = "FILE")]
    pub cluster_profile_providers: Option<std::path::PathBuf>,
    /// How long a ClusterProfile provider's exec plugin may run before it is stopped.
    #[arg(
        long,
        env = "MIMEO_CLUSTER_PROFILE_EXEC_TIMEOUT_SECS",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub cluster_profile_exec_timeout_secs: u64,
    #[command(flatten)]
    pub leader: LeaderArgs,
    /// A kind rules may sync, as Kind for the core group or Kind.group (Secret,
    /// Policy.kyverno.io); repeat it, or separate kinds with commas. Rules for any other kind are
    /// refused. Default: Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io and
    /// Kyverno's CEL policies: ValidatingPolicy, MutatingPolicy, GeneratingPolicy,
    /// DeletingPolicy, ImageValidatingPolicy and their Namespaced kinds, of policies.kyverno.io
    /// (not its PolicyException).
    #[arg(
        long = "allow-kind",
        env = "MIMEO_ALLOW_KINDS",
        value_name = "KIND",
        value_delimiter = ','
    )]
    pub allow_kinds: Vec<AllowedKind>,
    /// A namespaced kind whose objects `targets[].nextTo` may follow, as Kind.group
    /// (Cluster.clusters.openmcp.cloud); repeat it, or separate kinds with commas. A rule, of
    /// either kind, naming any other gets Ready=False, NextToKindNotAllowed. mimeo needs get,
    /// list and watch on each (the Helm value nextTo.kinds grants them). Default: none.
    #[arg(
        long = "next-to-kinds",
        env = "MIMEO_NEXT_TO_KINDS",
        value_name = "KIND",
        value_delimiter = ','
    )]
    pub next_to_kinds: Vec<AllowedKind>,
    #[command(flatten)]
    pub plugins: PluginArgs,
    #[command(flatten)]
    pub oci: OciRunArgs,
}

/// Leader election, so that of several replicas only one writes.
#[derive(Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Share the work between replicas through coordination.k8s.io Leases: with --shards=1, one
    /// Lease, whose holder works while the others stand by; without --shards, 8 shards of the
    /// rules, which every replica takes its share of. `--leader-elect` alone is
    /// `--leader-elect=true`.
    #[arg(long, env = "MIMEO_LEADER_ELECT", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_value = "false", default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub leader_elect: bool,
    /// The namespace of the Lease [default: env POD_NAMESPACE, else default].
    #[arg(long, env = "MIMEO_LEADER_ELECT_NAMESPACE", value_name = "NS")]
    pub leader_elect_namespace: Option<String>,
    /// The name of the Lease.
    #[arg(
        long,
        env = "MIMEO_LEADER_ELECT_LEASE_NAME",
        default_value = "mimeo",
        value_name = "NAME"
    )]
    pub leader_elect_lease_name: String,
    /// How long a Lease lasts without renewal: a standby takes over this long after the leader
    /// stops renewing; the leader renews every third of it and gives up after two thirds.
    #[arg(
        long,
        env = "MIMEO_LEADER_ELECT_LEASE_SECONDS",
        default_value_t = 15,
        value_name = "SECONDS"
    )]
    pub leader_elect_lease_seconds: u64,
    /// Split the rules into this many shards, each a Lease named after --leader-elect-lease-name
    /// (`<name>-shard-<N>-<i>`, shard i of N), and let every replica work on its share of them:
    /// all replicas are active. With 1, one replica works, as --leader-elect says. Unset: 8
    /// with --leader-elect (the replicas find each other, however many run), else 1.
    #[arg(long, env = "MIMEO_SHARDS", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub shards: Option<u32>,
}

impl LeaderArgs {
    /// How many shards the rules are split into: --shards when given; with --leader-elect alone,
    /// [`crate::replicas::shards::DEFAULT_COUNT`], so that any number of replicas all work
    /// without being told how many there are; else one.
    pub fn shard_count(&self) -> u32 {
        match (self.shards, self.leader_elect) {
            (Some(count), _) => count,
            (None, true) => crate::replicas::shards::DEFAULT_COUNT,
            (None, false) => 1,
        }
    }
}

/// How the controller fetches `oci://` plugins, and what it allows of them.
#[derive(Args, Debug, Clone)]
pub struct OciRunArgs {
    /// Refuse `oci://` plugins named by tag: every one must be pinned with @sha256:<digest>.
    #[arg(long, env = "MIMEO_PLUGIN_REQUIRE_DIGEST")]
    pub plugin_require_digest: bool,
    /// A registry (host[:port]) plugins may come from; repeat it or separate with commas.
    /// Unset: any registry.
    #[arg(
        long = "plugin-allowed-registry",
        env = "MIMEO_PLUGIN_ALLOWED_REGISTRIES",
        value_name = "HOST",
        value_delimiter = ','
    )]
    pub plugin_allowed_registries: Vec<String>,
    /// A Docker config file ({"auths": ...}) with the controller's own registry credentials,
    /// used for a registry none of a rule's pluginPullSecrets covers: by ClusterSyncRules, and by
    /// SyncRules only with --plugin-registry-config-for-sync-rules.
    #[arg(long, env = "MIMEO_PLUGIN_REGISTRY_CONFIG", value_name = "PATH")]
    pub plugin_registry_config: Option<PathBuf>,
    /// Let SyncRules use the credentials of --plugin-registry-config too. Off: a SyncRule's
    /// author could otherwise pull whatever the controller's credentials may read.
    #[arg(long, env = "MIMEO_PLUGIN_REGISTRY_CONFIG_FOR_SYNC_RULES")]
    pub plugin_registry_config_for_sync_rules: bool,
    /// A registry (host[:port]) reached over plain HTTP, as loopback registries are unless given a
    /// CA; repeat it or separate with commas.
    #[arg(
        long = "plugin-insecure-registry",
        env = "MIMEO_PLUGIN_INSECURE_REGISTRIES",
        value_name = "HOST",
        value_delimiter = ','
    )]
    pub plugin_insecure_registries: Vec<String>,
    /// A PEM file of CA certificates trusted beside the system's roots for HTTPS registries, for
    /// registries whose certificates come from a private CA. `FILE` trusts them for every
    /// registry, `HOST[:PORT]=FILE` for that registry only, which is then reached over HTTPS even
    /// on loopback. Repeat it or separate with commas.
    #[arg(
        long = "plugin-registry-ca",
        env = "MIMEO_PLUGIN_REGISTRY_CAS",
        value_name = "[HOST=]FILE",
        value_delimiter = ','
    )]
    pub plugin_registry_cas: Vec<CaArgument>,
    /// Directory for fetched artifacts, content-addressed and shared by all rules.
    #[arg(long, env = "MIMEO_ARTIFACT_CACHE_DIR", value_name = "DIR", default_value_os_t = crate::plugin::private_dir::default_cache_dir("oci-cache"))]
    pub artifact_cache_dir: PathBuf,
    /// Most disk the artifact cache may use, in MiB; the least recently used go first.
    #[arg(
        long,
        env = "MIMEO_ARTIFACT_CACHE_MIB",
        default_value_t = 1024,
        value_name = "MIB"
    )]
    pub artifact_cache_mib: u64,
    /// Largest plugin artifact fetched, in MiB.
    #[arg(
        long,
        env = "MIMEO_MAX_ARTIFACT_MIB",
        default_value_t = 100,
        value_name = "MIB"
    )]
    pub max_artifact_mib: u64,
    /// Longest one registry exchange may take, in seconds.
    #[arg(
        long,
        env = "MIMEO_REGISTRY_TIMEOUT_SECS",
        default_value_t = 30,
        value_name = "SECONDS"
    )]
    pub registry_timeout_secs: u64,
    /// A private network (CIDR, as 10.96.0.0/12) a registry may send mimeo to: a token service,
    /// a redirect or an upload location there. Unset: none, only the registry's own host. Repeat
    /// it or separate with commas.
    #[arg(
        long = "registry-allowed-network",
        env = "MIMEO_REGISTRY_ALLOWED_NETWORKS",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub registry_allowed_networks: Vec<crate::plugin::oci::Network>,
    /// A token service host (host, or host:port) that may be sent a rule's registry credentials
    /// besides the registry's own host (Docker Hub's auth.docker.io, say). Repeat it or separate
    /// with commas.
    #[arg(
        long = "registry-trusted-realm",
        env = "MIMEO_REGISTRY_TRUSTED_REALMS",
        value_name = "HOST",
        value_delimiter = ','
    )]
    pub registry_trusted_realms: Vec<String>,
    /// Registry downloads (a tag resolved, an artifact fetched) at once, for all rules.
    #[arg(
        long,
        env = "MIMEO_PLUGIN_DOWNLOAD_CONCURRENCY",
        default_value_t = 4,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub plugin_download_concurrency: u16,
    /// Of those, at most this many for the SyncRules of one namespace.
    #[arg(
        long,
        env = "MIMEO_PLUGIN_DOWNLOADS_PER_NAMESPACE",
        default_value_t = 2,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub plugin_downloads_per_namespace: u16,
}

impl OciRunArgs {
    /// The registry settings, the CA files read and checked.
    pub fn settings(&self) -> Result<crate::plugin::oci::OciSettings, crate::plugin::oci::TrustError> {
        Ok(crate::plugin::oci::OciSettings {
            cache_dir: self.artifact_cache_dir.clone(),
            cache_max_bytes: self.artifact_cache_mib << 20,
            max_artifact_bytes: self.max_artifact_mib << 20,
            trust: RegistryTrust::load(&self.plugin_registry_cas, &self.plugin_insecure_registries)?,
            insecure_registries: self.plugin_insecure_registries.clone(),
            timeout: std::time::Duration::from_secs(self.registry_timeout_secs),
            reach: crate::plugin::oci::RegistryReach {
                allowed_networks: self.registry_allowed_networks.clone(),
                trusted_realms: self.registry_trusted_realms.clone(),
            },
            download_concurrency: self.plugin_download_concurrency.into(),
            downloads_per_namespace: self.plugin_downloads_per_namespace.into(),
        })
    }
}

/// Where plugins come from and the limits they run under.
#[derive(Args, Debug, Clone)]
pub struct PluginArgs {
    /// Directory holding the plugins that rules name as `file://<path>`.
    #[arg(long, env = "MIMEO_PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// Directory for compiled plugins, kept across restarts.
    #[arg(long, env = "MIMEO_PLUGIN_CACHE_DIR", default_value_os_t = crate::plugin::private_dir::default_cache_dir("plugin-cache"))]
    pub plugin_cache_dir: PathBuf,
    /// Most disk the compiled plugins may use, in MiB; the least recently used go first.
    #[arg(
        long,
        env = "MIMEO_PLUGIN_CACHE_MIB",
        default_value_t = 512,
        value_name = "MIB"
    )]
    pub plugin_cache_mib: u64,
    /// Longest a plugin may run on one copy, in milliseconds.
    #[arg(long, env = "MIMEO_PLUGIN_DEADLINE_MS", default_value_t = 100)]
    pub plugin_deadline_ms: u64,
    /// Most memory one plugin call may use, in MiB.
    #[arg(long, env = "MIMEO_PLUGIN_MEMORY_MIB", default_value_t = 64)]
    pub plugin_memory_mib: usize,
    /// Largest object a plugin may return, in KiB.
    #[arg(long, env = "MIMEO_PLUGIN_OUTPUT_KIB", default_value_t = 4096)]
    pub plugin_output_kib: usize,
    /// Plugin instances at once, over all rules: transforms, config checks and the describe of
    /// a plugin being loaded (which compiles it first) share these. Guest memory is at most this
    /// times --plugin-memory-mib.
    #[arg(long, env = "MIMEO_PLUGIN_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub plugin_concurrency: u32,
    /// Longest compiling one plugin may take, in seconds. Each compile runs in a process of its
    /// own, killed at this limit; a component refused for its compile is not tried again until
    /// mimeo restarts.
    #[arg(long, env = "MIMEO_PLUGIN_COMPILE_TIMEOUT_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub plugin_compile_timeout_secs: u64,
    /// Most memory compiling one plugin may use, in MiB (the compiling process's data limit).
    #[arg(long, env = "MIMEO_PLUGIN_COMPILE_MEMORY_MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..))]
    pub plugin_compile_memory_mib: u64,
    /// Most CPU time compiling one plugin may use, in seconds, over all its threads (the
    /// compiling process's CPU limit): Cranelift compiles on every core, so within
    /// --plugin-compile-timeout-secs a compile could use that many times more.
    #[arg(long, env = "MIMEO_PLUGIN_COMPILE_CPU_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub plugin_compile_cpu_secs: u64,
    /// Plugins compiled at once, over all rules; each compile is a process of its own. Turns go
    /// round the namespaces of the rules waiting.
    #[arg(long, env = "MIMEO_PLUGIN_COMPILE_CONCURRENCY", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub plugin_compile_concurrency: u32,
}

impl PluginArgs {
    /// The plugin host's settings; `program` is mimeo's own binary, run to compile each plugin.
    pub fn host_settings(&self, program: PathBuf) -> crate::plugin::HostSettings {
        crate::plugin::HostSettings {
            cache_dir: self.plugin_cache_dir.clone(),
            cache_max_bytes: self.plugin_cache_mib.saturating_mul(1 << 20),
            deadline: std::time::Duration::from_millis(self.plugin_deadline_ms),
            max_memory_bytes: self.plugin_memory_mib << 20,
            max_output_bytes: self.plugin_output_kib << 10,
            concurrency: self.plugin_concurrency,
            compile_concurrency: self.plugin_compile_concurrency,
            compiler: Some(crate::plugin::CompilerProcess {
                program,
                timeout: std::time::Duration::from_secs(self.plugin_compile_timeout_secs),
                max_memory_bytes: self.plugin_compile_memory_mib << 20,
                max_cpu_time: std::time::Duration::from_secs(self.plugin_compile_cpu_secs),
            }),
        }
    }
}

/// `--cluster-kubeconfig NAMESPACE/NAME=PATH`: the kubeconfig file of one openMCP `Cluster`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterKubeconfig {
    /// The `Cluster`'s `namespace/name`, as the plan names it.
    pub cluster: String,
    pub path: PathBuf,
}

fn parse_cluster_kubeconfig(text: &str) -> Result<ClusterKubeconfig, String> {
    let expected =
        "expected NAMESPACE/NAME=PATH: the openMCP Cluster's namespace and name, then its kubeconfig file";
    let (cluster, path) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: {expected}"))?;
    let (namespace, name) = parse_secret_ref(cluster).map_err(|_| format!("{text:?}: {expected}"))?;
    if path.is_empty() {
        return Err(format!("{text:?}: {expected}"));
    }
    Ok(ClusterKubeconfig {
        cluster: format!("{namespace}/{name}"),
        path: PathBuf::from(path),
    })
}

/// The kubeconfig files by `Cluster`; a `Cluster` named twice is refused, not guessed at.
pub fn cluster_kubeconfigs(given: &[ClusterKubeconfig]) -> Result<BTreeMap<String, PathBuf>, String> {
    let mut by_cluster = BTreeMap::new();
    for g in given {
        if by_cluster.insert(g.cluster.clone(), g.path.clone()).is_some() {
            return Err(format!("--cluster-kubeconfig names Cluster {} twice", g.cluster));
        }
    }
    Ok(by_cluster)
}

/// `NAMESPACE/NAME`, both non-empty.
impl RunArgs {
    /// Where the HTTP server listens: --metrics-bind-address when given, else --http-addr.
    pub fn listen_address(&self) -> SocketAddr {
        self.metrics_bind_address.unwrap_or(self.http_addr)
    }
}

/// A listen address as Go's `net.Listen` takes it: `HOST:PORT` with an IP address, or `:PORT`
/// for every address.
fn parse_bind_address(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.replace("localhost:", "127.0.0.1:"),
    };
    full.parse()
        .map_err(|_| format!("{text:?}: expected :PORT (every address) or IP:PORT"))
}

fn parse_secret_ref(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{text:?}: expected NAMESPACE/NAME")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        let secs = |t: &str| parse_duration(t).map(|d| d.as_secs());
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("2m"), Ok(120));
        assert_eq!(secs("1h"), Ok(3600));
        assert_eq!(secs("45"), Ok(45));
        assert!(secs("1.5m").is_err() && secs("m").is_err() && secs("10d").is_err());
    }

    #[test]
    fn the_cluster_flags_are_kubectls_and_plugin_tests_context_is_its_own() {
        let cli = Cli::try_parse_from([
            "mimeo",
            "suspend",
            "--context",
            "admin",
            "creds",
            "-n",
            "platform",
            "--kubeconfig",
            "/tmp/k",
        ])
        .unwrap();
        let Command::Suspend(args) = cli.command else {
            panic!("not suspend")
        };
        assert_eq!(args.cluster.context.as_deref(), Some("admin"));
        assert_eq!(args.cluster.kubeconfig, Some(PathBuf::from("/tmp/k")));
        assert_eq!(
            (args.rule.as_str(), args.namespace.as_deref()),
            ("creds", Some("platform"))
        );
        // `plugin test --context` is the transform's context file, not kubectl's.
        let cli = Cli::try_parse_from([
            "mimeo",
            "plugin",
            "test",
            "p.wasm",
            "-f",
            "o.yaml",
            "--context",
            "c.json",
        ])
        .unwrap();
        let Command::Plugin(PluginCommand::Test(args)) = cli.command else {
            panic!("not plugin test")
        };
        assert_eq!(args.context, Some(PathBuf::from("c.json")));
    }

    #[test]
    fn a_clusters_kubeconfig_is_namespace_slash_name_equals_path() {
        let given = |args: &[&str]| {
            let cli = Cli::try_parse_from(["mimeo", "migrate"].iter().chain(args))?;
            let Command::Migrate(args) = cli.command else {
                panic!("not migrate")
            };
            Ok::<_, clap::Error>(args.cluster_kubeconfigs)
        };
        let parsed = given(&[
            "--cluster-kubeconfig",
            "test-0/cluster-0=/tmp/a=b.yaml",
            "--cluster-kubeconfig=test-1/cluster-1=b.yaml",
        ])
        .unwrap();
        assert_eq!(
            parsed,
            [
                ClusterKubeconfig {
                    cluster: "test-0/cluster-0".into(),
                    path: "/tmp/a=b.yaml".into()
                },
                ClusterKubeconfig {
                    cluster: "test-1/cluster-1".into(),
                    path: "b.yaml".into()
                },
            ]
        );
        for wrong in [
            "cluster-0=a.yaml",
            "test-0/cluster-0",
            "test-0/=a",
            "/c=a",
            "a/b/c=a",
            "a/b=",
        ] {
            let error = given(&["--cluster-kubeconfig", wrong]).unwrap_err().to_string();
            assert!(error.contains("expected NAMESPACE/NAME=PATH"), "{wrong}: {error}");
        }
        let twice = cluster_kubeconfigs(&[parsed[0].clone(), parsed[0].clone()]).unwrap_err();
        assert_eq!(twice, "--cluster-kubeconfig names Cluster test-0/cluster-0 twice");
        let cli =
            Cli::try_parse_from(["mimeo", "diff", "-f", "p.yaml", "--cluster-kubeconfig", "a/b=c"]).unwrap();
        let Command::Diff(args) = cli.command else {
            panic!("not diff")
        };
        assert_eq!(args.cluster_kubeconfigs[0].cluster, "a/b");
    }

    #[test]
    fn the_controllers_credentials_serve_sync_rules_only_when_asked() {
        let run = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["mimeo", "run"].iter().chain(extra)).unwrap();
            let Command::Run(args) = cli.command else {
                panic!("not run")
            };
            args.oci.plugin_registry_config_for_sync_rules
        };
        assert!(!run(&[]));
        assert!(run(&["--plugin-registry-config-for-sync-rules"]));
    }

    #[test]
    fn where_registries_may_send_mimeo_is_configured_by_flags() {
        let settings = |extra: &[&str]| {
            let cli = Cli::try_parse_from(["mimeo", "run"].iter().chain(extra)).unwrap();
            let Command::Run(args) = cli.command else {
                panic!("not run")
            };
            args.oci.settings().unwrap()
        };
        let default = settings(&[]);
        assert_eq!(default.reach, crate::plugin::oci::RegistryReach::default());
        assert_eq!(
            (default.download_concurrency, default.downloads_per_namespace),
            (4, 2)
        );
        let given = settings(&[
            "--registry-allowed-network=10.96.0.0/12,fd00::/8",
            "--registry-allowed-network",
            "192.168.4.0/24",
            "--registry-trusted-realm=auth.docker.io",
            "--plugin-download-concurrency=8",
            "--plugin-downloads-per-namespace=1",
        ]);
        let networks: Vec<String> = given
            .reach
            .allowed_networks
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(networks, ["10.96.0.0/12", "fd00::/8", "192.168.4.0/24"]);
        assert_eq!(given.reach.trusted_realms, ["auth.docker.io"]);
        assert_eq!(
            (given.download_concurrency, given.downloads_per_namespace),
            (8, 1)
        );
        for wrong in [
            "--registry-allowed-network=10.0.0.0/40",
            "--registry-allowed-network=cluster.local",
            "--plugin-download-concurrency=0",
        ] {
            assert!(Cli::try_parse_from(["mimeo", "run", wrong]).is_err(), "{wrong}");
        }
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["mimeo", "run"].iter().chain(args)).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        *args
    }

    /// The flags as the openmcp-operator writes them, and the chart's `--leader-elect` alone.
    #[test]
    fn the_openmcp_operators_flags_parse() {
        let args = run_args(&[
            "--environment=prod",
            "--verbosity=ERROR",
            "--provider-name=mimeo",
            "--leader-elect=true",
            "--metrics-bind-address=:8081",
            "--metrics-secure=false",
        ]);
        assert_eq!(args.platform.environment.as_deref(), Some("prod"));
        assert_eq!(args.log.filter(&args.platform), "error");
        assert_eq!(args.platform.provider_name.as_deref(), Some("mimeo"));
        assert!(args.leader.leader_elect);
        assert_eq!(args.listen_address(), "0.0.0.0:8081".parse().unwrap());
        assert_eq!(args.metrics_secure, Some(false));

        assert!(run_args(&["--leader-elect"]).leader.leader_elect);
        assert!(!run_args(&["--leader-elect=false"]).leader.leader_elect);
        assert!(!run_args(&[]).leader.leader_elect);
        let args = run_args(&["--log-level=debug", "--http-addr=127.0.0.1:9000"]);
        assert_eq!(
            args.log.filter(&args.platform),
            "debug",
            "--log-level without --verbosity"
        );
        assert_eq!(args.listen_address(), "127.0.0.1:9000".parse().unwrap());
        for (given, filter) in [("debug", "debug"), ("Info", "info"), ("", "info")] {
            let args = run_args(&[&format!("--verbosity={given}")]);
            assert_eq!(args.log.filter(&args.platform), filter, "{given:?}");
        }
        assert_eq!(
            run_args(&["--metrics-bind-address=127.0.0.1:9100"]).listen_address(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert!(Cli::try_parse_from(["mimeo", "run", "--leader-elect", "true"]).is_err());
    }

    #[test]
    fn registry_cas_are_repeated_or_comma_separated() {
        let cli = Cli::try_parse_from([
            "mimeo",
            "run",
            "--plugin-registry-ca",
            "harbor.corp:8443=/etc/harbor.pem,/etc/corp.pem",
            "--plugin-registry-ca=/etc/more.pem",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        let cas: Vec<(Option<&str>, &str)> = args
            .oci
            .plugin_registry_cas
            .iter()
            .map(|ca| (ca.registry.as_deref(), ca.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            cas,
            [
                (Some("harbor.corp:8443"), "/etc/harbor.pem"),
                (None, "/etc/corp.pem"),
                (None, "/etc/more.pem"),
            ]
        );
    }
}

#[cfg(test)]
mod docs {
    use super::*;
    use clap::CommandFactory;

    /// Every flag of `mimeo run`, with its environment variable, is in operator.md's table of
    /// flags: the table is where operators look, and it fell behind twice.
    #[test]
    fn operator_md_lists_every_flag_of_run_with_its_env() {
        let doc = include_str!("../docs/operator.md");
        let rows: Vec<(&str, &str)> = doc
            .lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix("| `--")?.split(" | ");
                let flag = cells.next()?.strip_suffix('`')?;
                let env = cells.next()?.trim_matches('`');
                Some((flag, env))
            })
            .collect();
        let cli = Cli::command();
        let run = cli.find_subcommand("run").expect("run");
        let mut missing = Vec::new();
        for arg in run.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(flag) = arg.get_long() else { continue };
            if flag == "help" {
                continue;
            }
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or("");
            if !rows.contains(&(flag, env)) {
                missing.push(format!("--{flag} ({env})"));
            }
        }
        assert!(
            missing.is_empty(),
            "not in docs/operator.md's flag table: {missing:?}"
        );
    }

    /// `--help` names the shard Leases as they are named (`shards::ShardSettings::prefix`).
    #[test]
    fn run_help_names_the_shard_leases_as_they_are() {
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("run")
            .expect("run")
            .render_long_help()
            .to_string();
        assert!(help.contains("<name>-shard-<N>-<i>"), "{help}");
        assert!(!help.contains("<name>-shard-<i>"), "{help}");
    }
}
