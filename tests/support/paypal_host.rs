//! One PayPal certificate host for a whole test binary, as PayPal's own is for every delivery:
//! a CA of the tests' own (its PEM in a `ca_file`), a local HTTPS server on `localhost` serving
//! the signing certificate, and the signer with that certificate's key. It runs on a thread
//! and runtime of its own, so it outlives every test's runtime.

use std::path::PathBuf;
use std::sync::OnceLock;

use chrono::{DateTime, Utc};

use super::paypal::{CertServer, Route, SIGNING_KEY_PEM, Signer, TestCa, WEBHOOK_ID, rsa_key};

/// Where the signing certificate is served.
pub const CERT_PATH: &str = "/v1/notifications/certs/CERT-GATEWAY-TEST";

pub struct PaypalHost {
    pub port: u16,
    /// The test CA's PEM, for `ca_file`.
    pub ca_file: PathBuf,
    /// The test CA, to issue certificates for other servers (an off-allowlist host).
    pub ca_pem: String,
}

static HOST: OnceLock<PaypalHost> = OnceLock::new();

/// The certificate host, started on first use.
pub fn host() -> &'static PaypalHost {
    HOST.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let root = TestCa::root("Gateway Test Root CA");
                let server = CertServer::start(root.server_identity(&["localhost"])).await;
                let leaf = root.leaf(&rsa_key(SIGNING_KEY_PEM), &["localhost"], None);
                server.route(CERT_PATH, Route::Pem(leaf));
                let dir = std::env::temp_dir()
                    .join(format!("cg-paypal-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&dir).unwrap();
                let ca_file = dir.join("ca.pem");
                std::fs::write(&ca_file, root.pem()).unwrap();
                tx.send(PaypalHost {
                    port: server.port(),
                    ca_file,
                    ca_pem: root.pem(),
                })
                .unwrap();
                // Serves for as long as the test binary runs.
                std::future::pending::<()>().await;
            });
        });
        rx.recv().unwrap()
    })
}

impl PaypalHost {
    pub fn cert_url(&self) -> String {
        format!("https://localhost:{}{CERT_PATH}", self.port)
    }

    /// The `[[providers]]` entry of a PayPal provider named `name` for merchant `merchant_id`
    /// that trusts this host.
    pub fn provider_toml(&self, name: &str, merchant_id: i64) -> String {
        format!(
            "\n[[providers]]\nname = \"{name}\"\nscheme = \"paypal\"\nmerchant_id = {merchant_id}\n\
             webhook_id = \"{WEBHOOK_ID}\"\ncert_url_hosts = [\"localhost:{}\"]\nca_file = {:?}\n",
            self.port, self.ca_file
        )
    }
}

/// PayPal's five headers for `body`, sent at `at`, signed with the signing certificate's key
/// (`key_pem` to sign with another) and naming `cert_url`.
pub fn headers(
    key_pem: &str,
    cert_url: &str,
    body: &str,
    at: DateTime<Utc>,
) -> Vec<(String, String)> {
    Signer::new(key_pem).headers(WEBHOOK_ID, cert_url, body.as_bytes(), at)
}

/// Headers PayPal would send for `body` now.
pub fn signed_now(body: &str) -> Vec<(String, String)> {
    headers(SIGNING_KEY_PEM, &host().cert_url(), body, Utc::now())
}
