//! Where a registry may send mimeo. A rule names a registry, and the registry names the rest: its
//! token service (the `realm` of its `WWW-Authenticate` challenge), redirects (blobs usually live
//! in object storage), upload locations. A hostile registry could name anything the controller's
//! network position reaches: its own pod's sidecars on loopback, the node's link-local agents, a
//! cloud metadata service handing out the node's credentials, the cluster's own services on
//! private addresses. So a place the registry names must be HTTPS (plain HTTP only for a registry
//! that is itself reached over plain HTTP, by configuration), and must not be:
//!
//! - on loopback, link-local or metadata addresses unless the registry itself is that kind of
//!   address: a registry on 127.0.0.1 may use a realm on 127.0.0.1, a registry elsewhere may not;
//! - on private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, fec0::/10) unless
//!   the platform allowed that network ([`RegistryReach::allowed_networks`]) or it is the
//!   registry's own host. A registry on a private address gets no more than one elsewhere: where
//!   registries are not restricted a tenant can name one at any private address, so that the
//!   registry is there says nothing about what else there the platform meant mimeo to reach.
//!
//! Credentials go further only where the platform said: basic credentials are sent to a token
//! service only on the registry's own host or on a host of
//! [`RegistryReach::trusted_realms`] ([`Origin::may_send_credentials`]).
//!
//! The checks are pure. The URL is checked before a request ([`Origin::check_url`]); a name is
//! checked again on the addresses it resolves to, by the resolver the connection then uses
//! ([`Origin::check_resolved`]), so a name cannot pass as one address and be connected to as
//! another. The registry's own name goes wherever it resolves: the rule named it, and
//! `--plugin-allowed-registry` decides which registries rules may name.

use super::network::Network;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// What the platform lets registries do beyond the defaults (`--registry-allowed-network`,
/// `--registry-trusted-realm`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryReach {
    /// Private networks a registry may send mimeo to (a token service, a redirect, an upload
    /// location there). Addresses on loopback, link-local and metadata addresses stay refused
    /// whatever is listed: only [`Place::Private`] addresses are opened by it.
    pub allowed_networks: Vec<Network>,
    /// Token service hosts (`host`, or `host:port` for that port only) that may be sent a rule's
    /// basic credentials, besides the registry's own host: Docker Hub's `auth.docker.io`, say.
    pub trusted_realms: Vec<String>,
}

/// Redirects followed for one request, at most: a blob's download goes to object storage and
/// sometimes on to a CDN; five is room for that and no more.
pub(super) const MAX_REDIRECTS: usize = 5;

/// What kind of place an address is, as far as letting a registry send mimeo there goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// This machine: 127.0.0.0/8, `::1`, `localhost`, and the unspecified `0.0.0.0/8` and `::`,
    /// which reach it too.
    Loopback,
    /// 169.254.0.0/16 and fe80::/10: the node's link, where node agents listen.
    LinkLocal,
    /// Cloud metadata services, which hand out the node's or the pod's cloud credentials.
    Metadata,
    /// Private and shared addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7,
    /// fec0::/10): the cluster's services and the company's network.
    Private,
    /// Anywhere else.
    Elsewhere,
}

impl Place {
    fn describe(self) -> &'static str {
        match self {
            Place::Loopback => "on this machine (loopback)",
            Place::LinkLocal => "a link-local address",
            Place::Metadata => "a cloud metadata address",
            Place::Private => "a private address",
            Place::Elsewhere => "an ordinary address",
        }
    }
}

/// The metadata services' addresses: AWS, GCP, Azure, OpenStack, Oracle and DigitalOcean all
/// answer on 169.254.169.254; AWS's ECS task credentials on 169.254.170.2; Alibaba's on
/// 100.100.100.200, which is not even link-local.
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];
/// AWS's instance metadata over IPv6.
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];
/// The names clouds give their metadata services. Anything else that resolves to their
/// addresses is caught when it is resolved.
const METADATA_NAMES: [&str; 3] = ["metadata.google.internal", "metadata", "instance-data"];

pub(super) fn place_of_ip(ip: IpAddr) -> Place {
    match ip {
        IpAddr::V4(v4) => place_of_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return place_of_v4(v4);
            }
            let segments = v6.segments();
            // NAT64's well-known prefix (64:ff9b::/96) reaches the IPv4 address in its last bits.
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return place_of_v4(Ipv4Addr::from(
                    (u32::from(segments[6]) << 16) | u32::from(segments[7]),
                ));
            }
            if METADATA_V6.contains(&v6) {
                Place::Metadata
            } else if v6.is_loopback() || v6.is_unspecified() {
                Place::Loopback
            } else if segments[0] & 0xffc0 == 0xfe80 {
                Place::LinkLocal
            } else if segments[0] & 0xfe00 == 0xfc00 || segments[0] & 0xffc0 == 0xfec0 {
                Place::Private
            } else {
                Place::Elsewhere
            }
        }
    }
}

fn place_of_v4(v4: Ipv4Addr) -> Place {
    if METADATA_V4.contains(&v4) {
        Place::Metadata
    } else if v4.is_loopback() || v4.octets()[0] == 0 {
        Place::Loopback
    } else if v4.is_link_local() {
        Place::LinkLocal
    } else if v4.is_private() || (v4.octets()[0] == 100 && v4.octets()[1] & 0xc0 == 64) {
        Place::Private
    } else {
        Place::Elsewhere
    }
}

/// A host as written: an address, or a name that says where it is (`localhost`, `*.localhost`,
/// a metadata service's name). Any other name is [`Place::Elsewhere`] until resolved.
pub(super) fn place_of_host(host: &str) -> Place {
    let host = normalize(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return place_of_ip(ip);
    }
    if host == "localhost" || host.ends_with(".localhost") {
        Place::Loopback
    } else if METADATA_NAMES.contains(&host.as_str()) {
        Place::Metadata
    } else {
        Place::Elsewhere
    }
}

/// Lowercase, without a trailing dot (`localhost.` is `localhost`) or IPv6 brackets.
fn normalize(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether two hosts are the same, addresses compared as addresses.
fn same_host(a: &str, b: &str) -> bool {
    let (a, b) = (normalize(a), normalize(b));
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The host of a URL as a string, IPv6 without brackets.
fn url_host(url: &Url) -> Option<String> {
    Some(match url.host()? {
        Host::Domain(name) => name.to_owned(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => ip.to_string(),
    })
}

/// A URL as a message shows it: scheme, host, port and path, without user, query or fragment
/// (the registry wrote it, and they could carry anything), at most about 120 characters.
pub(super) fn shown_url(url: &Url) -> String {
    let mut shown = format!("{}://", url.scheme());
    if let Some(host) = url.host_str() {
        shown.push_str(host);
    }
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shorten(&shown)
}

/// Text from a registry, cut to what a message can carry.
pub(super) fn shorten(text: &str) -> String {
    const MAX: usize = 120;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Why mimeo does not go where a registry sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Why {
    PlainHttp,
    Scheme(String),
    NoHost,
    Place(Place),
    Resolved(IpAddr, Place),
    TooManyRedirects,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::PlainHttp => f.write_str("it is plain HTTP, and the registry is reached over HTTPS"),
            Why::Scheme(scheme) => write!(f, "it is {scheme}:, not HTTPS"),
            Why::NoHost => f.write_str("it names no host"),
            Why::Place(Place::Private) => write!(f, "it is {}{PRIVATE_HINT}", Place::Private.describe()),
            Why::Resolved(ip, Place::Private) => {
                write!(
                    f,
                    "it resolves to {ip}, {}{PRIVATE_HINT}",
                    Place::Private.describe()
                )
            }
            Why::Place(place) => write!(f, "it is {}, and the registry is not", place.describe()),
            Why::Resolved(ip, place) => write!(
                f,
                "it resolves to {ip}, {}, and the registry is not there",
                place.describe()
            ),
            Why::TooManyRedirects => write!(f, "more than {MAX_REDIRECTS} redirects"),
        }
    }
}

/// What a refusal of a private address adds: how the platform opens one.
const PRIVATE_HINT: &str = ", in no network the platform allowed registries to send mimeo to \
                            (--registry-allowed-network)";

/// A place mimeo does not go, and why. An error so that it can travel through reqwest (out of a
/// redirect policy or a resolver) and be found again in the error's causes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{target}: {why}")]
pub(super) struct Refusal {
    /// The URL (as [`shown_url`] shows it) or the name refused.
    pub target: String,
    pub why: Why,
}

/// The registry a client talks to, as the rules about where it may send mimeo see it.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    host: String,
    place: Place,
    plain_http: bool,
    reach: RegistryReach,
}

impl Origin {
    /// `host` without its port; `plain_http` when the registry is reached over plain HTTP by
    /// configuration (loopback, or marked insecure); `reach`, what the platform allowed more.
    pub fn new(host: &str, plain_http: bool, reach: &RegistryReach) -> Origin {
        Origin {
            host: normalize(host),
            place: place_of_host(host),
            plain_http,
            reach: reach.clone(),
        }
    }

    /// Whether an address of this kind may be gone to: anywhere ordinary; a private address in a
    /// network the platform allowed; loopback, link-local or metadata only from a registry that
    /// is that kind of address itself.
    fn allows(&self, place: Place, ip: Option<IpAddr>) -> bool {
        match place {
            Place::Elsewhere => true,
            Place::Private => ip.is_some_and(|ip| self.reach.allowed_networks.iter().any(|n| n.contains(ip))),
            place => place == self.place,
        }
    }

    /// Whether the rule's basic credentials may go with a request to `url`, a token service the
    /// registry named: only to the registry's own host, or to a host the platform trusts with
    /// them. Elsewhere the token is asked for without them.
    pub fn may_send_credentials(&self, url: &Url) -> bool {
        let Some(host) = url_host(url) else {
            return false;
        };
        if same_host(&host, &self.host) {
            return true;
        }
        let port = url.port_or_known_default();
        self.reach.trusted_realms.iter().any(|trusted| {
            let trusted = trusted.trim();
            // `host:port`, `[v6]:port`, `host`, or a bare IPv6 address.
            let (name, wanted_port) = match trusted.rsplit_once(':') {
                Some((name, p)) if !name.contains(':') || name.ends_with(']') => {
                    (name, p.parse::<u16>().ok())
                }
                _ => (trusted, None),
            };
            same_host(name, &host) && wanted_port.is_none_or(|p| Some(p) == port)
        })
    }

    /// The registry's host, as the rules about credentials compare it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether mimeo may go to `url`, which the registry named: its scheme, and its host as
    /// written. A name is checked again when resolved ([`check_resolved`](Self::check_resolved)).
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        let refuse = |why| {
            Err(Refusal {
                target: shown_url(url),
                why,
            })
        };
        match url.scheme() {
            "https" => {}
            "http" if self.plain_http => {}
            "http" => return refuse(Why::PlainHttp),
            other => return refuse(Why::Scheme(other.to_owned())),
        }
        let Some(host) = url_host(url) else {
            return refuse(Why::NoHost);
        };
        if same_host(&host, &self.host) {
            return Ok(());
        }
        let place = place_of_host(&host);
        if self.allows(place, normalize(&host).parse().ok()) {
            Ok(())
        } else {
            refuse(Why::Place(place))
        }
    }

    /// Whether mimeo may connect to `addresses`, which `name` resolved to: any of them that
    /// [`check_url`](Self::check_url) would refuse as an address refuses the name, unless the
    /// name is the registry's own.
    pub fn check_resolved(&self, name: &str, addresses: &[IpAddr]) -> Result<(), Refusal> {
        if same_host(name, &self.host) {
            return Ok(());
        }
        for &ip in addresses {
            let place = place_of_ip(ip);
            if !self.allows(place, Some(ip)) {
                return Err(Refusal {
                    target: shorten(name),
                    why: Why::Resolved(ip, place),
                });
            }
        }
        Ok(())
    }

    /// Whether a redirect may be followed: at most [`MAX_REDIRECTS`] of them (`previous` holds
    /// the first URL and each one followed so far), each to a place [`check_url`](Self::check_url)
    /// allows.
    pub fn check_redirect(&self, next: &Url, previous: &[Url]) -> Result<(), Refusal> {
        if previous.len() > MAX_REDIRECTS {
            return Err(Refusal {
                target: shown_url(next),
                why: Why::TooManyRedirects,
            });
        }
        self.check_url(next)
    }
}

/// The first [`Refusal`] among an error's causes: reqwest wraps what a redirect policy or a
/// resolver returns.
pub(super) fn find_refusal<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refusal> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(refusal) = error.downcast_ref::<Refusal>() {
            return Some(refusal);
        }
        cause = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a platform that allowed nothing more has.
    fn none() -> RegistryReach {
        RegistryReach::default()
    }

    fn reach(networks: &[&str], realms: &[&str]) -> RegistryReach {
        RegistryReach {
            allowed_networks: networks.iter().map(|n| n.parse().unwrap()).collect(),
            trusted_realms: realms.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn private_addresses_only_in_networks_the_platform_allowed() {
        let private = Some(Why::Place(Place::Private));
        let default = Origin::new("registry.example", false, &none());
        let in_cluster = Origin::new("10.0.0.9", false, &none());
        let allowed = Origin::new(
            "registry.example",
            false,
            &reach(&["10.96.0.0/12", "fd00:10::/32"], &[]),
        );
        let everything = Origin::new("registry.example", false, &reach(&["0.0.0.0/0", "::/0"], &[]));
        for (origin, target, refused) in [
            (&default, "https://10.0.0.1/token", private.clone()),
            (&default, "https://172.16.0.1/token", private.clone()),
            (&default, "https://172.31.9.9/token", private.clone()),
            (&default, "https://192.168.1.1/token", private.clone()),
            (&default, "https://100.64.0.1/token", private.clone()),
            (&default, "https://[fd00::1]/token", private.clone()),
            (&default, "https://[fc00::1]/token", private.clone()),
            (&default, "https://[::ffff:a00:1]/token", private.clone()),
            (&default, "https://167772161/token", private.clone()),
            (&default, "https://203.0.113.7/token", None),
            // A registry on a private address gets no more than one elsewhere, but its own host.
            (&in_cluster, "https://10.0.0.10/token", private.clone()),
            (&in_cluster, "https://10.0.0.9:5001/token", None),
            (&allowed, "https://10.100.0.1/token", None),
            (&allowed, "https://[fd00:10::5]/token", None),
            (&allowed, "https://10.0.0.1/token", private.clone()),
            (&allowed, "https://192.168.0.1/token", private),
            // Allowing private networks opens nothing else.
            (
                &everything,
                "https://127.0.0.1/token",
                Some(Why::Place(Place::Loopback)),
            ),
            (
                &everything,
                "https://169.254.169.254/",
                Some(Why::Place(Place::Metadata)),
            ),
            (
                &everything,
                "https://[fe80::1]/",
                Some(Why::Place(Place::LinkLocal)),
            ),
            (&everything, "https://10.1.1.1/", None),
        ] {
            let target = url(target);
            assert_eq!(
                origin.check_url(&target).err().map(|r| r.why),
                refused,
                "{origin:?} {target}"
            );
        }
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        for (origin, name, address, refused) in [
            (&default, "auth.example", "10.1.2.3", true),
            (&default, "auth.example", "192.168.7.7", true),
            (&default, "auth.example", "fd12::1", true),
            (&default, "registry.example", "10.1.2.3", false),
            (&allowed, "harbor-core.harbor.svc", "10.96.4.4", false),
            (&allowed, "harbor-core.harbor.svc", "10.200.4.4", true),
            (&everything, "sneaky.example", "127.0.0.1", true),
        ] {
            let result = origin.check_resolved(name, &[ip("192.0.2.1"), ip(address)]);
            assert_eq!(
                result.is_err(),
                refused,
                "{origin:?} {name} {address}: {result:?}"
            );
        }
        let shown = Why::Place(Place::Private).to_string();
        assert!(shown.contains("--registry-allowed-network"), "{shown}");
    }

    #[test]
    fn credentials_go_to_the_registry_host_or_a_trusted_realm() {
        let default = Origin::new("registry.example", false, &none());
        let hub = Origin::new("docker.io", false, &reach(&[], &["auth.docker.io"]));
        let ported = Origin::new("127.0.0.1", true, &reach(&[], &["127.0.0.2:9000", "[::1]:9001"]));
        let v6 = Origin::new("registry.example", false, &reach(&[], &["fd00::7"]));
        for (origin, realm, sent) in [
            (&default, "https://registry.example/token", true),
            (&default, "https://REGISTRY.example.:8443/token", true),
            (&default, "https://auth.example/token", false),
            (&default, "https://registry.example.evil/token", false),
            (&default, "https://10.0.0.1/token", false),
            (&hub, "https://auth.docker.io/token", true),
            (&hub, "https://auth.docker.io:444/token", true),
            (&hub, "https://docker.io/token", true),
            (&hub, "https://auth.docker.io.evil/token", false),
            (&ported, "http://127.0.0.1:1234/token", true),
            (&ported, "http://127.0.0.2:9000/token", true),
            (&ported, "http://127.0.0.2:9001/token", false),
            (&ported, "http://[::1]:9001/token", true),
            (&ported, "http://[::1]:9002/token", false),
            (&v6, "https://[fd00::7]/token", true),
        ] {
            assert_eq!(
                origin.may_send_credentials(&url(realm)),
                sent,
                "{origin:?} {realm}"
            );
        }
    }

    #[test]
    fn places_of_addresses_and_names() {
        use Place::*;
        for (host, place) in [
            ("127.0.0.1", Loopback),
            ("127.8.9.10", Loopback),
            ("::1", Loopback),
            ("[::1]", Loopback),
            ("0.0.0.0", Loopback),
            ("::", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("64:ff9b::7f00:1", Loopback),
            ("localhost", Loopback),
            ("LOCALHOST.", Loopback),
            ("registry.localhost", Loopback),
            ("169.254.1.2", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("::ffff:169.254.1.2", LinkLocal),
            ("169.254.169.254", Metadata),
            ("::ffff:169.254.169.254", Metadata),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("169.254.170.2", Metadata),
            ("100.100.100.200", Metadata),
            ("fd00:ec2::254", Metadata),
            ("metadata.google.internal", Metadata),
            ("Metadata.Google.Internal.", Metadata),
            ("metadata", Metadata),
            ("instance-data", Metadata),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.1", Private),
            ("172.31.255.254", Private),
            ("172.32.0.1", Elsewhere),
            ("172.15.255.255", Elsewhere),
            ("192.168.1.1", Private),
            ("192.169.0.1", Elsewhere),
            ("100.64.0.1", Private),
            ("100.127.255.255", Private),
            ("100.128.0.1", Elsewhere),
            ("::ffff:10.1.2.3", Private),
            ("64:ff9b::c0a8:101", Private),
            ("fd00::2", Private),
            ("fc00::1", Private),
            ("fec0::1", Private),
            ("fe00::1", Elsewhere),
            ("192.0.2.2", Elsewhere),
            ("registry.example", Elsewhere),
            ("localhost.example", Elsewhere),
            ("metadata.example", Elsewhere),
        ] {
            assert_eq!(place_of_host(host), place, "{host}");
        }
    }

    fn url(text: &str) -> Url {
        text.parse().unwrap()
    }

    #[test]
    fn what_a_registry_may_name() {
        let https = Origin::new("registry.example", false, &none());
        let loopback = Origin::new("127.0.0.1", true, &none());
        let loopback_tls = Origin::new("127.0.0.1", false, &none());
        let insecure = Origin::new("10.1.2.3", true, &none());
        let link_local = Origin::new("169.254.10.10", true, &none());
        for (origin, target, refused) in [
            (&https, "https://auth.example/token", None),
            (&https, "https://registry.example:8443/token", None),
            (&https, "https://10.0.0.5/token", Some(Why::Place(Place::Private))),
            (&https, "http://auth.example/token", Some(Why::PlainHttp)),
            (&https, "http://registry.example/token", Some(Why::PlainHttp)),
            (
                &https,
                "ftp://auth.example/token",
                Some(Why::Scheme("ftp".into())),
            ),
            (
                &https,
                "https://127.0.0.1:9000/token",
                Some(Why::Place(Place::Loopback)),
            ),
            // WHATWG URLs read these as 127.0.0.1 too.
            (
                &https,
                "https://2130706433/token",
                Some(Why::Place(Place::Loopback)),
            ),
            (&https, "https://0x7f.1/token", Some(Why::Place(Place::Loopback))),
            (
                &https,
                "https://localhost/token",
                Some(Why::Place(Place::Loopback)),
            ),
            (&https, "https://[::1]/token", Some(Why::Place(Place::Loopback))),
            (
                &https,
                "https://[::ffff:7f00:1]/token",
                Some(Why::Place(Place::Loopback)),
            ),
            (&https, "https://0.0.0.0/token", Some(Why::Place(Place::Loopback))),
            (
                &https,
                "https://169.254.169.254/latest",
                Some(Why::Place(Place::Metadata)),
            ),
            (
                &https,
                "https://metadata.google.internal./x",
                Some(Why::Place(Place::Metadata)),
            ),
            (
                &https,
                "https://169.254.3.4/x",
                Some(Why::Place(Place::LinkLocal)),
            ),
            (&https, "https://[fe80::1]/x", Some(Why::Place(Place::LinkLocal))),
            // The test registry on loopback may use a realm on loopback, plain HTTP included.
            (&loopback, "http://127.0.0.1:9000/token", None),
            (&loopback, "http://localhost:9000/token", None),
            (&loopback, "https://auth.example/token", None),
            (
                &loopback,
                "http://169.254.169.254/",
                Some(Why::Place(Place::Metadata)),
            ),
            (
                &loopback,
                "http://169.254.1.1/",
                Some(Why::Place(Place::LinkLocal)),
            ),
            // Given a CA, the same registry is HTTPS, and so must its realm be.
            (&loopback_tls, "http://127.0.0.1:9000/token", Some(Why::PlainHttp)),
            (&loopback_tls, "https://127.0.0.1:9000/token", None),
            (&insecure, "http://10.1.2.3:5001/token", None),
            (
                &insecure,
                "http://127.0.0.1:9000/token",
                Some(Why::Place(Place::Loopback)),
            ),
            (&link_local, "http://169.254.10.11/token", None),
            (
                &link_local,
                "http://169.254.169.254/",
                Some(Why::Place(Place::Metadata)),
            ),
        ] {
            let target = url(target);
            assert_eq!(
                origin.check_url(&target).err().map(|r| r.why),
                refused,
                "{origin:?} {target}"
            );
        }
    }

    #[test]
    fn names_are_checked_on_what_they_resolve_to() {
        let https = Origin::new("registry.example", false, &none());
        let loopback = Origin::new("localhost", true, &none());
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "192.0.2.10".parse().unwrap();
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        assert_eq!(https.check_resolved("auth.example", &[public]), Ok(()));
        let refused = https
            .check_resolved("auth.example", &[public, local])
            .unwrap_err();
        assert_eq!(refused.why, Why::Resolved(local, Place::Loopback));
        assert_eq!(refused.target, "auth.example");
        assert_eq!(
            https
                .check_resolved("sneaky.example", &[metadata])
                .unwrap_err()
                .why,
            Why::Resolved(metadata, Place::Metadata)
        );
        // The registry's own name goes wherever it resolves: the rule named it, and the
        // installation's allowed registries decide which names rules may use.
        assert_eq!(https.check_resolved("Registry.Example.", &[local]), Ok(()));
        assert_eq!(loopback.check_resolved("auth.localtest", &[local]), Ok(()));
        assert!(loopback.check_resolved("auth.localtest", &[metadata]).is_err());
    }

    #[test]
    fn redirects_are_few_and_go_where_realms_may() {
        let https = Origin::new("registry.example", false, &none());
        let start = url("https://registry.example/v2/p/blobs/sha256:aa");
        let storage = url("https://storage.example/blob?sig=x");
        let chain = |n: usize| vec![start.clone(); n];
        assert_eq!(https.check_redirect(&storage, &chain(1)), Ok(()));
        assert_eq!(https.check_redirect(&storage, &chain(MAX_REDIRECTS)), Ok(()));
        assert_eq!(
            https
                .check_redirect(&storage, &chain(MAX_REDIRECTS + 1))
                .unwrap_err()
                .why,
            Why::TooManyRedirects
        );
        let metadata = url("http://169.254.169.254/latest/meta-data/");
        assert_eq!(
            https.check_redirect(&metadata, &chain(1)).unwrap_err().why,
            Why::PlainHttp
        );
        let metadata = url("https://169.254.169.254/latest/meta-data/");
        assert_eq!(
            https.check_redirect(&metadata, &chain(1)).unwrap_err().why,
            Why::Place(Place::Metadata)
        );
    }

    #[test]
    fn urls_are_shown_without_what_the_registry_could_hide_in_them() {
        let shown = shown_url(&url("https://user:pw@auth.example:8443/token?secret=1#f"));
        assert_eq!(shown, "https://auth.example:8443/token");
        let long = shown_url(&url(&format!("https://auth.example/{}", "a".repeat(500))));
        assert!(long.chars().count() <= 121 && long.ends_with('…'), "{long}");
    }

    #[test]
    fn refusals_are_found_among_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapper")]
        struct Wrapper(#[source] Box<dyn std::error::Error + Send + Sync>);
        let refusal = Refusal {
            target: "x".into(),
            why: Why::TooManyRedirects,
        };
        let wrapped = Wrapper(Box::new(Wrapper(Box::new(refusal.clone()))));
        assert_eq!(find_refusal(&wrapped), Some(&refusal));
        assert_eq!(
            find_refusal(&Wrapper(Box::new(std::io::Error::other("no")))),
            None
        );
    }
}
