//! A payment provider's refund API, as a real HTTP server on 127.0.0.1 started by the test.
//! It implements idempotency keys the way Stripe documents them: the first request with a key
//! does the work and its answer is saved; the same key with the same parameters gets that
//! answer again (`Idempotent-Replayed: true`) without a second refund; the same key with other
//! parameters is a 400; a request while the first with its key is still running is a 409.
//! A 500 is answered before any work (nothing saved, as when Stripe fails before executing).
//! The test can tell it how to answer the next calls: normally, hold the answer until told to
//! let go (the refund is made first: the answer is what gets lost), fail with 500, decline with
//! a 4xx, or drop the connection without an answer. It can also script the calls of one payment
//! alone, so a gateway's background retries of other refunds cannot take a behaviour meant for
//! the request under test. It counts calls and refunds made.
//!
//! A bare HTTP/1.1 server on a tokio listener (one request per connection), so "drop the
//! connection" is a real closed socket.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

pub const PROVIDER_API_KEY: &str = "sk_test_refunds_api_key";

/// How the provider answers one call.
#[derive(Debug, Clone)]
pub enum Behavior {
    Normal,
    /// Makes the refund, then holds its answer until [`FakeProvider::let_go`].
    Hold,
    Fail500,
    /// A saved 4xx with a Stripe-shaped error message.
    Decline(u16, &'static str),
    /// Reads the request and closes the connection without an answer.
    Drop,
    /// 429 before any work, nothing saved (a provider rate-limiting the gateway). A key whose
    /// refund was already made still gets its saved answer, as Stripe replays before limiting.
    RateLimit,
    /// Makes the refund and answers it with this refund id (e.g. one holding a U+0000).
    AcceptAs(&'static str),
    /// Makes the refund and answers 200 with a chunked JSON body that never ends: it writes
    /// until the client hangs up (and counts what it wrote, [`FakeProvider::endless_bytes`]).
    Endless,
}

/// One request the provider received.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub idempotency_key: Option<String>,
    pub authorization: Option<String>,
    pub body: String,
    /// When it arrived, to check the spacing of retries.
    pub at: std::time::Instant,
    /// The W3C `traceparent` it carried, if any.
    pub traceparent: Option<String>,
}

impl Call {
    /// The payment the refund is for: `payment_id` of a canonical JSON body, `payment_intent`
    /// of a Stripe form.
    pub fn payment_id(&self) -> Option<String> {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&self.body) {
            return json["payment_id"].as_str().map(str::to_owned);
        }
        self.body
            .split('&')
            .find_map(|pair| pair.strip_prefix("payment_intent="))
            .map(str::to_owned)
    }
}

#[derive(Debug, Clone)]
enum Saved {
    Running {
        params: String,
    },
    Done {
        params: String,
        status: u16,
        body: String,
    },
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    script: VecDeque<Behavior>,
    /// Scripts of one payment's calls, used before the general script.
    payment_scripts: HashMap<String, VecDeque<Behavior>>,
    /// How calls answer once the script is used up.
    otherwise: Option<Behavior>,
    keys: HashMap<String, Saved>,
    refunds_created: usize,
    /// Bytes written by endless answers before their clients hung up.
    endless_bytes: usize,
    /// Endless answers whose client hung up.
    endless_ended: usize,
}

pub struct FakeProvider {
    pub base_url: String,
    state: Arc<Mutex<State>>,
    gate: Arc<Semaphore>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeProvider {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let gate = Arc::new(Semaphore::new(0));
        let server = tokio::spawn({
            let (state, gate) = (state.clone(), gate.clone());
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    tokio::spawn(serve(stream, state.clone(), gate.clone()));
                }
            }
        });
        Self {
            base_url,
            state,
            gate,
            server,
        }
    }

    /// The next calls answer as `behaviors` say, in order; then normally.
    pub fn script(&self, behaviors: &[Behavior]) {
        self.state
            .lock()
            .unwrap()
            .script
            .extend(behaviors.iter().cloned());
    }

    /// The next calls for `payment_id` answer as `behaviors` say, in order, whatever calls for
    /// other payments arrive meanwhile; then as any other call.
    pub fn script_for(&self, payment_id: &str, behaviors: &[Behavior]) {
        self.state
            .lock()
            .unwrap()
            .payment_scripts
            .entry(payment_id.to_owned())
            .or_default()
            .extend(behaviors.iter().cloned());
    }

    /// Every call after the script answers as `behavior` says (instead of normally).
    pub fn otherwise(&self, behavior: Behavior) {
        self.state.lock().unwrap().otherwise = Some(behavior);
    }

    /// Lets every held answer go, and every later one.
    pub fn let_go(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The calls for one payment, in the order they arrived.
    pub fn calls_for(&self, payment_id: &str) -> Vec<Call> {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|call| call.payment_id().as_deref() == Some(payment_id))
            .cloned()
            .collect()
    }

    pub fn refunds_created(&self) -> usize {
        self.state.lock().unwrap().refunds_created
    }

    /// Bytes endless answers wrote, and how many of them ended (their client hung up).
    pub fn endless(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        (state.endless_bytes, state.endless_ended)
    }

    /// Polls until the provider has received `n` calls.
    pub async fn until_calls(&self, n: usize) {
        super::until(&format!("{n} provider call(s)"), async || {
            self.calls().len() >= n
        })
        .await;
    }

    /// Polls until the provider has received `n` calls for `payment_id`.
    pub async fn until_calls_for(&self, payment_id: &str, n: usize) {
        super::until(
            &format!("{n} provider call(s) for {payment_id}"),
            async || self.calls_for(payment_id).len() >= n,
        )
        .await;
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>, gate: Arc<Semaphore>) {
    let Some((path, headers, body)) = read_request(&mut stream).await else {
        return;
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let call = Call {
        path,
        idempotency_key: header("idempotency-key"),
        authorization: header("authorization"),
        body,
        at: std::time::Instant::now(),
        traceparent: header("traceparent"),
    };
    let (behavior, decided) = {
        let mut state = state.lock().unwrap();
        state.calls.push(call.clone());
        let behavior = call
            .payment_id()
            .and_then(|payment| state.payment_scripts.get_mut(&payment)?.pop_front())
            .or_else(|| state.script.pop_front())
            .or_else(|| state.otherwise.clone())
            .unwrap_or(Behavior::Normal);
        let decided = decide(&mut state, &call, &behavior);
        (behavior, decided)
    };
    match decided {
        Decided::Answer(status, body, replayed) => {
            respond(&mut stream, status, &body, replayed).await
        }
        Decided::Drop => {}
        Decided::Work => {
            if matches!(behavior, Behavior::Hold)
                && let Ok(permit) = gate.acquire().await
            {
                permit.forget();
            }
            if matches!(behavior, Behavior::Endless) {
                state.lock().unwrap().refunds_created += 1;
                let written = endless(&mut stream).await;
                let mut state = state.lock().unwrap();
                state.endless_bytes += written;
                state.endless_ended += 1;
                return;
            }
            let (status, body) = {
                let mut state = state.lock().unwrap();
                state.refunds_created += 1;
                let id = match behavior {
                    Behavior::AcceptAs(id) => id.to_owned(),
                    _ => format!("re_{}", state.refunds_created),
                };
                let body = serde_json::json!({"id": id, "object": "refund", "status": "succeeded"})
                    .to_string();
                if let Some(key) = &call.idempotency_key {
                    state.keys.insert(
                        key.clone(),
                        Saved::Done {
                            params: call.body.clone(),
                            status: 200,
                            body: body.clone(),
                        },
                    );
                }
                (200, body)
            };
            respond(&mut stream, status, &body, false).await;
        }
    }
}

enum Decided {
    Answer(u16, String, bool),
    Drop,
    Work,
}

fn decide(state: &mut State, call: &Call, behavior: &Behavior) -> Decided {
    if call.authorization.as_deref() != Some(&format!("Bearer {PROVIDER_API_KEY}")) {
        return Decided::Answer(401, error("Invalid API Key provided"), false);
    }
    if let Behavior::Fail500 = behavior {
        return Decided::Answer(500, error("An unknown error occurred"), false);
    }
    if let Behavior::Drop = behavior {
        return Decided::Drop;
    }
    if let Some(key) = &call.idempotency_key {
        match state.keys.get(key) {
            Some(Saved::Running { params } | Saved::Done { params, .. })
                if *params != call.body =>
            {
                return Decided::Answer(
                    400,
                    error(
                        "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                    ),
                    false,
                );
            }
            Some(Saved::Running { .. }) => {
                return Decided::Answer(
                    409,
                    error(
                        "There is currently another in-progress request using this Idempotent Key.",
                    ),
                    false,
                );
            }
            Some(Saved::Done { status, body, .. }) => {
                return Decided::Answer(*status, body.clone(), true);
            }
            None => {}
        }
    }
    if let Behavior::RateLimit = behavior {
        return Decided::Answer(
            429,
            error("Too many requests hit the API too quickly."),
            false,
        );
    }
    if let Behavior::Decline(status, message) = behavior {
        let body = error(message);
        if let Some(key) = &call.idempotency_key {
            state.keys.insert(
                key.clone(),
                Saved::Done {
                    params: call.body.clone(),
                    status: *status,
                    body: body.clone(),
                },
            );
        }
        return Decided::Answer(*status, body, false);
    }
    if let Some(key) = &call.idempotency_key {
        state.keys.insert(
            key.clone(),
            Saved::Running {
                params: call.body.clone(),
            },
        );
    }
    Decided::Work
}

fn error(message: &str) -> String {
    serde_json::json!({"error": {"type": "invalid_request_error", "message": message}}).to_string()
}

async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<(String, String)>, String)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buffer[head_end..head_end + length]).to_string();
    Some((path, headers, body))
}

/// 200 with `{"id":"re_endless","padding":"xxxx...` in chunks, forever: until a write fails
/// because the client closed the connection. How many bytes it wrote.
async fn endless(stream: &mut TcpStream) -> usize {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return 0;
    }
    let mut written = 0;
    let start = r#"{"id":"re_endless","padding":""#;
    let padding = "x".repeat(8192);
    let mut piece = start;
    loop {
        let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            return written;
        }
        written += piece.len();
        piece = &padding;
    }
}

async fn respond(stream: &mut TcpStream, status: u16, body: &str, replayed: bool) {
    let replayed = if replayed {
        "Idempotent-Replayed: true\r\n"
    } else {
        ""
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{replayed}Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
