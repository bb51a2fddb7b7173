//! A real OCI registry on loopback: the CNCF distribution registry (Debian's `docker-registry`,
//! version 2.8), with filesystem storage in a temporary directory and, optionally, basic auth from
//! an htpasswd file. Tests push artifacts to it with [`oras`](crate::oras) and point mimeo at it,
//! so fetching a plugin goes through a real registry's API, auth challenge and all, rather than a
//! mock that agrees with the client by construction.
//!
//! A registry serves plain HTTP, or HTTPS ([`Registry::start_tls`]) with a serving certificate
//! from a CA generated for that registry alone: a client reaches it only if it was given that CA
//! ([`Registry::ca_path`]), which is what a test of private-CA trust needs. Everything here that
//! talks to a TLS registry (the readiness probe, [`Registry::get_status`],
//! [`Registry::oras_command`]) trusts that CA and nothing else.
//!
//! The binary comes from a Debian package, not from this crate: `install-registry.sh` installs it
//! (as root, through apt), and [`registry_binary`] only finds it.

use crate::pki::ServingPki;
use crate::process::Reaped;
use crate::{Error, io, log_tail, oras, ports, random_token, start_logged};
use base64::Engine as _;
use rustls::pki_types::ServerName;
use sha2::Digest as _;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// How long a registry may take to answer `GET /v2/` before start-up is called failed. It
/// usually answers within a few hundred milliseconds.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one probe request may take. Loopback answers at once, so a longer wait is a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many fresh ports to try when the registry cannot bind the one it was given: a free port is
/// only free until someone else binds it, and tests run in parallel.
const BIND_ATTEMPTS: usize = 3;

/// bcrypt's cost for the htpasswd entry. The registry checks the password on every request, so
/// the default cost (12, a quarter of a second per check) would slow each push and pull; 4 is the
/// lowest bcrypt allows, and the secret only guards a loopback registry that lives for one test.
const BCRYPT_COST: u32 = 4;

/// The manifest media types [`Registry::get_status`] accepts.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// The files of a TLS registry, in its directory: the CA clients trust, and the registry's serving
/// certificate and key.
const CA_FILE: &str = "ca.crt";
const CERT_FILE: &str = "registry.crt";
const KEY_FILE: &str = "registry.key";

/// The media types of a Wasm artifact in the layout the CNCF TAG Runtime's Wasm OCI artifact
/// format specifies, as the manifest pushed by [`Registry::push_wasm`] has them.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer of a Wasm artifact: the module or component itself.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Where the registry binary is: `MIMEO_REGISTRY_BIN` when set and not empty, else
/// `docker-registry` on `PATH`, else `/usr/bin/docker-registry`, else what
/// `install-registry.sh` installs (Debian's package; once per test process, as root). The error
/// says how to install it by hand.
pub fn registry_binary() -> Result<PathBuf, Error> {
    if let Some(bin) = std::env::var_os("MIMEO_REGISTRY_BIN").filter(|bin| !bin.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(Error::RegistryBinary(format!(
                "MIMEO_REGISTRY_BIN is {}, which is not a file",
                bin.display()
            )))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("docker-registry"));
    if let Some(found) = on_path
        .chain([PathBuf::from("/usr/bin/docker-registry")])
        .find(|candidate| candidate.is_file())
    {
        return Ok(found);
    }
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| crate::binaries::run_script("install-registry.sh", "path"))
        .clone()
        .map_err(|why| {
            Error::RegistryBinary(format!(
                "docker-registry is neither on PATH nor at /usr/bin/docker-registry, and installing \
                 it failed ({why}): run `sudo bash {}` (Debian's docker-registry package) or set \
                 MIMEO_REGISTRY_BIN",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("install-registry.sh")
                    .display()
            ))
        })
}

/// One running registry, stopped and its storage removed when dropped.
pub struct Registry {
    // Field order is drop order: kill the registry before removing the directory it writes to.
    process: Reaped,
    dir: tempfile::TempDir,
    port: u16,
    credentials: Option<(String, String)>,
    tls: Option<Tls>,
    log_path: PathBuf,
    startup: Duration,
}

/// What clients of a TLS registry need: its CA, as a file and as PEM, and a TLS connector that
/// trusts that CA alone.
struct Tls {
    ca_path: PathBuf,
    ca_pem: String,
    connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// Writes the CA, the serving certificate and its key into `dir` under the names
    /// [`config_yml`] gives the registry.
    fn generate(dir: &Path) -> Result<Tls, Error> {
        let pki = ServingPki::generate("mimeo-envtest-registry")?;
        for (name, contents) in [
            (CA_FILE, &pki.ca_cert),
            (CERT_FILE, &pki.serving_cert),
            (KEY_FILE, &pki.serving_key),
        ] {
            std::fs::write(dir.join(name), contents).map_err(io(format!("writing {name}")))?;
        }
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(pki.ca_der)
            .map_err(|e| Error::RegistryTls(format!("adding the CA to a root store: {e}")))?;
        // An explicit provider: a process-wide default may be unset, or set to another one.
        let config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| Error::RegistryTls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        Ok(Tls {
            ca_path: dir.join(CA_FILE),
            ca_pem: pki.ca_cert,
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }
}

impl Registry {
    /// Starts a registry that anyone may push to and pull from, and waits until `GET /v2/`
    /// answers 200.
    pub async fn start() -> Result<Registry, Error> {
        Self::launch(None, false).await
    }

    /// Starts a registry like [`start`](Self::start), but serving HTTPS only, with a certificate
    /// for `127.0.0.1` and `localhost` signed by a CA made for this registry alone
    /// ([`ca_path`](Self::ca_path)), so a client gets through only if it trusts that CA. Waits
    /// until `GET /v2/` over TLS, trusting that CA, answers 200.
    pub async fn start_tls() -> Result<Registry, Error> {
        Self::launch(None, true).await
    }

    /// Starts a registry behind basic auth that knows one user, and waits until an anonymous
    /// `GET /v2/` is answered 401 with a challenge. Every request without these credentials is
    /// refused, reads included, as distribution's htpasswd auth has no anonymous access.
    pub async fn start_with_auth(user: &str, password: &str) -> Result<Registry, Error> {
        // An htpasswd line is `user:hash`: a colon or line break would make another entry.
        if user.is_empty() || user.contains([':', '\n', '\r']) {
            return Err(Error::RegistryRequest(format!(
                "{user:?} cannot be an htpasswd user name"
            )));
        }
        Self::launch(Some((user.to_owned(), password.to_owned())), false).await
    }

    async fn launch(credentials: Option<(String, String)>, tls: bool) -> Result<Registry, Error> {
        let binary = registry_binary()?;
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("mimeo-registry-")
            .tempdir()
            .map_err(io("creating the registry directory"))?;
        let htpasswd = match &credentials {
            Some((user, password)) => {
                // `$2y$` as `htpasswd -B` writes it; Go's bcrypt reads every `$2?$` variant alike.
                let hash = bcrypt::hash_with_result(password, BCRYPT_COST)
                    .map_err(|e| Error::RegistryRequest(format!("hashing the password: {e}")))?
                    .format_for_version(bcrypt::Version::TwoY);
                let path = dir.path().join("htpasswd");
                std::fs::write(&path, format!("{user}:{hash}\n")).map_err(io("writing htpasswd"))?;
                Some(path)
            }
            None => None,
        };
        let tls = if tls {
            Some(Tls::generate(dir.path())?)
        } else {
            None
        };
        let serves_tls = tls.is_some();
        // Writes config.yml for `port` and starts the registry with it, logging to registry.log.
        let spawn = |dir: &Path, port: u16| -> Result<Reaped, Error> {
            let config = dir.join("config.yml");
            std::fs::write(&config, config_yml(dir, port, htpasswd.as_deref(), serves_tls)?)
                .map_err(io("writing config.yml"))?;
            let mut command = Command::new(&binary);
            command.arg("serve").arg(&config).current_dir(dir);
            start_logged(command, "docker-registry", &dir.join("registry.log"))
        };
        let [port] = ports::reserve::<1>().map_err(io("finding a free loopback port"))?;
        let process = spawn(dir.path(), port)?;
        let log_path = dir.path().join("registry.log");
        let mut registry = Registry {
            process,
            dir,
            port,
            credentials,
            tls,
            log_path,
            startup: Duration::ZERO,
        };
        let mut attempt = 1;
        loop {
            match registry.wait_ready().await {
                Ok(()) => break,
                Err(_) if attempt < BIND_ATTEMPTS && registry.lost_its_port() => {
                    attempt += 1;
                    let _ = writeln!(
                        std::io::stderr(),
                        "envtest: port {} was taken before the registry bound it; trying another",
                        registry.port
                    );
                    let [port] = ports::reserve::<1>().map_err(io("finding a free loopback port"))?;
                    registry.port = port;
                    registry.process = spawn(registry.dir.path(), port)?;
                }
                Err(e) => return Err(e),
            }
        }
        registry.startup = started.elapsed();
        // Straight to stderr, past the test harness's capture, like the control plane's.
        let _ = writeln!(
            std::io::stderr(),
            "envtest: OCI registry at {}{}{} ready in {:.2?}",
            registry.url(),
            if registry.credentials.is_some() {
                " (basic auth)"
            } else {
                ""
            },
            match &registry.tls {
                Some(tls) => format!(" (CA {})", tls.ca_path.display()),
                None => String::new(),
            },
            registry.startup
        );
        Ok(registry)
    }

    /// Polls `GET /v2/` until it answers as this registry should: 200 without auth, 401 with; over
    /// TLS for a TLS registry, so a certificate the CA does not vouch for fails start-up.
    async fn wait_ready(&mut self) -> Result<(), Error> {
        let expected = if self.credentials.is_some() { 401 } else { 200 };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.exited() {
                return Err(self.not_ready(format!("docker-registry exited with {status}")));
            }
            let last = match self.get_status("/v2/", None).await {
                Ok(status) if status == expected => return Ok(()),
                Ok(status) => format!("GET /v2/ answered {status}, not {expected}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(self.not_ready(last));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the registry died because its port was taken in the meantime.
    fn lost_its_port(&mut self) -> bool {
        self.process.exited().is_some()
            && std::fs::read_to_string(&self.log_path).is_ok_and(|log| log.contains("address already in use"))
    }

    fn not_ready(&self, reason: String) -> Error {
        Error::RegistryNotReady {
            timeout: READY_TIMEOUT,
            reason,
            log_path: self.log_path.clone(),
            log: self.log_tail(),
        }
    }

    /// `127.0.0.1:PORT`: the registry part of an image reference, as in `HOST/repo:tag`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, or `https://127.0.0.1:PORT` for a registry started with
    /// [`start_tls`](Self::start_tls). Over plain HTTP clients need their insecure or plain-HTTP
    /// switch (`oras --plain-http`); over HTTPS they need [`ca_path`](Self::ca_path) instead.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    /// The PEM file of the CA that signed a TLS registry's certificate, in the registry's
    /// directory (removed with it); `None` for a plain-HTTP registry. What a client is given to
    /// trust this registry, such as `oras --ca-file`.
    pub fn ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.ca_path.as_path())
    }

    /// The same CA as [`ca_path`](Self::ca_path), as PEM text, for configuration that takes the
    /// certificate itself rather than a file, such as a Secret or ConfigMap; `None` without TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|tls| tls.ca_pem.as_str())
    }

    /// The user and password the registry accepts, if it was started with auth.
    pub fn credentials(&self) -> Option<(String, String)> {
        self.credentials.clone()
    }

    /// The registry's process id, to check that dropping it leaves no process behind.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The registry's log (its own messages and one access-log line per request), kept until the
    /// registry is dropped: the first thing to read when a pull fails.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last lines of the log, to put in a failing test's message.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log_path)
    }

    /// How long start-up took, from writing the configuration to a ready `/v2/`.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The status code of `GET path` on the registry (`path` starts with `/`), with basic auth
    /// when `basic_auth` is given. Redirects are not followed: the status is the registry's own.
    /// A TLS registry is asked over TLS, trusting its CA alone and checking that the certificate
    /// is for `127.0.0.1`.
    ///
    /// The request accepts OCI and Docker v2 manifests and indexes. It has to: asked for an OCI
    /// manifest without an `Accept` that names its media type, distribution 2.8 answers 404
    /// `MANIFEST_UNKNOWN` ("OCI manifest found, but accept header does not support OCI
    /// manifests"), as if the tag did not exist. A client that fetches plugins from this registry
    /// must send `Accept` for the same reason.
    pub async fn get_status(&self, path: &str, basic_auth: Option<(&str, &str)>) -> Result<u16, Error> {
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: mimeo-envtest\r\nAccept: {MANIFEST_TYPES}\r\nConnection: close\r\n",
            self.host()
        );
        if let Some((user, password)) = basic_auth {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request.push_str(&format!("Authorization: Basic {token}\r\n"));
        }
        request.push_str("\r\n");
        let exchange = async {
            let stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).await?;
            match &self.tls {
                Some(tls) => {
                    let name = ServerName::from(IpAddr::V4(Ipv4Addr::LOCALHOST));
                    round_trip(tls.connector.connect(name, stream).await?, &request).await
                }
                None => round_trip(stream, &request).await,
            }
        };
        let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| Error::RegistryRequest(format!("GET {path}: no answer in {REQUEST_TIMEOUT:?}")))?
            .map_err(|e| Error::RegistryRequest(format!("GET {path}: {e}")))?;
        let head = String::from_utf8_lossy(&response[..response.len().min(64)]).into_owned();
        head.strip_prefix("HTTP/1.1 ")
            .or_else(|| head.strip_prefix("HTTP/1.0 "))
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| Error::RegistryRequest(format!("GET {path}: not an HTTP response: {head:?}")))
    }

    /// An `oras` command for one of its subcommands that takes a single reference on this
    /// registry (`push`, `pull`, `manifest fetch`, `blob fetch`, `tag`, `repo tags`, ...), already
    /// given `--plain-http` (or, for a TLS registry, `--ca-file` with its CA, so oras checks the
    /// certificate rather than skipping TLS), this registry's credentials if it has any, and a
    /// credentials file of its own, so that nothing in `~/.docker/config.json` leaks in and
    /// `oras login` leaks nothing out. Add the reference and the rest, then run it.
    pub fn oras_command(&self, subcommand: &[&str]) -> Result<Command, Error> {
        let mut command = Command::new(oras()?);
        command.args(subcommand);
        match &self.tls {
            Some(tls) => command.arg("--ca-file").arg(&tls.ca_path),
            None => command.arg("--plain-http"),
        };
        command
            .arg("--registry-config")
            .arg(self.dir.path().join("oras-auth.json"))
            .stdin(Stdio::null());
        if let Some((user, password)) = &self.credentials {
            command.args(["--username", user, "--password", password]);
        }
        Ok(command)
    }

    /// Pushes `wasm` as `HOST/<reference>` (`repo:tag`) in the CNCF Wasm artifact layout: an OCI
    /// image manifest whose config has media type [`WASM_CONFIG_MEDIA_TYPE`] (`architecture`
    /// `wasm`, `os` `wasip2`, the layer's digest) and whose one layer, titled `plugin.wasm`, is the
    /// module with media type [`WASM_LAYER_MEDIA_TYPE`]. Returns the manifest's digest.
    pub fn push_wasm(&self, reference: &str, wasm: &[u8]) -> Result<String, Error> {
        let work = tempfile::Builder::new()
            .prefix("push-")
            .tempdir_in(self.dir.path())
            .map_err(io("creating a push directory"))?;
        std::fs::write(work.path().join("plugin.wasm"), wasm).map_err(io("writing plugin.wasm"))?;
        let layer_digest = format!("sha256:{:x}", sha2::Sha256::digest(wasm));
        let config = serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        });
        std::fs::write(work.path().join("config.json"), config.to_string())
            .map_err(io("writing config.json"))?;
        let mut command = self.oras_command(&["push"])?;
        command
            // oras refuses absolute paths and titles each layer with the path given.
            .current_dir(work.path())
            .args(["--config", &format!("config.json:{WASM_CONFIG_MEDIA_TYPE}")])
            .args(["--format", "go-template={{.digest}}"])
            .arg(format!("{}/{reference}", self.host()))
            .arg(format!("plugin.wasm:{WASM_LAYER_MEDIA_TYPE}"));
        let stdout = run(command)?;
        Ok(stdout.trim().to_owned())
    }
}

/// Sends `request` on `stream` and reads the response to the end: the server closes after one
/// response, as the request says `Connection: close`. Generic so plain TCP and TLS share it.
async fn round_trip(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
) -> std::io::Result<Vec<u8>> {
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(response)
}

/// Runs a finished `oras` command and returns its stdout, or its stderr in the error.
fn run(mut command: Command) -> Result<String, Error> {
    let described = format!("{command:?}");
    let output = command.output().map_err(io(format!("running {described}")))?;
    if !output.status.success() {
        return Err(Error::OrasFailed {
            command: described,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The registry's configuration: plain HTTP on loopback, or HTTPS with the certificate and key
/// [`Tls::generate`] wrote into `dir` if `tls`, storage under `dir`, deletes allowed (so tests can
/// take an artifact away), no background upload purging, and htpasswd auth if given.
fn config_yml(dir: &Path, port: u16, htpasswd: Option<&Path>, tls: bool) -> Result<String, Error> {
    // JSON strings are YAML double-quoted scalars: any temporary path stays one string.
    let quote =
        |path: &Path| serde_json::to_string(&path.display().to_string()).expect("a string serialises");
    let mut yml = format!(
        "version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: {secret}
",
        storage = quote(&dir.join("storage")),
        // Signs upload state; without one the registry makes one up and warns about it.
        secret = random_token()?,
    );
    if tls {
        // Indented under the `http:` section that ends the text so far.
        yml.push_str(&format!(
            "  tls:
    certificate: {}
    key: {}
",
            quote(&dir.join(CERT_FILE)),
            quote(&dir.join(KEY_FILE))
        ));
    }
    if let Some(htpasswd) = htpasswd {
        yml.push_str(&format!(
            "auth:
  htpasswd:
    realm: mimeo-envtest
    path: {}
",
            quote(htpasswd)
        ));
    }
    Ok(yml)
}
