//! A TCP proxy on 127.0.0.1 in front of one upstream address that does to the connections it
//! carries what a network does, changed while they are open: [`FaultProxy`].
//!
//! - [`Fault::Blackhole`] is a partition: nothing moves in either direction, yet no connection is
//!   closed and nothing is lost. What was read is held, and delivered in order when the link
//!   heals, as TCP's retransmission would deliver it. A client connecting meanwhile is accepted
//!   (the kernel does that) but not carried upstream before the heal: it waits.
//! - [`Fault::Delay`] holds each chunk for a while after it was read, in each direction.
//! - [`FaultProxy::reset`] closes every open connection with RST (SO_LINGER 0), at both ends.
//!
//! It runs on a thread of its own, so that a test's runtime busy elsewhere or a process under test
//! frozen stalls nothing here. It never connects anywhere but its one upstream.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// What the link does to the bytes it carries ([`FaultProxy::set`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Every byte on at once.
    #[default]
    Pass,
    /// Each chunk on this long after it was read, in each direction: a round trip takes twice it.
    Delay(Duration),
    /// Nothing on, everything held until the fault changes.
    Blackhole,
}

/// The proxy; stops, closing every connection, when dropped.
pub struct FaultProxy {
    address: SocketAddr,
    fault: watch::Sender<Fault>,
    /// Bumped by each [`FaultProxy::reset`]: a connection opened before a bump is reset.
    resets: watch::Sender<u64>,
    open: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and carries each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let (fault, _) = watch::channel(Fault::Pass);
        let (resets, _) = watch::channel(0);
        let open = Arc::new(AtomicUsize::new(0));
        let link = Link {
            upstream,
            fault: fault.subscribe(),
            resets: resets.subscribe(),
            open: open.clone(),
        };
        let (stop, stopped) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", address.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept(listener, link) => {}
                    }
                })
            })?;
        Ok(FaultProxy {
            address,
            fault,
            resets,
            open,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Changes what the link does, for open connections as for new ones.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// Closes every connection open now with RST at both ends, dropping what it held; the fault
    /// set stays as it is, and later connections are carried as usual.
    pub fn reset(&self) {
        self.resets.send_modify(|generation| *generation += 1);
    }

    /// Connections open now, whether carried upstream yet or not.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The runtime is dropped with the thread's end, and every connection's task with it.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What each connection's task needs to know.
#[derive(Clone)]
struct Link {
    upstream: SocketAddr,
    fault: watch::Receiver<Fault>,
    resets: watch::Receiver<u64>,
    open: Arc<AtomicUsize>,
}

async fn accept(listener: TcpListener, link: Link) {
    // Dropped with the loop, it aborts every connection's task.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of descriptors, say: try again shortly rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(link.clone().carry(client));
    }
}

impl Link {
    async fn carry(self, mut client: TcpStream) {
        self.open.fetch_add(1, Ordering::SeqCst);
        let _open = Counted(self.open.clone());
        let _ = client.set_nodelay(true);
        let mut resets = self.resets.clone();
        let generation = *resets.borrow_and_update();
        let reset = async move {
            let _ = resets.wait_for(|g| *g != generation).await;
        };
        tokio::pin!(reset);
        // Not upstream while the link is down: the client waits, as for a SYN that gets no answer.
        let mut fault = self.fault.clone();
        let connect = async {
            unblocked(&mut fault).await;
            TcpStream::connect(self.upstream).await
        };
        let mut upstream = tokio::select! {
            _ = &mut reset => return abort(client),
            connected = connect => match connected {
                Ok(upstream) => upstream,
                Err(_) => return abort(client),
            },
        };
        let _ = upstream.set_nodelay(true);
        let carried = tokio::select! {
            _ = &mut reset => Err(io::ErrorKind::ConnectionReset.into()),
            carried = both_ways(&mut client, &mut upstream, &self.fault) => carried,
        };
        // Closed in order at both ends, the connection ends quietly; otherwise each end is told.
        if carried.is_err() {
            abort(client);
            abort(upstream);
        }
    }
}

/// Counts an open connection down when its task ends, however it ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes with RST: SO_LINGER 0 makes the close abortive.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn both_ways(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    fault: &watch::Receiver<Fault>,
) -> io::Result<()> {
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    tokio::try_join!(
        one_way(client_read, upstream_write, fault.clone()),
        one_way(upstream_read, client_write, fault.clone()),
    )?;
    Ok(())
}

/// One direction: a reader that reads on (except while blackholed) and a writer that delivers
/// each chunk when the fault lets it, in order, joined by a queue holding what was read. The end
/// of the stream is queued too, as an empty chunk, so a half-close is passed on in its place.
async fn one_way(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    fault: watch::Receiver<Fault>,
) -> io::Result<()> {
    let (queue, mut held) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut reading = fault.clone();
    let read = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            unblocked(&mut reading).await;
            let n = from.read(&mut buffer).await?;
            let _ = queue.send((Instant::now(), buffer[..n].to_vec()));
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
        }
    };
    let mut writing = fault;
    let write = async move {
        while let Some((read_at, chunk)) = held.recv().await {
            due(&mut writing, read_at).await;
            if chunk.is_empty() {
                return to.shutdown().await;
            }
            to.write_all(&chunk).await?;
        }
        Ok::<_, io::Error>(())
    };
    tokio::try_join!(read, write)?;
    Ok(())
}

/// Returns once the link is not blackholed (at once if it is not).
async fn unblocked(fault: &mut watch::Receiver<Fault>) {
    let _ = fault.wait_for(|f| *f != Fault::Blackhole).await;
}

/// Waits until a chunk read at `read_at` may be delivered: at once when the link passes, its
/// delay after it was read when the link is slowed, not before the heal when it is blackholed.
/// The fault is read again whenever it changes, so a chunk held under one fault goes under the next.
async fn due(fault: &mut watch::Receiver<Fault>, read_at: Instant) {
    loop {
        let now = *fault.borrow_and_update();
        let until = match now {
            Fault::Pass => return,
            Fault::Delay(delay) if read_at + delay <= Instant::now() => return,
            Fault::Delay(delay) => Some(read_at + delay),
            Fault::Blackhole => None,
        };
        tokio::select! {
            _ = async { tokio::time::sleep_until(until.unwrap()).await }, if until.is_some() => return,
            changed = fault.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback, and how many connections it has accepted.
    async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        (address, accepted)
    }

    async fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buffer = vec![0u8; n];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut buffer))
            .await
            .expect("the bytes in time")
            .unwrap();
        buffer
    }

    /// Nothing arrives on `stream` within `wait`.
    async fn silent(stream: &mut TcpStream, wait: Duration) -> bool {
        let mut buffer = [0u8; 16];
        tokio::time::timeout(wait, stream.read(&mut buffer))
            .await
            .is_err()
    }

    #[tokio::test]
    async fn bytes_held_in_a_blackhole_arrive_in_order_after_the_heal_and_new_clients_wait() {
        let (upstream, accepted) = echo().await;
        let proxy = FaultProxy::start(upstream).unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        client.write_all(b"a").await.unwrap();
        assert_eq!(read_n(&mut client, 1).await, b"a");

        proxy.set(Fault::Blackhole);
        client.write_all(b"bc").await.unwrap();
        client.write_all(b"de").await.unwrap();
        let mut late = TcpStream::connect(proxy.address()).await.unwrap();
        late.write_all(b"x").await.unwrap();
        assert!(
            silent(&mut client, Duration::from_millis(300)).await,
            "bytes crossed a blackhole"
        );
        assert!(silent(&mut late, Duration::from_millis(50)).await);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "a blackholed client was carried upstream"
        );
        assert_eq!(proxy.connections(), 2, "a connection was closed in the blackhole");

        proxy.set(Fault::Pass);
        assert_eq!(read_n(&mut client, 4).await, b"bcde");
        assert_eq!(read_n(&mut late, 1).await, b"x");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_delay_holds_each_chunk_in_each_direction() {
        let (upstream, _) = echo().await;
        let proxy = FaultProxy::start(upstream).unwrap();
        let mut client = TcpStream::connect(proxy.address()).await.unwrap();
        let delay = Duration::from_millis(150);
        proxy.set(Fault::Delay(delay));
        let sent = std::time::Instant::now();
        client.write_all(b"ping").await.unwrap();
        assert_eq!(read_n(&mut client, 4).await, b"ping");
        let took = sent.elapsed();
        assert!(
            took >= delay * 2,
            "a round trip took {took:?} under a {delay:?} delay each way"
        );
        assert!(
            took < delay * 2 + Duration::from_secs(1),
            "a round trip took {took:?}"
        );

        proxy.set(Fault::Pass);
        let sent = std::time::Instant::now();
        client.write_all(b"pong").await.unwrap();
        assert_eq!(read_n(&mut client, 4).await, b"pong");
        assert!(sent.elapsed() < delay, "the delay outlived its fault");
    }

    #[tokio::test]
    async fn a_reset_closes_every_connection_with_rst_and_later_ones_pass() {
        let (upstream, _) = echo().await;
        let proxy = FaultProxy::start(upstream).unwrap();
        let mut carried = TcpStream::connect(proxy.address()).await.unwrap();
        carried.write_all(b"a").await.unwrap();
        assert_eq!(read_n(&mut carried, 1).await, b"a");
        // One waiting in a blackhole, not yet carried upstream, is reset too.
        proxy.set(Fault::Blackhole);
        let mut waiting = TcpStream::connect(proxy.address()).await.unwrap();
        while proxy.connections() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.reset();
        for stream in [&mut carried, &mut waiting] {
            let mut buffer = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .expect("the reset in time");
            assert_eq!(
                read.map_err(|e| e.kind()),
                Err(io::ErrorKind::ConnectionReset),
                "a reset connection ended otherwise"
            );
        }

        proxy.set(Fault::Pass);
        let mut after = TcpStream::connect(proxy.address()).await.unwrap();
        after.write_all(b"b").await.unwrap();
        assert_eq!(read_n(&mut after, 1).await, b"b");
    }
}
