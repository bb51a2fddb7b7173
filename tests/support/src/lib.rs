//! Real, isolated Kubernetes control planes for mimeo's tests: an etcd and a kube-apiserver on
//! free loopback ports, with a temporary data directory, generated certificates and an admin
//! credential. Several can run at once; each stands for a separate cluster.
//!
//! The processes are killed and reaped when the [`ControlPlane`] is dropped, and die with the test
//! process if it is killed. Nothing here ever talks to anything but 127.0.0.1.

mod binaries;
mod pki;
mod ports;
mod process;

pub use binaries::{Binaries, binaries};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use pki::Pki;
use process::{Reaped, spawn_tied};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a control plane may take to become ready before start-up is called failed.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

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
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// One running etcd + kube-apiserver pair.
pub struct ControlPlane {
    // Field order is drop order: stop the apiserver before etcd, then remove the data directory.
    apiserver: Reaped,
    etcd: Reaped,
    dir: tempfile::TempDir,
    server: String,
    kubeconfig_yaml: String,
    kubeconfig_path: PathBuf,
    startup: Duration,
}

impl ControlPlane {
    /// Starts a fresh control plane and waits until its apiserver reports ready.
    pub async fn start() -> Result<Self, Error> {
        let binaries = binaries()?;
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("mimeo-envtest-")
            .tempdir()
            .map_err(io("creating the data directory"))?;
        let pki = Pki::generate()?;
        let files = write_pki(dir.path(), &pki)?;
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
        let apiserver = start_logged(
            apiserver,
            "kube-apiserver",
            &dir.path().join("kube-apiserver.log"),
        )?;

        let kubeconfig_yaml = kubeconfig(&server, &pki);
        let kubeconfig_path = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig_path, &kubeconfig_yaml).map_err(io("writing the kubeconfig"))?;

        let mut plane = ControlPlane {
            apiserver,
            etcd,
            dir,
            server,
            kubeconfig_yaml,
            kubeconfig_path,
            startup: Duration::ZERO,
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

    async fn wait_ready(&mut self) -> Result<(), Error> {
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = [&mut self.etcd, &mut self.apiserver].into_iter().find_map(|p| {
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

    /// The admin kubeconfig on disk, for `kubectl --kubeconfig` and for processes under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The apiserver's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How long start-up took, from spawning etcd to a ready apiserver.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The process ids of etcd and kube-apiserver.
    pub fn pids(&self) -> [u32; 2] {
        [self.etcd.pid(), self.apiserver.pid()]
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

fn kubeconfig(server: &str, pki: &Pki) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: envtest-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: envtest
  context:
    cluster: envtest
    user: envtest-admin
current-context: envtest
",
        ca = b64(&pki.ca_cert),
        cert = b64(&pki.admin_cert),
        key = b64(&pki.admin_key),
    )
}

fn start_logged(mut command: Command, name: &'static str, log: &Path) -> Result<Reaped, Error> {
    let file = std::fs::File::create(log).map_err(io(format!("creating {}", log.display())))?;
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
