//! Free loopback ports, never handed out twice by one process.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Finds `N` distinct ports that were free on 127.0.0.1 a moment ago.
pub(crate) fn reserve<const N: usize>() -> std::io::Result<[u16; N]> {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    let mut ports = [0u16; N];
    let mut held = Vec::new();
    for slot in ports.iter_mut() {
        loop {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let port = listener.local_addr()?.port();
            held.push(listener);
            if handed_out.insert(port) {
                *slot = port;
                break;
            }
        }
    }
    Ok(ports)
}
