//! Real, isolated Kubernetes control planes for mimeo's tests: an etcd and a kube-apiserver on
//! free loopback ports, with a temporary data directory, generated certificates and an admin
//! credential. Several can run at once; each stands for a separate cluster.
//!
//! The processes are killed and reaped when the [`ControlPlane`] is dropped, and die with the test
//! process if it is killed. Nothing here ever talks to anything but this machine: 127.0.0.1, or
//! for a [`Scripted`] server asked to, another address of its own ([`local_address`]).
//!
//! Besides the admin client certificate, each apiserver accepts one random bearer token
//! ([`ControlPlane::admin_token`]), so tests can tell a valid token from a revoked one. The
//! apiserver alone can be stopped and started again ([`ControlPlane::stop_apiserver`],
//! [`ControlPlane::start_apiserver`]) to play an outage of a cluster that keeps its data.
//!
//! [`Registry`] is the same for OCI registries: a real CNCF distribution registry on a free loopback
//! port with storage in a temporary directory, optionally behind basic auth or serving HTTPS under a
//! CA of its own, from which mimeo fetches Wasm plugins; [`oras()`] is the ORAS CLI that tests push
//! artifacts with, [`helm()`] the Helm CLI that tests install the chart with, [`kstatus()`] the
//! reader of conditions as GitOps tools read them, and [`promtool()`] Prometheus's tool that tests
//! check the chart's alerts and dashboard queries with. [`Scripted`] is an HTTP(S) server that
//! answers what a test scripts: a hostile registry, a token service, a sidecar that must receive
//! nothing. [`FaultProxy`] stands between a process and an apiserver to cut, slow or reset its link.

mod binaries;
mod pki;
mod ports;
mod process;
mod proxy;
mod registry;
mod scripted;

pub use binaries::{Binaries, binaries, helm, kstatus, oras, promtool};
pub use proxy::{Fault, FaultProxy};
pub use registry::{Registry, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, registry_binary};
pub use scripted::{Answer, Asked, Scripted, local_address};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use pki::Pki;
use process::{Reaped, spawn_tied};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a control plane may take to become ready before start-up is called failed.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The user the static admin token authenticates as; in `system:masters`, like the certificate's.
const TOKEN_USER: &str = "envtest-token-admin";

/// How long a killed apiserver's port may keep accepting connections. The kernel closes the
/// listener when the process is reaped, so this only runs out if another process took the port.
const PORT_RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("control-plane binaries unavailable: {0}")]
    Binaries(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("building a client: {0}")]
    Kubeconfig(String),
    #[error(
        "kube-apiserver did not become ready within {timeout:?}: {reason}\n--- kube-apiserver log tail ---\n{apiserver_log}\n--- etcd log tail ---\n{etcd_log}"
    )]
    NotReady {
        timeout: Duration,
        reason: String,
        apiserver_log: String,
        etcd_log: String,
    },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("reading CRDs from {path}: {reason}")]
    Crds { path: PathBuf, reason: String },
    #[error("CRD {0} was not established in time")]
    CrdNotEstablished(String),
    #[error("OCI registry unavailable: {0}")]
    RegistryBinary(String),
    #[error(
        "OCI registry did not become ready within {timeout:?}: {reason}\n--- registry log tail ({log_path}) ---\n{log}"
    )]
    RegistryNotReady {
        timeout: Duration,
        reason: String,
        log_path: PathBuf,
        log: String,
    },
    #[error("registry request: {0}")]
    RegistryRequest(String),
    #[error("registry TLS client: {0}")]
    RegistryTls(String),
    #[error("oras unavailable: {0}")]
    Oras(String),
    #[error("helm unavailable: {0}")]
    Helm(String),
    #[error("promtool unavailable: {0}")]
    Promtool(String),
    #[error("kstatus reader unavailable: {0}")]
    Kstatus(String),
    #[error("{command} failed ({status}):\n{stderr}")]
    OrasFailed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// One running etcd + kube-apiserver pair.
pub struct ControlPlane {
    // Field order is drop order: stop the apiserver before etcd, then remove the data directory.
    /// `None` between [`ControlPlane::stop_apiserver`] and [`ControlPlane::start_apiserver`].
    apiserver: Option<Reaped>,
    etcd: Reaped,
    dir: tempfile::TempDir,
    /// How kube-apiserver was started, so a restart is the same server: same port, certificates,
    /// etcd and token file, hence the same URL and credentials for every client.
    apiserver_command: (OsString, Vec<OsString>),
    api_port: u16,
    server: String,
    ca_cert: String,
    ca_key: String,
    admin_token: String,
    kubeconfig_yaml: String,
    kubeconfig_path: PathBuf,
    startup: Duration,
    /// Each named user's bearer token ([`Options::users`]).
    user_tokens: Vec<(String, String)>,
    /// Where the audit log is written, when [`Options::audit_writes`] asked for one.
    audit_log: Option<PathBuf>,
}

/// How a control plane is started beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Users in `system:masters`, each with a bearer token of its own
    /// ([`ControlPlane::user_token_kubeconfig_yaml`]): processes the audit log tells apart.
    pub users: Vec<String>,
    /// Write an audit log of every write to Secrets (who, what, when the request was received),
    /// read with [`ControlPlane::audit_events`].
    pub audit_writes: bool,
}

/// Every write to Secrets, at the Metadata level (never a value), and nothing else.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
  verbs: ["create", "update", "patch", "delete"]
- level: None
"#;

impl ControlPlane {
    /// Starts a fresh control plane and waits until its apiserver reports ready.
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(Options::default()).await
    }

    /// [`ControlPlane::start`], with named users and an audit log as `options` say.
    pub async fn start_with(options: Options) -> Result<Self, Error> {
        let binaries = binaries()?;
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("mimeo-envtest-")
            .tempdir()
            .map_err(io("creating the data directory"))?;
        let pki = Pki::generate()?;
        let files = write_pki(dir.path(), &pki)?;
        let admin_token = random_token()?;
        let token_file = dir.path().join("tokens.csv");
        // token,user,uid,"groups": the static-token format of --token-auth-file.
        let mut tokens = format!("{admin_token},{TOKEN_USER},{TOKEN_USER},\"system:masters\"\n");
        let mut user_tokens = Vec::new();
        for user in &options.users {
            let token = random_token()?;
            tokens.push_str(&format!("{token},{user},{user},\"system:masters\"\n"));
            user_tokens.push((user.clone(), token));
        }
        std::fs::write(&token_file, tokens).map_err(io("writing tokens.csv"))?;
        let [etcd_port, peer_port, api_port] =
            ports::reserve::<3>().map_err(io("finding free loopback ports"))?;

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd = Command::new(binaries.etcd());
        etcd.args([
            "--name=envtest",
            &format!("--data-dir={}", dir.path().join("etcd").display()),
            &format!("--listen-client-urls={etcd_url}"),
            &format!("--advertise-client-urls={etcd_url}"),
            &format!("--listen-peer-urls={peer_url}"),
            &format!("--initial-advertise-peer-urls={peer_url}"),
            &format!("--initial-cluster=envtest={peer_url}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        let etcd = start_logged(etcd, "etcd", &dir.path().join("etcd.log"))?;

        let server = format!("https://127.0.0.1:{api_port}");
        let mut apiserver = Command::new(binaries.kube_apiserver());
        apiserver.args([
            &format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={api_port}"),
            &format!("--cert-dir={}", dir.path().join("certs").display()),
            &format!("--tls-cert-file={}", files.serving_cert.display()),
            &format!("--tls-private-key-file={}", files.serving_key.display()),
            &format!("--client-ca-file={}", files.ca_cert.display()),
            &format!("--token-auth-file={}", token_file.display()),
            &format!(
                "--service-account-key-file={}",
                files.service_account_pub.display()
            ),
            &format!(
                "--service-account-signing-key-file={}",
                files.service_account_key.display()
            ),
            &format!("--service-account-issuer={server}"),
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
        ]);
        let audit_log = match options.audit_writes {
            true => {
                let policy = dir.path().join("audit-policy.yaml");
                std::fs::write(&policy, AUDIT_POLICY).map_err(io("writing the audit policy"))?;
                let log = dir.path().join("audit.log");
                apiserver.args([
                    format!("--audit-policy-file={}", policy.display()),
                    format!("--audit-log-path={}", log.display()),
                    "--audit-log-mode=blocking".to_owned(),
                ]);
                Some(log)
            }
            false => None,
        };
        let apiserver_command = (
            apiserver.get_program().to_owned(),
            apiserver.get_args().map(ToOwned::to_owned).collect(),
        );
        let apiserver = start_logged(
            apiserver,
            "kube-apiserver",
            &dir.path().join("kube-apiserver.log"),
        )?;

        let kubeconfig_yaml = kubeconfig(
            &server,
            &pki.ca_cert,
            "envtest-admin",
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&pki.admin_cert),
                b64(&pki.admin_key)
            ),
        );
        let kubeconfig_path = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig_path, &kubeconfig_yaml).map_err(io("writing the kubeconfig"))?;

        let mut plane = ControlPlane {
            apiserver: Some(apiserver),
            etcd,
            dir,
            apiserver_command,
            api_port,
            server,
            ca_cert: pki.ca_cert,
            ca_key: pki.ca_key,
            admin_token,
            kubeconfig_yaml,
            kubeconfig_path,
            startup: Duration::ZERO,
            user_tokens,
            audit_log,
        };
        plane.wait_ready().await?;
        plane.startup = started.elapsed();
        // Straight to stderr, past the test harness's capture: start-up time belongs in every log.
        let _ = writeln!(
            std::io::stderr(),
            "envtest: control plane at {} ready in {:.2?}",
            plane.server,
            plane.startup
        );
        Ok(plane)
    }

    /// Stops kube-apiserver alone, as a crash would (SIGKILL), and returns once its port refuses
    /// connections: from then on every request to [`server`](Self::server) fails to connect. etcd
    /// keeps running and keeps the cluster's data for [`start_apiserver`](Self::start_apiserver).
    /// Does nothing more than that wait if the apiserver is already stopped.
    ///
    /// Panics if the port still accepts connections after a while, which means another process
    /// bound it: an outage could not be simulated, and neither could a restart on the same URL.
    pub async fn stop_apiserver(&mut self) {
        // Dropping kills and reaps it; the kernel closes its listener as the process exits.
        drop(self.apiserver.take());
        let port = SocketAddr::from((Ipv4Addr::LOCALHOST, self.api_port));
        let deadline = Instant::now() + PORT_RELEASE_TIMEOUT;
        // Loopback connects are answered at once, so a blocking one does not stall the runtime.
        while TcpStream::connect_timeout(&port, Duration::from_millis(200)).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{} still accepts connections {PORT_RELEASE_TIMEOUT:?} after kube-apiserver was killed",
                self.server
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts kube-apiserver again after [`stop_apiserver`](Self::stop_apiserver), with the same
    /// arguments, so on the same port and URL with the same certificates and tokens, and on the
    /// same etcd, so with the data written before the stop. Waits until it reports ready, like
    /// [`start`](Self::start), and returns how long that took from spawning it. If the apiserver
    /// is running already, only waits until it is ready.
    ///
    /// Go's listener sets `SO_REUSEADDR`, so the port can be bound again at once even though the
    /// killed server's connections linger in `TIME_WAIT`. Its log is appended to the first run's.
    pub async fn start_apiserver(&mut self) -> Result<Duration, Error> {
        let started = Instant::now();
        if self.apiserver.is_none() {
            let (program, args) = &self.apiserver_command;
            let mut command = Command::new(program);
            command.args(args);
            self.apiserver = Some(start_logged(
                command,
                "kube-apiserver",
                &self.dir.path().join("kube-apiserver.log"),
            )?);
        }
        self.wait_ready().await?;
        let ready = started.elapsed();
        // Straight to stderr, like start-up: how long the outage outlasted the stop belongs in every log.
        let _ = writeln!(
            std::io::stderr(),
            "envtest: kube-apiserver at {} ready again in {ready:.2?}",
            self.server
        );
        Ok(ready)
    }

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.apiserver.is_none() {
                return Err(self.not_ready("kube-apiserver is stopped".to_owned()));
            }
            let exited = std::iter::once(&mut self.etcd)
                .chain(self.apiserver.as_mut())
                .find_map(|p| {
                    p.exited()
                        .map(|status| format!("{} exited with {status}", p.name))
                });
            if let Some(reason) = exited {
                return Err(self.not_ready(reason));
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("a static request is valid");
            let last = match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(self.not_ready(last));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn not_ready(&self, reason: String) -> Error {
        Error::NotReady {
            timeout: READY_TIMEOUT,
            reason,
            apiserver_log: log_tail(&self.dir.path().join("kube-apiserver.log")),
            etcd_log: log_tail(&self.dir.path().join("etcd.log")),
        }
    }

    /// A client with cluster-admin rights.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let kubeconfig =
            Kubeconfig::from_yaml(&self.kubeconfig_yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        kube::Client::try_from(config).map_err(Error::Kube)
    }

    /// The admin kubeconfig, with the credentials embedded, as YAML.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig_yaml
    }

    /// A bearer token the apiserver accepts, for a user in `system:masters`. It is random per
    /// control plane, so no other token works: tests use it to tell a valid token from a revoked
    /// or unknown one, which a client certificate cannot show.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A kubeconfig for this plane's server and CA whose user authenticates with `token` as a
    /// bearer token. With [`admin_token`](Self::admin_token) it has cluster-admin rights; with
    /// any other token every request is refused with 401 Unauthorized.
    pub fn token_kubeconfig_yaml(&self, token: &str) -> String {
        self.token_kubeconfig_yaml_via(token, &self.server)
    }

    fn token_kubeconfig_yaml_via(&self, token: &str, server: &str) -> String {
        // A JSON string is a valid YAML double-quoted scalar: any made-up token stays one string.
        let token = serde_json::to_string(token).expect("a string serialises");
        kubeconfig(
            server,
            &self.ca_cert,
            "envtest-token",
            &format!("    token: {token}\n"),
        )
    }

    /// A kubeconfig authenticating as the named user of [`Options::users`].
    pub fn user_token_kubeconfig_yaml(&self, user: &str) -> Option<String> {
        self.user_token_kubeconfig_yaml_via(user, &self.server)
    }

    /// [`user_token_kubeconfig_yaml`](Self::user_token_kubeconfig_yaml) for a client that reaches
    /// the apiserver at `server` instead, say `https://{}` of a [`FaultProxy`]'s address: TLS
    /// passes through, and the serving certificate covers 127.0.0.1.
    pub fn user_token_kubeconfig_yaml_via(&self, user: &str, server: &str) -> Option<String> {
        let token = &self.user_tokens.iter().find(|(u, _)| u == user)?.1;
        Some(self.token_kubeconfig_yaml_via(token, server))
    }

    /// The audit log's path, when it was asked for.
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The audit log's events so far (JSON, one per write to Secrets), when it was asked for.
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let Some(path) = &self.audit_log else {
            return Vec::new();
        };
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The CA's certificate and key (PEM), for a test that issues a client certificate itself.
    pub fn ca_pem(&self) -> (&str, &str) {
        (&self.ca_cert, &self.ca_key)
    }

    /// A kubeconfig for this plane's server and CA whose user shows this client certificate.
    pub fn certificate_kubeconfig_yaml(&self, cert_pem: &str, key_pem: &str) -> String {
        kubeconfig(
            &self.server,
            &self.ca_cert,
            "envtest-certificate",
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert_pem),
                b64(key_pem)
            ),
        )
    }

    /// The admin kubeconfig on disk, for `kubectl --kubeconfig` and for processes under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The apiserver's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The apiserver's address, for a [`FaultProxy`] in front of it.
    pub fn api_address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.api_port))
    }

    /// How long start-up took, from spawning etcd to a ready apiserver.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The process ids of etcd and kube-apiserver; kube-apiserver's is 0 while it is stopped
    /// (see [`stop_apiserver`](Self::stop_apiserver)), as no process has that id.
    pub fn pids(&self) -> [u32; 2] {
        [self.etcd.pid(), self.apiserver.as_ref().map_or(0, Reaped::pid)]
    }

    /// Server-side applies every CustomResourceDefinition found in the given YAML files (other
    /// documents are skipped) and waits until each is established, so it is served.
    pub async fn install_crds(&self, files: &[PathBuf]) -> Result<Vec<String>, Error> {
        let client = self.client().await?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let mut names = Vec::new();
        for path in files {
            for crd in read_crds(path)? {
                let name = crd.metadata.name.clone().unwrap_or_default();
                api.patch(
                    &name,
                    &PatchParams::apply("mimeo-envtest").force(),
                    &Patch::Apply(&crd),
                )
                .await?;
                names.push(name);
            }
        }
        for name in &names {
            let established = await_condition(api.clone(), name, conditions::is_crd_established());
            match tokio::time::timeout(Duration::from_secs(30), established).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(Error::CrdNotEstablished(format!("{name}: {e}"))),
                Err(_) => return Err(Error::CrdNotEstablished(name.clone())),
            }
        }
        Ok(names)
    }

    /// Creates a namespace with the given labels.
    pub async fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) -> Result<Namespace, Error> {
        let api: Api<Namespace> = Api::all(self.client().await?);
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.to_owned());
        ns.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        Ok(api.create(&PostParams::default(), &ns).await?)
    }
}

struct PkiFiles {
    ca_cert: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    service_account_key: PathBuf,
    service_account_pub: PathBuf,
}

fn write_pki(dir: &Path, pki: &Pki) -> Result<PkiFiles, Error> {
    let write = |name: &str, contents: &str| -> Result<PathBuf, Error> {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(io(format!("writing {name}")))?;
        Ok(path)
    };
    Ok(PkiFiles {
        ca_cert: write("ca.crt", &pki.ca_cert)?,
        serving_cert: write("apiserver.crt", &pki.serving_cert)?,
        serving_key: write("apiserver.key", &pki.serving_key)?,
        service_account_key: write("service-account.key", &pki.service_account_key)?,
        service_account_pub: write("service-account.pub", &pki.service_account_pub)?,
    })
}

/// 32 hex characters from the kernel's random source: a token nobody can guess or reuse from
/// another control plane. `/dev/urandom` rather than a crate: this is the one random value needed.
fn random_token() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig with one cluster, one user and one context; `credentials` are the user's fields,
/// each a line indented by four spaces.
fn kubeconfig(server: &str, ca_cert: &str, user: &str, credentials: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
{credentials}contexts:
- name: envtest
  context:
    cluster: envtest
    user: {user}
current-context: envtest
",
        ca = b64(ca_cert),
    )
}

/// Spawns `command` with its output appended to `log`: a restarted process keeps its earlier log.
fn start_logged(mut command: Command, name: &'static str, log: &Path) -> Result<Reaped, Error> {
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("opening {}", log.display())))?;
    let file2 = file.try_clone().map_err(io("duplicating a log handle"))?;
    command.stdin(Stdio::null()).stdout(file).stderr(file2);
    let child = spawn_tied(command).map_err(io(format!("starting {name}")))?;
    Ok(Reaped { name, child })
}

fn log_tail(path: &Path) -> String {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn read_crds(path: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let fail = |reason: String| Error::Crds {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let mut crds = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(document).map_err(|e| fail(e.to_string()))?;
        if value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
            crds.push(serde_json::from_value(value).map_err(|e| fail(e.to_string()))?);
        }
    }
    Ok(crds)
}
