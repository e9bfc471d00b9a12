//! A configured provider as the callback path reads it, without learning which provider it is:
//! whose books its events move, how an event is keyed, and its body read in the provider's
//! format. The providers' registry implements it; [`super::callback`] runs on it.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use super::event::Reading;
use crate::idempotency::record::IdempotentRequest;

/// An event as a provider's API describes it now: its id and the body the gateway stores.
pub type AskedEvent = (String, Vec<u8>);

/// How the callback path reads one provider's events.
pub trait EventReader {
    /// The merchant whose orders this provider pays.
    fn merchant_id(&self) -> i64;

    /// The provider's configured name (the event log's `provider`, the key's prefix).
    fn name(&self) -> &str;

    /// The idempotency request of one event: its scope, its body's fingerprint, its lifetime.
    fn idempotent_request(
        &self,
        event_id: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> IdempotentRequest;

    /// The event's body read once in the provider's payload format, with its type.
    fn read_event(&self, body: &[u8]) -> Reading;

    /// For a provider that must be asked (its events are its API's answers): the events its
    /// API describes now for the stored event `event_id` (`body`), verified as a redelivery of
    /// its webhook would be; `Err` says why the API could not be asked now. `None` for any
    /// other provider, whose stored body is the event.
    fn ask_again<'a>(
        &'a self,
        event_id: &'a str,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Option<BoxFuture<'a, Result<Vec<AskedEvent>, String>>>;
}
