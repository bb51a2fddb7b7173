//! A scripted HTTP server: answers every request with what a function of the request says, and
//! remembers every connection and request it got. For what a real registry will not do on
//! demand: a hostile one (a token realm pointing at a sidecar, redirects to loopback, error bodies
//! carrying text meant for a rule's status), or a token service. A second one, answering
//! anything, stands for the sidecar that must be left alone: [`Scripted::connections`] counts
//! every TCP connection accepted, so "no request" is checked as "not even a connection".
//!
//! HTTP/1.1, one request per connection (`Connection: close` on every answer), over plain TCP or
//! TLS under a CA made for the server alone ([`Scripted::start_tls`]). A body may be generated
//! as it is sent ([`Answer::generated`]), any size, never held whole: for a registry serving
//! huge layers without the test holding them; or stall part way ([`Answer::stalled_after`]),
//! holding the client until it gives up. [`Scripted::most_in_flight`] says how many answers
//! were being sent at once, at most.

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
    /// A body of this many bytes made as it is sent, in place of `body`.
    pub generated: Option<u64>,
    /// Stop sending after this many bytes of the body, and keep the connection open until the
    /// client closes it.
    pub stall_after: Option<u64>,
}

impl Answer {
    pub fn new(status: u16) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: vec![],
            generated: None,
            stall_after: None,
        }
    }

    /// A body of `length` bytes (a repeating pattern), made as it is sent: its `Content-Length`
    /// is `length`, and the server holds no more than one 64 KiB chunk of it at a time.
    pub fn generated(mut self, length: u64) -> Answer {
        self.generated = Some(length);
        self
    }

    /// Sends `bytes` of the body, then nothing more, the connection kept open.
    pub fn stalled_after(mut self, bytes: u64) -> Answer {
        self.stall_after = Some(bytes);
        self
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
    in_flight: Arc<InFlight>,
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
        let in_flight = Arc::new(InFlight::default());
        let (counted, recorded, flying) = (connections.clone(), requests.clone(), in_flight.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let (script, recorded, acceptor) = (script.clone(), recorded.clone(), acceptor.clone());
                let flying = flying.clone();
                tokio::spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, &*script, &recorded, &flying).await;
                            }
                        }
                        None => serve(stream, &*script, &recorded, &flying).await,
                    }
                });
            }
        });
        Ok(Scripted {
            address,
            connections,
            in_flight,
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

    /// The most answers that were being sent at the same time so far: each counted from its
    /// request read until just before its last byte is written, so a client that waits for one
    /// answer before it asks again is never seen with two.
    pub fn most_in_flight(&self) -> usize {
        self.in_flight.most.load(Ordering::SeqCst)
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

/// Answers being sent now, and the most at once so far.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One answer being sent, counted in [`InFlight`] until [`end`](Sending::end) or drop.
struct Sending<'a>(Option<&'a InFlight>);

impl<'a> Sending<'a> {
    fn start(in_flight: &'a InFlight) -> Sending<'a> {
        let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        in_flight.most.fetch_max(now, Ordering::SeqCst);
        Sending(Some(in_flight))
    }

    fn end(&mut self) {
        if let Some(in_flight) = self.0.take() {
            in_flight.now.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// Writes `bytes`, the end of an answer, counting the answer out before its last byte goes:
/// a client holds a whole answer only after it stopped being counted, so a request it sends
/// next is never counted beside it, however late this task runs again (counting out after the
/// last write read 3 at once for a client that never had more than 2 going).
async fn write_last(
    stream: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    sending: &mut Sending<'_>,
) -> std::io::Result<()> {
    let (most, last) = bytes.split_at(bytes.len().saturating_sub(1));
    stream.write_all(most).await?;
    sending.end();
    stream.write_all(last).await
}

/// Reads one request, records it, writes the script's answer and closes.
async fn serve(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    script: &Script,
    recorded: &Mutex<Vec<Asked>>,
    in_flight: &InFlight,
) {
    let Some(asked) = read_request(&mut stream).await else {
        return;
    };
    let mut sending = Sending::start(in_flight);
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
    let length = answer.generated.unwrap_or(answer.body.len() as u64);
    head.push_str(&format!("Content-Length: {length}\r\nConnection: close\r\n\r\n"));
    let stalls = answer.stall_after.is_some_and(|after| after < length);
    // The bytes after the head, as many as are sent.
    let sent = match asked.method.as_str() {
        "HEAD" => 0,
        _ => length.min(answer.stall_after.unwrap_or(u64::MAX)),
    };
    let written = if sent == 0 && !stalls {
        write_last(&mut stream, head.as_bytes(), &mut sending).await
    } else {
        match stream.write_all(head.as_bytes()).await {
            Err(e) => Err(e),
            Ok(()) => match answer.generated {
                Some(_) => write_generated(&mut stream, sent, (!stalls).then_some(&mut sending)).await,
                None if stalls => stream.write_all(&answer.body[..sent as usize]).await,
                None => write_last(&mut stream, &answer.body[..sent as usize], &mut sending).await,
            },
        }
    };
    if written.is_err() {
        return;
    }
    if stalls {
        let _ = stream.flush().await;
        // Until the client gives up: a read returns when it closes the connection.
        let mut byte = [0u8; 1];
        let _ = stream.read(&mut byte).await;
        return;
    }
    let _ = stream.shutdown().await;
}

/// `length` bytes of a repeating pattern, one 64 KiB chunk at a time; the last through
/// [`write_last`] when `ending` is given.
async fn write_generated(
    stream: &mut (impl AsyncWrite + Unpin),
    length: u64,
    mut ending: Option<&mut Sending<'_>>,
) -> std::io::Result<()> {
    const CHUNK: usize = 64 << 10;
    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let mut left = length;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        left -= n as u64;
        match ending.as_deref_mut() {
            Some(sending) if left == 0 => write_last(stream, &chunk[..n], sending).await?,
            _ => stream.write_all(&chunk[..n]).await?,
        }
    }
    Ok(())
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
