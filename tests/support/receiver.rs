//! A merchant's notification endpoint, as a real HTTP server on 127.0.0.1 started by the test.
//! Every delivery is verified with the official Standard Webhooks library (the `standardwebhooks`
//! crate, not the gateway's own signer) and recorded with its headers, body and arrival time.
//! The test tells it how to answer the next deliveries: 2xx, a status (500, 410...), a delay
//! (past the gateway's attempt timeout), a redirect, or hold the answer until told to let go.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use tokio::sync::Semaphore;

/// The Standard Webhooks secret of merchant 42's endpoint (the receivers' default).
pub const MERCHANT_WHSEC: &str = "whsec_bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA==";
/// The secret of merchant 44's endpoint.
pub const THIRD_WHSEC: &str = "whsec_dGhpcmQtbWVyY2hhbnQtbm90aWZpY2F0aW9ucy1rZXk=";

/// How the endpoint answers one delivery.
#[derive(Debug, Clone)]
pub enum Answer {
    Ok,
    Status(u16),
    /// Answers 200 after this long.
    Delay(Duration),
    /// 302 to the receiver's `/elsewhere` (which records what reaches it).
    Redirect,
    /// Holds the answer (200) until [`Receiver::let_go`].
    Hold,
}

/// One delivery the endpoint received.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub webhook_id: String,
    pub timestamp: String,
    pub body: String,
    pub json: serde_json::Value,
    /// The official library verified its signature (and timestamp).
    pub verified: bool,
    /// The status it was answered with; 0 for a held or delayed answer (the gateway may have
    /// given up on it, or died, before it came).
    pub answered: u16,
    pub at: Instant,
    /// The W3C `traceparent` it carried, if any.
    pub traceparent: Option<String>,
    /// Its `webhook-signature` header as sent (one `v1,..` per secret signing it).
    pub signature: String,
}

impl Delivery {
    pub fn kind(&self) -> &str {
        self.json["type"].as_str().unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    deliveries: Vec<Delivery>,
    script: VecDeque<Answer>,
    otherwise: Option<Answer>,
    /// Deliveries being answered right now.
    in_progress: usize,
}

struct Shared {
    state: Mutex<State>,
    gate: Semaphore,
    secret: String,
}

pub struct Receiver {
    /// The URL to configure as `notify_url`.
    pub url: String,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

impl Receiver {
    /// An endpoint that verifies with `secret` (a `whsec_` secret).
    pub async fn start(secret: &str) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            gate: Semaphore::new(0),
            secret: secret.to_owned(),
        });
        let data = web::Data::from(shared.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(receive))
        })
        .workers(2)
        .bind(("127.0.0.1", 0))
        .unwrap();
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Self {
            url: format!("http://127.0.0.1:{port}/hooks"),
            shared,
            handle,
        }
    }

    /// Its origin (`http://127.0.0.1:PORT`), as a merchant's `allow_hosts` names it.
    pub fn origin(&self) -> String {
        self.url.trim_end_matches("/hooks").to_owned()
    }

    /// The next deliveries are answered as `answers` say, in order; then as `otherwise` says.
    pub fn script(&self, answers: &[Answer]) {
        self.state().script.extend(answers.iter().cloned());
    }

    /// Every delivery after the script is answered so (default: 200).
    pub fn otherwise(&self, answer: Answer) {
        self.state().otherwise = Some(answer);
    }

    /// Lets every held answer go, and every later one.
    pub fn let_go(&self) {
        self.shared.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    /// Every delivery so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state().deliveries.clone()
    }

    /// The deliveries to the configured path (not the redirect target).
    pub fn hooks(&self) -> Vec<Delivery> {
        self.deliveries()
            .into_iter()
            .filter(|d| d.path == "/hooks")
            .collect()
    }

    /// Deliveries being answered right now (held or delayed).
    pub fn in_progress(&self) -> usize {
        self.state().in_progress
    }

    /// Polls until `n` deliveries have arrived at the configured path.
    pub async fn until_hooks(&self, n: usize) -> Vec<Delivery> {
        super::until(&format!("{n} notification deliveries"), async || {
            self.hooks().len() >= n
        })
        .await;
        self.hooks()
    }

    /// Polls until `n` distinct notifications were answered 2xx; returns the first 2xx
    /// delivery of each, in the order they were answered.
    pub async fn until_delivered(&self, n: usize) -> Vec<Delivery> {
        super::until(&format!("{n} notifications delivered"), async || {
            self.delivered().len() >= n
        })
        .await;
        self.delivered()
    }

    /// The first 2xx delivery of each notification, in order.
    pub fn delivered(&self) -> Vec<Delivery> {
        let mut seen = std::collections::HashSet::new();
        self.hooks()
            .into_iter()
            .filter(|d| (200..300).contains(&d.answered) && seen.insert(d.webhook_id.clone()))
            .collect()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }
}

async fn receive(
    request: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    // The official library's check, over an `http` header map of the same headers.
    let mut headers = http::HeaderMap::new();
    for (name, value) in request.headers() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_str().as_bytes()),
            http::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    let verified = standardwebhooks::Webhook::new(&shared.secret)
        .and_then(|webhook| webhook.verify(&body, &headers))
        .is_ok();
    let path = request.path().to_owned();
    let answer = {
        let mut state = shared.state.lock().unwrap();
        state.in_progress += 1;
        if path == "/hooks" {
            state
                .script
                .pop_front()
                .or_else(|| state.otherwise.clone())
                .unwrap_or(Answer::Ok)
        } else {
            Answer::Ok
        }
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let mut delivery = Delivery {
        path,
        webhook_id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        json: serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        body: text,
        verified,
        answered: 200,
        at: Instant::now(),
        traceparent: request
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        signature: header("webhook-signature"),
    };
    let response = match answer {
        Answer::Ok => HttpResponse::Ok().finish(),
        Answer::Status(status) => {
            delivery.answered = status;
            HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).finish()
        }
        Answer::Delay(wait) => {
            delivery.answered = 0;
            record(&shared, delivery);
            tokio::time::sleep(wait).await;
            shared.state.lock().unwrap().in_progress -= 1;
            return HttpResponse::Ok().finish();
        }
        Answer::Redirect => {
            delivery.answered = 302;
            HttpResponse::Found()
                .insert_header(("Location", "/elsewhere"))
                .finish()
        }
        Answer::Hold => {
            delivery.answered = 0;
            record(&shared, delivery);
            if let Ok(permit) = shared.gate.acquire().await {
                permit.forget();
            }
            shared.state.lock().unwrap().in_progress -= 1;
            return HttpResponse::Ok().finish();
        }
    };
    record(&shared, delivery);
    shared.state.lock().unwrap().in_progress -= 1;
    response
}

fn record(shared: &Shared, delivery: Delivery) {
    shared.state.lock().unwrap().deliveries.push(delivery);
}
