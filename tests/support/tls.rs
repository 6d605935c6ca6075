//! Throwaway TLS certificates for a test's or an example's `redis-server`, made at run time:
//! a CA, the server's certificate for 127.0.0.1 and a client's, both signed by it.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use paceline::RedisTls;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::redis_server::ServerTls;

/// The rights RedisStore's docs list for its ACL user, one by one.
pub const RIGHTS: [&str; 14] = [
    "+evalsha",
    "+script|load",
    "+time",
    "+get",
    "+set",
    "+del",
    "+hmget",
    "+hset",
    "+hdel",
    "+pexpire",
    "+zrange",
    "+zadd",
    "+zremrangebyscore",
    "+zcard",
];

/// A throwaway CA, and what it signed: the server's certificate for 127.0.0.1 and a client's.
pub struct Pki {
    dir: PathBuf,
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl Pki {
    pub fn new() -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "paceline-tls-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_pem, ca) = authority("paceline test CA");
        let leaf = |name: &str, purposes: &[ExtendedKeyUsagePurpose]| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = purposes.to_vec();
            let cert = params.signed_by(&key, &ca).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        // A cluster node shows its certificate to the other nodes too, as a client.
        let (server_cert, server_key) = leaf(
            "127.0.0.1",
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        let (client_cert_pem, client_key_pem) =
            leaf("paceline-worker", &[ExtendedKeyUsagePurpose::ClientAuth]);
        for (file, text) in [
            ("ca.pem", &ca_pem),
            ("server.pem", &server_cert),
            ("server-key.pem", &server_key),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        Self {
            dir,
            ca_pem,
            client_cert_pem,
            client_key_pem,
        }
    }

    /// The CA's certificate, as a PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn server(&self, auth_clients: bool, protocols: Option<&str>) -> ServerTls {
        ServerTls {
            cert: self.dir.join("server.pem"),
            key: self.dir.join("server-key.pem"),
            ca: self.dir.join("ca.pem"),
            auth_clients,
            protocols: protocols.map(str::to_owned),
        }
    }

    /// Trusts this CA alone.
    pub fn tls(&self) -> RedisTls {
        RedisTls::new().root_cert(self.ca_pem.clone()).unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed CA: its certificate's PEM, and an issuer to sign with.
pub fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}
