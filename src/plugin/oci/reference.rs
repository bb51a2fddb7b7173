//! `oci://` plugin references: parsed strictly, so a typo fails when a rule is written rather than
//! as a confusing registry error later.

use super::error::OciError;
use std::fmt;
use std::str::FromStr;

/// `oci://host[:port]/repo/path:tag`, `...@sha256:<hex>`, or both (the digest wins).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OciReference {
    /// `host[:port]`, as written.
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 lowercase hex digits>`.
    pub digest: Option<String>,
}

const HOW: &str = "write oci://<host[:port]>/<repository>:<tag> or …@sha256:<digest>";

impl FromStr for OciReference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, OciError> {
        let invalid = |why: &str| OciError::InvalidReference(format!("{text}: {why}"));
        let rest = text.strip_prefix("oci://").unwrap_or(text);
        if rest.contains("://") {
            return Err(invalid("only oci:// references name a registry artifact"));
        }
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(invalid(HOW));
        };
        check_registry(registry).map_err(|why| invalid(&why))?;
        let (path, digest) = match path.split_once('@') {
            Some((path, digest)) => {
                if !is_digest(digest) {
                    return Err(invalid("a digest is sha256:<64 lowercase hex digits>"));
                }
                (path, Some(digest.to_owned()))
            }
            None => (path, None),
        };
        let (repository, tag) = match path.rfind(':') {
            Some(i) if !path[i..].contains('/') => (&path[..i], Some(&path[i + 1..])),
            _ => (path, None),
        };
        if !is_repository(repository) {
            return Err(invalid(
                "a repository is lowercase letters and digits in /-separated parts, joined inside a \
                 part by '.', '_', '__' or dashes",
            ));
        }
        if let Some(tag) = tag.filter(|t| !is_tag(t)) {
            return Err(invalid(&format!(
                "{tag:?} is not a tag: letters, digits, '_', '.' and '-', at most 128, not starting \
                 with '.' or '-'"
            )));
        }
        if tag.is_none() && digest.is_none() {
            return Err(invalid(
                "name a tag (:1.0) or a digest (@sha256:…); mimeo does not assume :latest",
            ));
        }
        Ok(OciReference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl OciReference {
    /// The same artifact, pinned to `digest` (the tag is kept, for people reading it).
    pub fn pinned(&self, digest: &str) -> OciReference {
        OciReference {
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }

    /// Whether it names one immutable manifest.
    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The host without the port, brackets removed from an IPv6 literal.
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }
}

/// Whether `host[:port]` is a loopback address, which may always be reached over plain HTTP:
/// nothing leaves the machine.
pub fn is_loopback(registry: &str) -> bool {
    let host = host_of(registry);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn host_of(registry: &str) -> &str {
    if registry.parse::<std::net::Ipv6Addr>().is_ok() {
        return registry;
    }
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => registry,
    }
}

pub(super) fn check_registry(registry: &str) -> Result<(), String> {
    if registry.is_empty() {
        return Err(format!("the registry host is missing; {HOW}"));
    }
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{registry} is not a registry host"))?;
        ip.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{registry} is not a registry host"))?;
        (
            None,
            after.strip_prefix(':').or(Some("")).filter(|p| !p.is_empty()),
        )
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("{registry}: the port is not a number from 1 to 65535"));
    }
    if let Some(host) = host {
        let well_formed = !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !well_formed {
            return Err(format!("{registry} is not a registry host"));
        }
        // `library/nginx:1` names Docker Hub implicitly elsewhere; here the registry is explicit.
        if !host.contains('.') && port.is_none() && !host.eq_ignore_ascii_case("localhost") {
            return Err(format!(
                "{host} does not look like a registry host (no dot, no port, not localhost); \
                 name the registry explicitly, e.g. oci://docker.io/{host}/…"
            ));
        }
    }
    Ok(())
}

/// `sha256:<64 lowercase hex digits>`, the only digest algorithm mimeo accepts.
pub(super) fn is_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The distribution spec's path components: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`, `/`-separated.
fn is_repository(repository: &str) -> bool {
    !repository.is_empty()
        && repository.len() <= 255
        && repository.split('/').all(|part| {
            let bytes = part.as_bytes();
            let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
                return false;
            }
            let mut run = Vec::new();
            for &b in bytes {
                if alnum(b) {
                    let ok = matches!(run.as_slice(), [] | [b'.'] | [b'_'] | [b'_', b'_'])
                        || run.iter().all(|&c| c == b'-');
                    if !ok {
                        return false;
                    }
                    run.clear();
                } else if matches!(b, b'.' | b'_' | b'-') {
                    run.push(b);
                } else {
                    return false;
                }
            }
            true
        })
}

fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(text: &str) -> Result<OciReference, String> {
        text.parse::<OciReference>().map_err(|e| e.to_string())
    }

    #[test]
    fn parses_tags_digests_and_both() {
        let r = parse("oci://ghcr.io/acme/plugins/filter-keys:1.2.0").unwrap();
        assert_eq!(
            r,
            OciReference {
                registry: "ghcr.io".into(),
                repository: "acme/plugins/filter-keys".into(),
                tag: Some("1.2.0".into()),
                digest: None
            }
        );
        assert!(!r.is_pinned());
        assert_eq!(r.to_string(), "oci://ghcr.io/acme/plugins/filter-keys:1.2.0");

        let r = parse(&format!("127.0.0.1:5000/p@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(D));
        assert!(r.is_pinned());
        assert_eq!(r.to_string(), format!("oci://127.0.0.1:5000/p@{D}"));

        let r = parse(&format!("oci://localhost/a_b/c__d/e--f.g:v1@{D}")).unwrap();
        assert_eq!(r.repository, "a_b/c__d/e--f.g");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.to_string(), format!("oci://localhost/a_b/c__d/e--f.g:v1@{D}"));

        let r = parse("oci://[::1]:5000/p:1").unwrap();
        assert_eq!(r.registry, "[::1]:5000");
        assert_eq!(r.host(), "::1");
    }

    #[test]
    fn pinning_keeps_the_tag() {
        let r = parse("oci://r.example/p:1").unwrap().pinned(D);
        assert!(r.is_pinned());
        assert_eq!(r.to_string(), format!("oci://r.example/p:1@{D}"));
        assert_eq!(parse(&r.to_string()).unwrap(), r, "Display round-trips");
    }

    #[test]
    fn refuses_with_reasons() {
        let cases = [
            ("oci://r.example/p", "mimeo does not assume :latest"),
            ("oci://r.example", "write oci://"),
            ("https://r.example/p:1", "only oci://"),
            ("oci://library/nginx:1", "does not look like a registry host"),
            ("oci://r.example/Upper:1", "lowercase"),
            ("oci://r.example/a//b:1", "lowercase"),
            ("oci://r.example/a..b:1", "lowercase"),
            ("oci://r.example/-a:1", "lowercase"),
            ("oci://r.example/p:.x", "is not a tag"),
            ("oci://r.example/p@sha256:abc", "64 lowercase hex"),
            ("oci://r.example/p@md5:0123", "64 lowercase hex"),
            ("oci://r.example:99999/p:1", "port"),
            ("oci:///p:1", "registry host is missing"),
            ("oci://bad_host.example/p:1", "is not a registry host"),
        ];
        for (text, why) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
            assert!(err.contains(text), "names the input: {err}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for r in [
            "127.0.0.1:5000",
            "127.3.2.1",
            "localhost:80",
            "LOCALHOST",
            "[::1]:5000",
            "::1",
        ] {
            assert!(is_loopback(r), "{r}");
        }
        for r in [
            "10.0.0.1:5000",
            "registry.example",
            "localhost.example:5000",
            "[::2]:5000",
        ] {
            assert!(!is_loopback(r), "{r}");
        }
    }
}
