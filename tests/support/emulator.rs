//! A provider's API as the fetch-verified providers' tests need it: a local HTTPS server (a CA
//! of the test's own, its PEM in a `ca_file`, as the PayPal host) that answers `GET` of the
//! resources the test put there (Mollie's `/v2/payments/{id}`, GoCardless's `/payments/{id}`
//! and `/refunds/{id}`, Mercado Pago's `/v1/payments/{id}`), 404 for any other path, and counts
//! every request by path. The test can script the next answers (a status such as 503 or 401),
//! or hold the next request until it lets go, and learn when a held request has arrived.
//!
//! PayPal's REST API asks for a token first: `POST /v1/oauth2/token` with HTTP Basic
//! `{PAYPAL_CLIENT_ID}:{API_KEY}` answers the current token, which the resources accept as
//! `Bearer` beside the API key; [`Emulator::revoke_tokens`] makes the next token another.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use super::paypal::TestCa;
use super::{
    BRAINTREE, BRAINTREE_PRIVATE, BRAINTREE_PUBLIC, GOCARDLESS, GOCARDLESS_SECRET, MERCADOPAGO,
    MERCADOPAGO_SECRET, MOLLIE,
};

/// The API key every test provider is configured with; other keys get 401.
pub const API_KEY: &str = "test_emulated_api_key";
/// The REST app's client id PayPal's emulated token endpoint accepts (its secret: API_KEY).
pub const PAYPAL_CLIENT_ID: &str = "AeTestPayPalRestAppClientId";

/// How the next request is answered instead of the resource.
#[derive(Debug, Clone)]
pub enum Scripted {
    Status(u16),
    /// Held until [`Emulator::let_go`], then answered normally.
    Hold,
}

#[derive(Default)]
struct State {
    resources: HashMap<String, String>,
    script: VecDeque<Scripted>,
    requests: HashMap<String, usize>,
    bad_keys: usize,
    /// Tokens given so far; the current one is `token-{tokens}`.
    tokens: usize,
    /// Scripted statuses answered so far.
    scripted_given: usize,
}

impl State {
    fn token(&self) -> String {
        format!("A21AAtest-token-{}", self.tokens)
    }
}

pub struct Emulator {
    pub port: u16,
    /// The CA's PEM, for the provider's `ca_file`.
    pub ca_file: PathBuf,
    state: Arc<Mutex<State>>,
    gate: watch::Sender<bool>,
    held: Arc<Notify>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

impl Emulator {
    pub async fn start() -> Self {
        let ca = TestCa::root("Emulated Provider API Test CA");
        let identity = ca.server_identity(&["localhost"]);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(identity.0, identity.1)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let ca_file =
            std::env::temp_dir().join(format!("cg-emulator-{}.pem", uuid::Uuid::new_v4().simple()));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let (gate, _) = watch::channel(false);
        let held = Arc::new(Notify::new());
        let server = tokio::spawn({
            let (state, gate, held) = (state.clone(), gate.clone(), held.clone());
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, state, gate, held) = (
                        acceptor.clone(),
                        state.clone(),
                        gate.subscribe(),
                        held.clone(),
                    );
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            serve(tls, &state, gate, &held).await;
                        }
                    });
                }
            }
        });
        Self {
            port,
            ca_file,
            state,
            gate,
            held,
            server,
        }
    }

    pub fn base_url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// Serves `body` (JSON) at `path` from now on.
    pub fn put(&self, path: &str, body: &str) {
        self.state
            .lock()
            .unwrap()
            .resources
            .insert(path.to_owned(), body.to_owned());
    }

    /// The next requests (of any path) are answered as scripted, in order.
    pub fn script(&self, answers: &[Scripted]) {
        self.state
            .lock()
            .unwrap()
            .script
            .extend(answers.iter().cloned());
    }

    /// Requests received for `path` so far.
    pub fn requests(&self, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .requests
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests received so far, any path.
    pub fn all_requests(&self) -> usize {
        self.state.lock().unwrap().requests.values().sum()
    }

    /// From now on, tokens given before are refused (401) and the next token is another.
    pub fn revoke_tokens(&self) {
        self.state.lock().unwrap().tokens += 1;
    }

    /// Requests that did not carry `Bearer {API_KEY}` (or the current token).
    pub fn bad_keys(&self) -> usize {
        self.state.lock().unwrap().bad_keys
    }

    /// Returns once a held request has arrived.
    pub async fn until_held(&self) {
        self.held.notified().await;
    }

    /// Answers every held request.
    pub fn let_go(&self) {
        self.gate.send_replace(true);
    }

    /// The `[[providers]]` entry of `name` (scheme `scheme`, merchant 42) asking this API;
    /// `extra` lines are added (secrets, public_key).
    pub fn provider_toml(&self, name: &str, scheme: &str, extra: &str) -> String {
        format!(
            "\n[[providers]]\nname = \"{name}\"\nscheme = \"{scheme}\"\nmerchant_id = 42\n\
             api_base_url = \"{}\"\napi_key = \"{API_KEY}\"\nca_file = {:?}\n{extra}\n",
            self.base_url(),
            self.ca_file
        )
    }

    /// The `[[providers]]` entries of issue 41's four providers (merchant 42): Mollie,
    /// GoCardless and Mercado Pago asking this API, and Braintree.
    pub fn asked_providers_toml(&self) -> String {
        format!(
            "{mollie}{gocardless}{mercadopago}\n[[providers]]\nname = \"{BRAINTREE}\"\n\
             scheme = \"braintree\"\nmerchant_id = 42\npublic_key = \"{BRAINTREE_PUBLIC}\"\n\
             secrets = [\"{BRAINTREE_PRIVATE}\"]\n",
            mollie = self.provider_toml(MOLLIE, "mollie", ""),
            gocardless = self.provider_toml(
                GOCARDLESS,
                "gocardless",
                &format!("secrets = [\"{GOCARDLESS_SECRET}\"]")
            ),
            mercadopago = self.provider_toml(
                MERCADOPAGO,
                "mercadopago",
                &format!("secrets = [\"{MERCADOPAGO_SECRET}\"]")
            ),
        )
    }

    /// Scripted answers not yet given.
    pub fn scripted_left(&self) -> usize {
        self.state.lock().unwrap().script.len()
    }

    /// Scripted statuses answered so far.
    pub fn scripted_given(&self) -> usize {
        self.state.lock().unwrap().scripted_given
    }
}

async fn serve<S>(
    mut stream: S,
    state: &Mutex<State>,
    mut gate: watch::Receiver<bool>,
    held: &Notify,
) where
    S: AsyncReadExt + AsyncWriteExt + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16384 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let split = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |at| at + 4);
    let mut body = head.split_off(split);
    let head = String::from_utf8_lossy(&head).into_owned();
    // The rest of a request body (the token request's form), read before answering: closing
    // with unread bytes would reset the connection under the answer.
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(65536);
    while body.len() < length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or("")
        // Resources are kept and counted by path; a query (Mollie's embed=chargebacks) only
        // asks for more of the same resource.
        .split('?')
        .next()
        .unwrap_or("")
        .to_owned();
    let token_request = path == "/v1/oauth2/token";
    let basic = format!(
        "authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{PAYPAL_CLIENT_ID}:{API_KEY}"))
    );
    let current_token = state.lock().unwrap().token();
    let authorized = head.lines().any(|line| {
        if token_request {
            line.eq_ignore_ascii_case(&basic)
                && String::from_utf8_lossy(&body) == "grant_type=client_credentials"
        } else {
            line.eq_ignore_ascii_case(&format!("authorization: Bearer {API_KEY}"))
                || line.eq_ignore_ascii_case(&format!("authorization: Bearer {current_token}"))
        }
    });
    let scripted = {
        let mut state = state.lock().unwrap();
        *state.requests.entry(path.clone()).or_default() += 1;
        if !authorized {
            state.bad_keys += 1;
        }
        let next = state.script.pop_front();
        if matches!(next, Some(Scripted::Status(_))) {
            state.scripted_given += 1;
        }
        next
    };
    let status = match scripted {
        Some(Scripted::Status(status)) => Some(status),
        Some(Scripted::Hold) => {
            held.notify_one();
            if gate.wait_for(|open| *open).await.is_err() {
                return;
            }
            None
        }
        None => None,
    };
    let (status, body) = match status {
        Some(status) => (status, String::new()),
        None if !authorized => (401, r#"{"error":"unauthorized"}"#.to_owned()),
        None if token_request => (
            200,
            format!(
                r#"{{"scope":"https://uri.paypal.com/services/payments/payment","access_token":"{current_token}","token_type":"Bearer","app_id":"APP-TEST","expires_in":32400,"nonce":"test"}}"#
            ),
        ),
        None => match state.lock().unwrap().resources.get(&path) {
            Some(body) => (200, body.clone()),
            None => (404, r#"{"error":"not found"}"#.to_owned()),
        },
    };
    let out = format!(
        "HTTP/1.1 {status} Emulated\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(out.as_bytes()).await;
    let _ = stream.shutdown().await;
}
