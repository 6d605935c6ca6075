//! What the store's TLS connections to Redis trust, and the certificate they show.

use std::fmt;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::StoreError;

/// What [`RedisStore::open_tls`](crate::RedisStore::open_tls) trusts and shows: the roots that
/// sign Redis's certificate, and a certificate of the client's own if Redis asks for one.
///
/// [`new`](Self::new) trusts the system's root certificates (Mozilla's, built into the
/// program, with the `redis-tls-webpki-roots` feature), as a plain `rediss://` URL given to
/// [`RedisStore::open`](crate::RedisStore::open) does; [`root_cert`](Self::root_cert) trusts
/// a private CA instead. The PEM texts are checked here, so that a wrong file fails when the
/// store is made rather than at its first connection.
///
/// # Examples
///
/// ```no_run
/// use paceline::{RedisStore, RedisTls};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let tls = RedisTls::new()
///     .root_cert(std::fs::read("/etc/paceline/redis-ca.pem")?)?
///     .client_cert(
///         std::fs::read("/etc/paceline/client.pem")?,
///         std::fs::read("/etc/paceline/client-key.pem")?,
///     )?;
/// let store = RedisStore::open_tls("rediss://redis.internal:6380", "ads-api:token-1", &tls)?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct RedisTls {
    root_cert: Option<Vec<u8>>,
    client: Option<ClientTlsConfig>,
}

impl RedisTls {
    /// Trusts the system's root certificates (or Mozilla's, with the `redis-tls-webpki-roots`
    /// feature), and shows no certificate of the client's own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts only the certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks: a private
    /// CA, or the Redis server's own self-signed certificate) as roots, instead of the system's.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidCertificate`] if `pem` holds no certificate, or one that does not
    /// parse.
    pub fn root_cert(mut self, pem: impl Into<Vec<u8>>) -> Result<Self, StoreError> {
        let pem = pem.into();
        let count = certificates(&pem, "root certificate")?;
        if count == 0 {
            return Err(invalid("the root certificate's PEM holds no certificate"));
        }
        self.root_cert = Some(pem);
        Ok(self)
    }

    /// Shows `cert_pem` (the client's certificate, then any intermediates) with its private key
    /// `key_pem` (PKCS#8, PKCS#1 or SEC1) when Redis asks for a client certificate
    /// (`tls-auth-clients yes`).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidCertificate`] if `cert_pem` holds no certificate, or `key_pem` no
    /// private key.
    pub fn client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Result<Self, StoreError> {
        let (cert_pem, key_pem) = (cert_pem.into(), key_pem.into());
        if certificates(&cert_pem, "client certificate")? == 0 {
            return Err(invalid("the client certificate's PEM holds no certificate"));
        }
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
            StoreError::InvalidCertificate {
                reason: format!("the client's private key: {error}"),
            }
        })?;
        self.client = Some(ClientTlsConfig {
            client_cert: cert_pem,
            client_key: key_pem,
        });
        Ok(self)
    }

    /// What the `redis` crate takes, or `None` to let it trust what a plain `rediss://` URL
    /// trusts.
    pub(super) fn certificates(&self) -> Option<TlsCertificates> {
        if self.root_cert.is_none() && self.client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self.client.clone(),
            root_cert: self.root_cert.clone(),
        })
    }
}

/// How many certificates `pem` holds.
fn certificates(pem: &[u8], what: &str) -> Result<usize, StoreError> {
    CertificateDer::pem_slice_iter(pem)
        .try_fold(0, |count, certificate| certificate.map(|_| count + 1))
        .map_err(|error| StoreError::InvalidCertificate {
            reason: format!("the {what}'s PEM: {error}"),
        })
}

fn invalid(reason: &str) -> StoreError {
    StoreError::InvalidCertificate {
        reason: reason.to_owned(),
    }
}

/// Makes ring the process's rustls crypto provider unless the program chose one: rustls picks
/// one by itself only when a single provider is built in, and another crate of the program may
/// have built in aws-lc-rs beside this crate's ring. Called at the first connection rather
/// than when the store is made, so that a program that installs its own provider at start-up,
/// before it connects, keeps it.
pub(super) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one meanwhile: that one stays, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl fmt::Debug for RedisTls {
    /// The PEM texts stay out of logs: only what is set shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("root_cert", &self.root_cert.is_some())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crypto_provider_is_installed_unless_one_was() {
        // Nothing in these unit tests makes a TLS connection, which would install one.
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        ensure_crypto_provider();
        let installed = rustls::crypto::CryptoProvider::get_default().expect("installed");
        ensure_crypto_provider();
        let kept = rustls::crypto::CryptoProvider::get_default().expect("kept");
        assert!(std::sync::Arc::ptr_eq(installed, kept));
    }
}
