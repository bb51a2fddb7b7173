//! Certificate authorities trusted for HTTPS registries beside the system's roots: registries
//! inside companies often serve certificates from a private CA, which no system trust store holds.
//!
//! A CA is trusted either for every registry or for one `host[:port]`, as Docker's
//! `certs.d/<host:port>/ca.crt` and containerd's per-host `ca` are. A registry given a CA of its
//! own is reached over HTTPS even on loopback: naming its CA says it serves TLS.

use super::reference::check_registry;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Why a CA given on the command line cannot be used. Start-up stops on it: a registry that would
/// then fail its TLS handshake on every fetch is worse than a clear error at once.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("registry CA {given:?}: {why}")]
    InvalidArgument { given: String, why: String },
    #[error("registry CA file {}: {why}", path.display())]
    InvalidFile { path: PathBuf, why: String },
    #[error(
        "registry {registry} is marked insecure (plain HTTP) and also given a CA (HTTPS): keep one of the two"
    )]
    InsecureWithCa { registry: String },
}

/// Which registries a CA file is trusted for, as written on the command line:
/// `[host[:port]=]FILE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaArgument {
    /// `None`: every registry.
    pub registry: Option<String>,
    pub path: PathBuf,
}

impl std::str::FromStr for CaArgument {
    type Err = TrustError;

    /// `FILE` or `host[:port]=FILE`. Text before the first `=` is a registry only when it holds
    /// no `/`, so `/etc/ca=1.pem` is a file; write `./ca=1.pem` for such a file given relatively.
    fn from_str(given: &str) -> Result<Self, TrustError> {
        let invalid = |why: String| TrustError::InvalidArgument {
            given: given.to_owned(),
            why,
        };
        let (registry, path) = match given.split_once('=') {
            Some((registry, path)) if !registry.contains('/') => {
                check_registry(registry).map_err(invalid)?;
                (Some(registry.to_ascii_lowercase()), path)
            }
            _ => (None, given),
        };
        if path.is_empty() {
            return Err(invalid(
                "the file is missing; write FILE or HOST[:PORT]=FILE".into(),
            ));
        }
        Ok(CaArgument {
            registry,
            path: PathBuf::from(path),
        })
    }
}

/// The CAs trusted beyond the system's roots, read and checked once at start-up.
#[derive(Clone, Debug, Default)]
pub struct RegistryTrust {
    /// DER certificates trusted for every registry.
    everywhere: Vec<Vec<u8>>,
    /// DER certificates trusted for one registry, keyed by lowercase `host[:port]`.
    by_registry: BTreeMap<String, Vec<Vec<u8>>>,
}

impl RegistryTrust {
    /// Reads each argument's file. Fails on a file that cannot be read or holds no certificate,
    /// and on a registry that is both given a CA and listed in `insecure` (plain HTTP).
    pub fn load(arguments: &[CaArgument], insecure: &[String]) -> Result<RegistryTrust, TrustError> {
        let mut trust = RegistryTrust::default();
        for argument in arguments {
            let pem = std::fs::read(&argument.path).map_err(|e| TrustError::InvalidFile {
                path: argument.path.clone(),
                why: e.to_string(),
            })?;
            let certificates = certificates_from_pem(&pem).map_err(|why| TrustError::InvalidFile {
                path: argument.path.clone(),
                why,
            })?;
            match &argument.registry {
                Some(registry) => {
                    if insecure.iter().any(|r| r.eq_ignore_ascii_case(registry)) {
                        return Err(TrustError::InsecureWithCa {
                            registry: registry.clone(),
                        });
                    }
                    trust
                        .by_registry
                        .entry(registry.clone())
                        .or_default()
                        .extend(certificates);
                }
                None => trust.everywhere.extend(certificates),
            }
        }
        Ok(trust)
    }

    /// Whether `registry` was given a CA of its own, and so is reached over HTTPS.
    pub fn has_own_ca(&self, registry: &str) -> bool {
        self.by_registry.contains_key(&registry.to_ascii_lowercase())
    }

    /// The DER certificates to trust, beside the system's roots, when talking to `registry`.
    pub fn certificates_for(&self, registry: &str) -> Vec<Vec<u8>> {
        let own = self
            .by_registry
            .get(&registry.to_ascii_lowercase())
            .into_iter()
            .flatten();
        self.everywhere.iter().chain(own).cloned().collect()
    }
}

/// Every certificate in a PEM file, each checked to be one a TLS client can trust as a root. Other
/// PEM sections (a private key put in the same file by mistake) are skipped, as TLS tools do.
fn certificates_from_pem(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut certificates = Vec::new();
    for (index, certificate) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let certificate =
            certificate.map_err(|e| format!("certificate {} is not valid PEM: {e}", index + 1))?;
        rustls::RootCertStore::empty()
            .add(certificate.clone())
            .map_err(|e| format!("certificate {} cannot be trusted as a CA: {e}", index + 1))?;
        certificates.push(certificate.as_ref().to_vec());
    }
    if certificates.is_empty() {
        return Err("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap()
            .pem()
    }

    #[test]
    fn arguments_name_a_file_and_maybe_a_registry() {
        for (given, registry, path) in [
            ("/etc/ca.pem", None, "/etc/ca.pem"),
            ("ca.pem", None, "ca.pem"),
            ("/etc/ca=1.pem", None, "/etc/ca=1.pem"),
            ("./ca=1.pem", None, "./ca=1.pem"),
            (
                "Harbor.Corp:8443=/etc/harbor.pem",
                Some("harbor.corp:8443"),
                "/etc/harbor.pem",
            ),
            ("127.0.0.1:5000=ca.pem", Some("127.0.0.1:5000"), "ca.pem"),
            ("[::1]:5000=ca.pem", Some("[::1]:5000"), "ca.pem"),
        ] {
            let argument: CaArgument = given.parse().unwrap();
            assert_eq!(argument.registry.as_deref(), registry, "{given}");
            assert_eq!(argument.path, PathBuf::from(path), "{given}");
        }
        for (given, why) in [
            ("", "the file is missing"),
            ("harbor.corp=", "the file is missing"),
            ("harbor corp=ca.pem", "not a registry host"),
            ("harbor.corp:http=ca.pem", "port"),
        ] {
            let error = given.parse::<CaArgument>().unwrap_err().to_string();
            assert!(error.contains(why), "{given}: {error}");
        }
    }

    #[test]
    fn a_bundle_gives_every_certificate_and_skips_keys() {
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let bundle = format!("{}{key}{}", ca_pem("one"), ca_pem("two"));
        assert_eq!(certificates_from_pem(bundle.as_bytes()).unwrap().len(), 2);
    }

    #[test]
    fn files_without_a_usable_certificate_are_refused() {
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let garbage = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        let truncated = ca_pem("cut");
        let truncated = &truncated[..truncated.len() - 30];
        for (pem, why) in [
            ("", "holds no PEM certificate"),
            (key.as_str(), "holds no PEM certificate"),
            (garbage, "certificate 1 cannot be trusted as a CA"),
            (truncated, "certificate 1 is not valid PEM"),
        ] {
            let error = certificates_from_pem(pem.as_bytes()).unwrap_err();
            assert!(error.contains(why), "{pem:?}: {error}");
        }
    }

    #[test]
    fn cas_apply_everywhere_or_to_their_registry() {
        let dir = tempfile::tempdir().unwrap();
        let everywhere = dir.path().join("corp.pem");
        let harbor = dir.path().join("harbor.pem");
        std::fs::write(&everywhere, ca_pem("corp")).unwrap();
        std::fs::write(&harbor, ca_pem("harbor")).unwrap();
        let arguments = [
            CaArgument {
                registry: None,
                path: everywhere,
            },
            format!("HARBOR.corp={}", harbor.display()).parse().unwrap(),
        ];
        let trust = RegistryTrust::load(&arguments, &["plain.corp:5000".into()]).unwrap();
        assert!(trust.has_own_ca("harbor.CORP"));
        assert!(!trust.has_own_ca("ghcr.io"));
        assert_eq!(trust.certificates_for("harbor.corp").len(), 2);
        assert_eq!(trust.certificates_for("ghcr.io").len(), 1);

        let contradiction = RegistryTrust::load(&arguments, &["Harbor.Corp".into()]).unwrap_err();
        assert!(
            contradiction
                .to_string()
                .contains("harbor.corp is marked insecure"),
            "{contradiction}"
        );
        let missing = RegistryTrust::load(
            &[CaArgument {
                registry: None,
                path: dir.path().join("absent.pem"),
            }],
            &[],
        )
        .unwrap_err();
        assert!(missing.to_string().contains("absent.pem"), "{missing}");
    }
}
