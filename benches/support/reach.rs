//! What a controller holds open to each apiserver: the WATCH requests an apiserver serves (from
//! its own metrics) and a process's established TCP connections by remote port (from /proc).

use kube::Client;
use std::collections::{BTreeMap, HashSet};

/// WATCH requests the apiserver is serving now, from its own metrics.
pub async fn watches(client: &Client) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The process's established TCP connections, by remote port (from /proc: its socket inodes,
/// matched against the kernel's table).
pub fn connections_by_port(pid: u32) -> BTreeMap<u16, usize> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|link| {
                    let link = link.to_string_lossy().into_owned();
                    Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // remote address is field 2 (hex ip:port), state field 3 (01 = established), inode 9.
            let (Some(remote), Some(state), Some(inode)) = (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state != "01" || !inodes.contains(*inode) {
                continue;
            }
            if let Some(port) = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                *out.entry(port).or_insert(0) += 1;
            }
        }
    }
    out
}

pub fn port_of(server: &str) -> u16 {
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or(0)
}
