//! The certificates and keys one control plane needs: a CA, the apiserver's serving certificate,
//! an admin client certificate in `system:masters`, and the service-account signing key; and the
//! smaller set a TLS registry needs ([`ServingPki`]): a CA and a serving certificate.

use crate::Error;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::CertificateDer;
use std::net::{IpAddr, Ipv4Addr};

/// PEM-encoded material, written to the control plane's data directory.
pub(crate) struct Pki {
    pub ca_cert: String,
    /// The CA's key, for tests that issue client certificates of their own (with openssl, for
    /// kinds rcgen does not make, such as X.509 v1).
    pub ca_key: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    pub service_account_key: String,
    pub service_account_pub: String,
}

impl Pki {
    pub(crate) fn generate() -> Result<Self, Error> {
        let ca = ca("mimeo-envtest-ca")?;
        let (serving_cert, serving_key) = serving(&ca, "kube-apiserver", &["localhost", "kubernetes"])?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::default();
        admin.distinguished_name = name("envtest-admin", Some("system:masters"));
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let service_account = KeyPair::generate()?;
        Ok(Pki {
            ca_cert: ca.pem(),
            ca_key: ca.key().serialize_pem(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
            admin_cert: admin_cert.pem(),
            admin_key: admin_key.serialize_pem(),
            service_account_key: service_account.serialize_pem(),
            service_account_pub: service_account.public_key_pem(),
        })
    }
}

/// A CA and one serving certificate it signed, for `127.0.0.1` and `localhost`: what a TLS server on
/// loopback needs, and what its clients must trust. The CA is fresh, so a client that trusts it
/// trusts this server and no other.
pub(crate) struct ServingPki {
    pub ca_cert: String,
    /// The CA certificate again, DER-encoded, for a rustls root store.
    pub ca_der: CertificateDer<'static>,
    pub serving_cert: String,
    pub serving_key: String,
}

impl ServingPki {
    /// `server` is the serving certificate's common name; clients check only its SANs.
    pub(crate) fn generate(server: &str) -> Result<Self, Error> {
        // A name of its own too: a client given another registry's CA then sees an unknown
        // issuer, as with any unrelated CA, rather than a bad signature from a namesake.
        let ca = ca(&format!("mimeo-envtest-ca-{}", crate::random_token()?))?;
        let (serving_cert, serving_key) = serving(&ca, server, &["localhost"])?;
        Ok(ServingPki {
            ca_cert: ca.pem(),
            ca_der: ca.der().clone(),
            serving_cert: serving_cert.pem(),
            serving_key: serving_key.serialize_pem(),
        })
    }
}

/// A fresh self-signed CA.
fn ca(common_name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(CertifiedIssuer::self_signed(params, KeyPair::generate()?)?)
}

/// A server certificate signed by `ca` for `dns_names` and the IP address `127.0.0.1`, which is
/// what clients on loopback connect to, and its key.
fn serving(
    ca: &CertifiedIssuer<'_, KeyPair>,
    common_name: &str,
    dns_names: &[&str],
) -> Result<(Certificate, KeyPair), Error> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(dns_names.iter().map(|name| name.to_string()).collect::<Vec<_>>())?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params.distinguished_name = name(common_name, None);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, ca)?;
    Ok((cert, key))
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}
