//! TLS for the harness: a CA and two certificates it signs, made with the `openssl` command
//! line once per test process, the arguments that put a server or a Sentinel on TLS alone
//! (`port 0`, `tls-port`), and the `redis` clients that reach it, as Redis's own guide
//! describes (<https://redis.io/docs/latest/operate/oss_and_stack/management/security/encryption/>).
//!
//! Every server and Sentinel uses the same certificate both ways (`tls-cert-file`: Redis
//! presents it to clients, and to its master or the servers a Sentinel watches, unless
//! `tls-client-cert-file` is set), and trusts the CA; the tests' clients present it too
//! (`tls-auth-clients yes`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{LazyLock, OnceLock};

use redis::{ClientTlsConfig, TlsCertificates};

use super::{Ready, Server};

/// The files the CA made, in a directory of their own under Cargo's `target/tmp`.
pub struct Certificates {
    /// The CA's certificate (`tls-ca-cert-file`).
    pub ca: PathBuf,
    /// The certificate servers, Sentinels and clients present: `CN=localhost`,
    /// `subjectAltName` `IP:127.0.0.1` and `DNS:localhost`, for server and client
    /// authentication.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// A certificate of its own key, signed by the same CA, for `CN=some-other-name` with no
    /// `subjectAltName`: valid for no address a server is reached on, which only a peer that
    /// checks names refuses (Redis does not, on its replication links).
    pub nameless_cert: PathBuf,
    /// Its key.
    pub nameless_key: PathBuf,
}

/// The certificates, made on first use.
pub fn certificates() -> &'static Certificates {
    static MADE: LazyLock<Certificates> = LazyLock::new(Certificates::make);
    &MADE
}

impl Certificates {
    /// Makes the CA and the two certificates it signs, in a new directory kept until
    /// `cargo clean` (a static is never dropped, and the servers read the files until the end).
    fn make() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-tls-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("certificate dir")
            .keep();
        openssl(
            &dir,
            "req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 \
             -days 3650 -subj /CN=leasehold-test-CA \
             -addext basicConstraints=critical,CA:TRUE \
             -addext keyUsage=critical,keyCertSign,cRLSign -keyout ca.key -out ca.crt",
        );
        // Each certificate: a key and a request for `subject`, signed by the CA with the
        // extensions of `<name>.ext`.
        let sign = |name: &str, serial: u32, subject: &str, san: Option<&str>| {
            let extensions = [
                Some("basicConstraints=CA:FALSE"),
                Some("keyUsage=critical,digitalSignature"),
                Some("extendedKeyUsage=serverAuth,clientAuth"),
                san,
            ];
            let extensions: Vec<&str> = extensions.into_iter().flatten().collect();
            let written = std::fs::write(
                dir.join(format!("{name}.ext")),
                extensions.join("\n") + "\n",
            );
            written.expect("extensions file");
            openssl(
                &dir,
                &format!(
                    "req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
                     -subj {subject} -keyout {name}.key -out {name}.csr"
                ),
            );
            openssl(
                &dir,
                &format!(
                    "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -set_serial {serial} \
                     -days 3650 -sha256 -extfile {name}.ext -out {name}.crt"
                ),
            );
            (
                dir.join(format!("{name}.crt")),
                dir.join(format!("{name}.key")),
            )
        };
        let (cert, key) = sign(
            "server",
            1,
            "/CN=localhost",
            Some("subjectAltName=IP:127.0.0.1,DNS:localhost"),
        );
        let (nameless_cert, nameless_key) = sign("nameless", 2, "/CN=some-other-name", None);
        Self {
            ca: dir.join("ca.crt"),
            cert,
            key,
            nameless_cert,
            nameless_key,
        }
    }

    /// The certificates a `redis` client presents and trusts.
    pub fn for_client(&self) -> TlsCertificates {
        let read = |path: &Path| std::fs::read(path).expect("certificate file");
        TlsCertificates {
            client_tls: Some(ClientTlsConfig {
                client_cert: read(&self.cert),
                client_key: read(&self.key),
            }),
            root_cert: Some(read(&self.ca)),
        }
    }
}

/// Runs `openssl` with the words of `command` (none with a space) in `dir`; panics with its
/// output if it fails.
fn openssl(dir: &Path, command: &str) {
    let output = Command::new("openssl")
        .args(command.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("the openssl command");
    assert!(
        output.status.success(),
        "openssl {command}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The arguments that make a server or a Sentinel listen on TLS alone, on `port`: no plain
/// port, the certificates, TLS to its master and the servers it watches (`tls-replication`),
/// and clients presenting a certificate the CA signed. Later arguments override them
/// (`["--tls-cert-file", nameless_cert, "--tls-key-file", nameless_key]`).
pub fn server_args(port: u16) -> Vec<String> {
    let certificates = certificates();
    let path = |path: &PathBuf| path.to_string_lossy().into_owned();
    [
        ("--port", "0".to_owned()),
        ("--tls-port", port.to_string()),
        ("--tls-cert-file", path(&certificates.cert)),
        ("--tls-key-file", path(&certificates.key)),
        ("--tls-ca-cert-file", path(&certificates.ca)),
        ("--tls-replication", "yes".to_owned()),
        ("--tls-auth-clients", "yes".to_owned()),
    ]
    .into_iter()
    .flat_map(|(name, value)| [name.to_owned(), value])
    .collect()
}

/// A client of the `rediss://` `url` that presents the certificate and trusts the CA. It does
/// not check the name the server's certificate is for, as Redis does not on its replication
/// links: a server may present [`Certificates::nameless_cert`].
pub fn client(url: &str) -> redis::RedisResult<redis::Client> {
    // Set after the certificates: `build_with_tls` replaces the address's TLS settings.
    let info = redis::Client::build_with_tls(url, certificates().for_client())?
        .get_connection_info()
        .clone();
    let mut addr = info.addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    redis::Client::open(info.set_addr(addr))
}

/// Whether the server binary (`LEASEHOLD_SERVER`) serves TLS: Redis built without
/// `BUILD_TLS=yes` exits at start ("Failed finding TLS support"). Asked of a server started
/// without the module once per test process (one whose port another process took at once
/// counts as none).
pub fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let mut probe = Server::new(None, &[]);
        probe.tls = true;
        probe.child = Some(probe.spawn());
        matches!(probe.wait_ready(0), Ready::Yes)
    })
}
