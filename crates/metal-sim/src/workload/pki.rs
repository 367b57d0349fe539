//! The certificates `kubeadm init` derives from the cluster's CAs: the kubeadm bootstrap provider
//! hands the machine the CA keys (as files), and the machine issues the API server's, etcd's and
//! the administrator's certificates itself.

use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, PKCS_RSA_SHA256, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::IpAddr;

/// Why a certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{file}: {reason}")]
    Read { file: String, reason: String },
    #[error("issuing {what}: {source}")]
    Issue {
        what: String,
        #[source]
        source: rcgen::Error,
    },
}

/// A CA read from the bootstrap files, able to sign.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// What an issued certificate is for.
pub struct Leaf<'a> {
    pub common_name: &'a str,
    pub organization: Option<&'a str>,
    pub dns: &'a [&'a str],
    pub ips: &'a [IpAddr],
    pub server: bool,
    pub client: bool,
}

impl Ca {
    /// Reads a CA certificate and its key (PKCS#1 as Cluster API writes it, or PKCS#8).
    pub fn load(name: &str, cert_pem: &[u8], key_pem: &[u8]) -> Result<Ca, PkiError> {
        let read = |reason: String| PkiError::Read {
            file: name.to_owned(),
            reason,
        };
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| read(e.to_string()))?;
        let pkcs8 = match key {
            PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
            PrivateKeyDer::Pkcs1(k) => rsa_pkcs1_to_pkcs8(k.secret_pkcs1_der()),
            _ => return Err(read("the key is neither RSA (PKCS#1) nor PKCS#8".into())),
        };
        let pkcs8 = PrivatePkcs8KeyDer::from(pkcs8);
        let key = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &PKCS_RSA_SHA256)
            .or_else(|_| KeyPair::try_from(&pkcs8))
            .map_err(|e| read(e.to_string()))?;
        let cert_pem = String::from_utf8_lossy(cert_pem).into_owned();
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| read(e.to_string()))?;
        Ok(Ca { cert_pem, issuer })
    }

    /// Issues a certificate for `leaf` with a fresh P-256 key.
    pub fn issue(&self, leaf: &Leaf<'_>) -> Result<Issued, PkiError> {
        let fail = |source| PkiError::Issue {
            what: leaf.common_name.to_owned(),
            source,
        };
        let dns: Vec<String> = leaf.dns.iter().map(|d| (*d).to_owned()).collect();
        let mut params = CertificateParams::new(dns).map_err(fail)?;
        params
            .subject_alt_names
            .extend(leaf.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name);
        if let Some(o) = leaf.organization {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        if leaf.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if leaf.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let key = KeyPair::generate().map_err(fail)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(fail)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Wraps an RSA private key (PKCS#1) into PKCS#8, the form ring signs with.
fn rsa_pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113_549, 1, 1, 1];
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(0);
            w.next().write_sequence(|w| {
                w.next()
                    .write_oid(&yasna::models::ObjectIdentifier::from_slice(RSA_ENCRYPTION));
                w.next().write_null();
            });
            w.next().write_bytes(pkcs1);
        })
    })
}

/// kubeadm's pin of a CA: `sha256:` and the hex SHA-256 of its SubjectPublicKeyInfo.
pub fn ca_cert_hash(cert_pem: &[u8]) -> Option<String> {
    let der = CertificateDer::from_pem_slice(cert_pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.public_key().raw);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
}
