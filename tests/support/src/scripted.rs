//! A scripted HTTP server: answers every request with what a function of the request says, and
//! remembers every connection and request it got. For what a real registry will not do on
//! demand: a hostile one (a token realm pointing at a sidecar, redirects to loopback, error bodies
//! carrying text meant for a rule's status), or a token service. A second one, answering
//! anything, stands for the sidecar that must be left alone: [`Scripted::connections`] counts
//! every TCP connection accepted, so "no request" is checked as "not even a connection".
//!
//! HTTP/1.1, one request per connection (`Connection: close` on every answer), over plain TCP or
//! TLS under a CA made for the server alone ([`Scripted::start_tls`]).

use crate::pki::ServingPki;
use crate::{Error, io};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The largest request head or body read; the tests send kilobytes.
const MAX_REQUEST: usize = 16 << 20;

/// A request as the server read it.
#[derive(Clone, Debug)]
pub struct Asked {
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    /// Names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Asked {
    /// The first value of a header, by its lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// What the server answers.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn new(status: u16) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: vec![],
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Answer {
        self.body = body.into();
        self
    }
}

type Script = dyn Fn(&Asked) -> Answer + Send + Sync;

/// A running scripted server; it stops when dropped.
pub struct Scripted {
    address: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Asked>>>,
    ca: Option<(tempfile::TempDir, PathBuf)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    /// Plain HTTP on a free port of 127.0.0.1.
    pub async fn start(script: impl Fn(&Asked) -> Answer + Send + Sync + 'static) -> Result<Scripted, Error> {
        Self::launch(IpAddr::V4(Ipv4Addr::LOCALHOST), None, Arc::new(script)).await
    }

    /// Plain HTTP on a free port of `ip`, an address of this machine (see [`local_address`]).
    pub async fn start_on(
        ip: IpAddr,
        script: impl Fn(&Asked) -> Answer + Send + Sync + 'static,
    ) -> Result<Scripted, Error> {
        Self::launch(ip, None, Arc::new(script)).await
    }

    /// HTTPS on a free port of 127.0.0.1, with a certificate for `127.0.0.1` and `localhost`
    /// from a CA made for this server alone ([`ca_path`](Self::ca_path)).
    pub async fn start_tls(
        script: impl Fn(&Asked) -> Answer + Send + Sync + 'static,
    ) -> Result<Scripted, Error> {
        let pki = ServingPki::generate("mimeo-envtest-scripted")?;
        Self::launch(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(pki), Arc::new(script)).await
    }

    async fn launch(ip: IpAddr, pki: Option<ServingPki>, script: Arc<Script>) -> Result<Scripted, Error> {
        let listener = tokio::net::TcpListener::bind((ip, 0))
            .await
            .map_err(io(format!("binding {ip}:0")))?;
        let address = listener.local_addr().map_err(io("reading the bound address"))?;
        let (acceptor, ca) = match pki {
            Some(pki) => {
                let dir = tempfile::Builder::new()
                    .prefix("mimeo-scripted-")
                    .tempdir()
                    .map_err(io("creating the CA directory"))?;
                let path = dir.path().join("ca.crt");
                std::fs::write(&path, &pki.ca_cert).map_err(io("writing ca.crt"))?;
                (Some(acceptor(&pki)?), Some((dir, path)))
            }
            None => (None, None),
        };
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (counted, recorded) = (connections.clone(), requests.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let (script, recorded, acceptor) = (script.clone(), recorded.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, &*script, &recorded).await;
                            }
                        }
                        None => serve(stream, &*script, &recorded).await,
                    }
                });
            }
        });
        Ok(Scripted {
            address,
            connections,
            requests,
            ca,
            task,
        })
    }

    /// `IP:PORT`, as an image reference's registry part writes it.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The CA of a TLS server's certificate, as a PEM file; `None` for plain HTTP.
    pub fn ca_path(&self) -> Option<&Path> {
        self.ca.as_ref().map(|(_, path)| path.as_path())
    }

    /// TCP connections accepted so far, TLS handshakes or requests or not.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The requests read so far, in order.
    pub fn requests(&self) -> Vec<Asked> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn acceptor(pki: &ServingPki) -> Result<tokio_rustls::TlsAcceptor, Error> {
    let tls = |e: String| Error::RegistryTls(e);
    let certificates =
        vec![CertificateDer::from_pem_slice(pki.serving_cert.as_bytes()).map_err(|e| tls(e.to_string()))?];
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key.as_bytes()).map_err(|e| tls(e.to_string()))?;
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certificates, key)
            .map_err(|e| tls(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Reads one request, records it, writes the script's answer and closes.
async fn serve(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    script: &Script,
    recorded: &Mutex<Vec<Asked>>,
) {
    let Some(asked) = read_request(&mut stream).await else {
        return;
    };
    let answer = script(&asked);
    recorded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(asked.clone());
    let reason = match answer.status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        302 => "Found",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        _ => "Whatever",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (name, value) in &answer.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.body.len()
    ));
    let mut response = head.into_bytes();
    if asked.method != "HEAD" {
        response.extend_from_slice(&answer.body);
    }
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

async fn read_request(stream: &mut (impl AsyncRead + Unpin)) -> Option<Asked> {
    let mut buffer = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 || buffer.len() > MAX_REQUEST {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 65536];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(Asked {
        method,
        target,
        headers,
        body,
    })
}

/// An IPv4 address of this machine that is neither loopback nor link-local, for a server that a
/// client must not take for a loopback one; `None` on a machine with only loopback.
#[allow(unsafe_code)]
pub fn local_address() -> Option<IpAddr> {
    // The kernel's own table; no packet is sent.
    let mut addresses: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `addresses` with a list freed below by freeifaddrs; each entry's
    // ifa_addr is null or points at a sockaddr of the family it names.
    unsafe {
        if libc::getifaddrs(&mut addresses) != 0 {
            return None;
        }
        let mut found = None;
        let mut entry = addresses;
        while !entry.is_null() {
            let address = (*entry).ifa_addr;
            if !address.is_null() && i32::from((*address).sa_family) == libc::AF_INET {
                let v4 = &*(address as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
                if !ip.is_loopback() && !ip.is_link_local() && !ip.is_unspecified() {
                    found = Some(IpAddr::V4(ip));
                    break;
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(addresses);
        found
    }
}
