//! What every provider file implements and shares: its [`Connector`] (how it signs, names its
//! events and wants to be answered) and its [`Format`] (what its bodies mean), with the types
//! they exchange. A sibling of the provider files, so they import it and `mod.rs` imports them.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::payments::event::{PayloadError, Reading};
use crate::signature::scheme::{HeaderSource, SignatureError};

pub use crate::signature::scheme::{FetchedEvent, NamedItem, Naming, Rejection, Verified};

/// A signature check: done at once (every HMAC scheme, no allocation), or still running (a
/// certificate to fetch).
pub enum Verification<'a> {
    Done(Result<Verified, Rejection>),
    Pending(BoxFuture<'a, Result<Verified, Rejection>>),
}

impl Verification<'_> {
    pub async fn outcome(self) -> Result<Verified, Rejection> {
        match self {
            Verification::Done(outcome) => outcome,
            Verification::Pending(check) => check.await,
        }
    }
}

impl From<Result<Verified, SignatureError>> for Verification<'_> {
    fn from(outcome: Result<Verified, SignatureError>) -> Self {
        Verification::Done(outcome.map_err(Rejection::Refused))
    }
}

/// One event of a verified delivery: its id and its own body (the whole request body, for
/// Adyen one notification item of it, for a fetch-verified scheme what its API answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'b> {
    pub id: String,
    pub body: std::borrow::Cow<'b, [u8]>,
}

/// The events of a verified delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Events<'b> {
    One(Event<'b>),
    /// Several events in one request (Adyen), each its own idempotent event.
    Items(Vec<Event<'b>>),
}

/// How a provider expects its deliveries to be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The stored ack of the event, byte for byte.
    StoredAck,
    /// A fixed body once every event of the delivery is stored (Adyen's `[accepted]`); each
    /// event's own ack is in its idempotency record and the event log.
    Fixed {
        body: &'static str,
        content_type: &'static str,
    },
}

/// A delivery signed as its provider signs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    /// The body to send when signing changes it (Adyen's signatures travel inside the body);
    /// `None`: the body as given.
    pub body: Option<Vec<u8>>,
    /// The query string to post to (Mercado Pago signs the URL's `data.id`), without `?`.
    pub query: Option<String>,
    /// The body's media type: JSON, or a form (Mollie, Braintree).
    pub content_type: &'static str,
}

/// The media type of a JSON body.
pub const JSON: &str = "application/json";
/// The media type of a form body (Mollie's `id=`, Braintree's `bt_signature`, `bt_payload`).
pub const FORM: &str = "application/x-www-form-urlencoded";

impl Signed {
    pub fn headers(headers: Vec<(String, String)>) -> Self {
        Self {
            headers,
            body: None,
            query: None,
            content_type: JSON,
        }
    }

    /// The path and query to post `provider`'s delivery to.
    pub fn path(&self, provider: &str) -> String {
        match &self.query {
            Some(query) => format!("/v1/callbacks/{provider}?{query}"),
            None => format!("/v1/callbacks/{provider}"),
        }
    }

    /// The body to send: the signed one, or `original`.
    pub fn body_or<'b>(&'b self, original: &'b [u8]) -> &'b [u8] {
        self.body.as_deref().unwrap_or(original)
    }
}

/// Why the gateway cannot sign a delivery as its provider would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsignable(pub String);

/// How a provider signs, names its events and wants to be answered.
pub trait Connector: Send + Sync {
    /// Checks a delivery's headers over its raw body at `now`, before anything is parsed or
    /// written (for Adyen, whose signatures are in the items, the items are read to check them).
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a>;

    /// [`Self::verify`] with the request's query string (without `?`), for a scheme that signs
    /// a part of the URL (Mercado Pago's `data.id`); the others ignore it.
    fn verify_request<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        _query: &'a str,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.verify(headers, body, now)
    }

    /// The headers (and, where the signature is in the body, the body) that sign `body` with
    /// the first secret at `timestamp`, as the provider would: for `send-test-event` and
    /// finance replay.
    fn sign(&self, event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable>;

    /// Whether a delivery carries the provider's signature. One that does not (Mollie: an id,
    /// the truth fetched from its API) costs a call to the provider's API, so its deliveries
    /// are limited per source address (`[limits] unsigned_deliveries_per_minute`); a signed
    /// one never is.
    fn signed(&self) -> bool {
        true
    }

    fn answer(&self) -> Answer {
        Answer::StoredAck
    }

    /// The header that carries the event id, when the body does not name it: a replayed event
    /// of such a provider must say its id.
    fn event_id_header(&self) -> Option<&'static str> {
        None
    }
}

/// What a provider's bodies mean.
pub trait Format: Send + Sync {
    /// One event's body read once into what it means, with the type the event log records.
    fn read(&self, body: &[u8]) -> Reading;

    /// The event id the body names (for schemes that do not carry it in a header).
    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError>;

    /// A sample event of the gateway's type `event_type` (`payment.succeeded`, `payment.failed`,
    /// `refund.succeeded`; any other is sent as the provider's own type, to see it ignored).
    fn sample(&self, event_type: &str, sample: &Sample) -> String;
}

/// What a sample event carries about its payment (`send-test-event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub event_id: String,
    pub payment_id: String,
    pub order_id: Option<i64>,
    pub amount_minor: i64,
    pub currency: String,
}
