//! Certificates by URL: a bounded cache of verified chains (least recently used goes first),
//! a bounded memory of recent failures, and at most one fetch in flight per URL, shared by every
//! delivery that needs it meanwhile.
//!
//! A fetch runs as a task of its own, so a delivery whose client hangs up does not cancel it
//! for the others waiting; its result (chain or failure) goes to every waiter. Each waiter then
//! checks the chain at its own `now`; only a chain that verified is stored. A failure is
//! remembered briefly by URL (a refusal longer than a transient failure), so deliveries that
//! repeat a bad URL, as an unauthenticated flood would, are answered from memory and take no
//! fetch slot; the slots stay free for URLs not seen to fail.
//!
//! Fetch slots are few (`max_concurrent_fetches`). A delivery whose URL needs a fetch while
//! every slot is taken waits for one, first come first served, up to a bound of time and of
//! waiters, instead of being turned away at once: a burst of bad URLs that all fail fast delays
//! a genuine first delivery by their fetches, it does not answer it 503.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A fetch that every delivery waiting for it shares.
pub(super) type Flight<T, E> = Shared<BoxFuture<'static, Result<T, E>>>;

/// A failed fetch, as the cache needs to know it: how long to remember it.
pub(super) trait Failure: Clone + Send + Sync + 'static {
    /// A retry may succeed (the network, the host overloaded): remembered briefly.
    fn is_transient(&self) -> bool;
    /// The fetch's task ended without an answer (it panicked): transient.
    fn task_ended(why: String) -> Self;
}

enum Slot<T, E> {
    Ready {
        chain: T,
        last_used: u64,
    },
    Fetching {
        id: u64,
        flight: Flight<T, E>,
        /// Set when the fetch task ends, whether or not anyone is still waiting.
        done: Arc<AtomicBool>,
    },
    /// A fetch of this URL failed (or gave a chain that does not verify) at `at`: answered
    /// from here until `until`.
    Failed {
        error: E,
        until: DateTime<Utc>,
    },
}

struct State<T, E> {
    slots: HashMap<String, Slot<T, E>>,
    /// Counts lookups, for least-recently-used order.
    clock: u64,
    next_id: u64,
}

impl<T, E> Default for State<T, E> {
    fn default() -> Self {
        Self {
            slots: HashMap::new(),
            clock: 0,
            next_id: 0,
        }
    }
}

/// What a lookup found.
pub(super) enum Lookup<T, E> {
    Ready(T),
    /// This URL failed moments ago; the same failure, without a fetch.
    Failed(E),
    /// The fetch to wait for (started now or by an earlier delivery), with its id.
    InFlight(u64, Flight<T, E>),
    /// Every fetch slot is taken: wait for one ([`CertCache::wait_for_slot`]) and look again.
    Busy,
}

/// How long failures are remembered, and how fetch slots are shared.
#[derive(Debug, Clone, Copy)]
pub(super) struct CacheLimits {
    /// Verified chains kept.
    pub capacity: usize,
    /// Fetches running at once, across URLs.
    pub max_concurrent_fetches: usize,
    /// Failed URLs remembered (the oldest failure goes first beyond it).
    pub failures_kept: usize,
    /// How long a refusal (4xx, a redirect, not a certificate, a chain that does not verify)
    /// is remembered: the URL will answer the same.
    pub refused_for: Duration,
    /// How long a transient failure (network, timeout, 5xx) is remembered: long enough that a
    /// flood of one URL costs one fetch, short enough that PayPal's retry fetches again.
    pub transient_for: Duration,
    /// Deliveries that may wait for a fetch slot at once; one more is answered as unavailable.
    pub max_waiting: usize,
    /// How long a delivery waits for a fetch slot.
    pub slot_wait: Duration,
}

/// The cache of `T` (a verified chain) by URL, with the failures `E` of their fetches.
pub(super) struct CertCache<T, E> {
    state: Mutex<State<T, E>>,
    limits: CacheLimits,
    fetches: Arc<Semaphore>,
    waiting: AtomicUsize,
}

impl<T: Clone + Send + Sync + 'static, E: Failure> CertCache<T, E> {
    pub(super) fn new(limits: CacheLimits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits: CacheLimits {
                capacity: limits.capacity.max(1),
                max_concurrent_fetches: limits.max_concurrent_fetches.max(1),
                failures_kept: limits.failures_kept.max(1),
                ..limits
            },
            fetches: Arc::new(Semaphore::new(limits.max_concurrent_fetches.max(1))),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The verified chain of `url`, else its recent failure (as of `now`), else the fetch in
    /// flight for it, else a new fetch of `start` (spawned with `slot` or a free slot, so it
    /// runs to its end whoever waits), else [`Lookup::Busy`].
    pub(super) fn lookup<F>(
        &self,
        url: &str,
        now: DateTime<Utc>,
        slot: Option<OwnedSemaphorePermit>,
        start: F,
    ) -> Lookup<T, E>
    where
        F: FnOnce() -> BoxFuture<'static, Result<T, E>>,
    {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        match state.slots.get_mut(url) {
            Some(Slot::Ready { chain, last_used }) => {
                *last_used = clock;
                return Lookup::Ready(chain.clone());
            }
            Some(Slot::Fetching { id, flight, .. }) => {
                return Lookup::InFlight(*id, flight.clone());
            }
            // A clock that went back (`now` before the failure) does not stretch the memory.
            Some(Slot::Failed { error, until }) if now < *until => {
                return Lookup::Failed(error.clone());
            }
            Some(Slot::Failed { .. }) | None => {}
        }
        let Some(permit) = slot.or_else(|| self.fetches.clone().try_acquire_owned().ok()) else {
            return Lookup::Busy;
        };
        // Fetches that ended while nobody came back for them (every waiter hung up) leave a
        // slot behind; dropping those here keeps the slots in flight within the permits.
        state.slots.retain(
            |_, slot| !matches!(slot, Slot::Fetching { done, .. } if done.load(Ordering::Acquire)),
        );
        state.next_id += 1;
        let id = state.next_id;
        let done = Arc::new(AtomicBool::new(false));
        let flight = spawn(start(), permit, done.clone());
        state.slots.insert(
            url.to_owned(),
            Slot::Fetching {
                id,
                flight: flight.clone(),
                done,
            },
        );
        Lookup::InFlight(id, flight)
    }

    /// Waits for a free fetch slot, first come first served, for at most the slot wait; `None`
    /// when it did not come in time or too many deliveries wait already.
    pub(super) async fn wait_for_slot(&self) -> Option<OwnedSemaphorePermit> {
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.waiting);
        if waiting >= self.limits.max_waiting {
            return None;
        }
        tokio::time::timeout(self.limits.slot_wait, self.fetches.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// Deliveries waiting for a fetch slot now.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Keeps `chain`, verified, for `url` (in place of its fetch), dropping the least recently
    /// used chain beyond the capacity. True when `url` had no verified chain yet (the first of
    /// the deliveries that shared a fetch).
    pub(super) fn store(&self, url: &str, chain: T) -> bool {
        let mut state = self.lock();
        state.clock += 1;
        let last_used = state.clock;
        let previous = state
            .slots
            .insert(url.to_owned(), Slot::Ready { chain, last_used });
        while state.count(|s| matches!(s, Slot::Ready { .. })) > self.limits.capacity {
            let oldest = state
                .slots
                .iter()
                .filter_map(|(url, slot)| match slot {
                    Slot::Ready { last_used, .. } => Some((*last_used, url.clone())),
                    Slot::Fetching { .. } | Slot::Failed { .. } => None,
                })
                .min();
            match oldest {
                Some((_, url)) => state.slots.remove(&url),
                None => break,
            };
        }
        !matches!(previous, Some(Slot::Ready { .. }))
    }

    /// Remembers that fetch `id` of `url` failed (or gave a chain that did not verify) at
    /// `now`, in its place, for as long as the kind of failure says. The oldest failure goes
    /// beyond the bound.
    pub(super) fn fail(&self, url: &str, id: u64, error: E, now: DateTime<Utc>) {
        let mut state = self.lock();
        // Not over a verified chain or a newer fetch; a slot the next lookup already dropped
        // (its fetch ended) is put back as the failure.
        match state.slots.get(url) {
            Some(Slot::Ready { .. }) => return,
            Some(Slot::Fetching { id: current, .. }) if *current != id => return,
            Some(Slot::Fetching { .. } | Slot::Failed { .. }) | None => {}
        }
        let kept = if error.is_transient() {
            self.limits.transient_for
        } else {
            self.limits.refused_for
        };
        let until = now
            .checked_add_signed(TimeDelta::from_std(kept).unwrap_or(TimeDelta::zero()))
            .unwrap_or(now);
        state
            .slots
            .insert(url.to_owned(), Slot::Failed { error, until });
        while state.count(|s| matches!(s, Slot::Failed { .. })) > self.limits.failures_kept {
            let oldest = state
                .slots
                .iter()
                .filter_map(|(url, slot)| match slot {
                    Slot::Failed { until, .. } => Some((*until, url.clone())),
                    Slot::Ready { .. } | Slot::Fetching { .. } => None,
                })
                .min();
            match oldest {
                Some((_, url)) => state.slots.remove(&url),
                None => break,
            };
        }
    }

    /// Forgets fetch `id` of `url` without remembering a failure (its chain had expired at
    /// the delivery's clock, which another delivery's clock may not share).
    pub(super) fn forget_fetch(&self, url: &str, id: u64) {
        let mut state = self.lock();
        if matches!(state.slots.get(url), Some(Slot::Fetching { id: current, .. }) if *current == id)
        {
            state.slots.remove(url);
        }
    }

    /// Forgets the cached chain of `url` (it expired) when `is_it` says it is the one that
    /// expired, not one that replaced it meanwhile.
    pub(super) fn forget(&self, url: &str, is_it: impl Fn(&T) -> bool) {
        let mut state = self.lock();
        if matches!(state.slots.get(url), Some(Slot::Ready { chain: current, .. }) if is_it(current))
        {
            state.slots.remove(url);
        }
    }

    /// Verified chains held now.
    pub(super) fn len(&self) -> usize {
        self.lock().count(|s| matches!(s, Slot::Ready { .. }))
    }

    /// Slots of any kind (verified chains, fetches, failures), for the bounds' tests.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> MutexGuard<'_, State<T, E>> {
        // The state stays consistent at every await-free step; a panic elsewhere cannot leave
        // it half-changed, so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Leaves the waiting count when the wait ends, however it ends (the delivery's future may be
/// dropped mid-wait when its client hangs up).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<T, E> State<T, E> {
    fn count(&self, kind: impl Fn(&Slot<T, E>) -> bool) -> usize {
        self.slots.values().filter(|slot| kind(slot)).count()
    }
}

fn spawn<T: Clone + Send + Sync + 'static, E: Failure>(
    fetch: BoxFuture<'static, Result<T, E>>,
    permit: OwnedSemaphorePermit,
    done: Arc<AtomicBool>,
) -> Flight<T, E> {
    let task = tokio::spawn(async move {
        let result = fetch.await;
        done.store(true, Ordering::Release);
        drop(permit);
        result
    });
    async move {
        task.await
            .unwrap_or_else(|e| Err(E::task_ended(format!("certificate fetch task ended: {e}"))))
    }
    .boxed()
    .shared()
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::CertificateDer;

    use super::*;
    use crate::signature::paypal::certificate::{Chain, FetchError, Refusal};

    type CertCache = super::CertCache<Chain, FetchError>;
    type Lookup = super::Lookup<Chain, FetchError>;

    fn chain(byte: u8) -> Chain {
        vec![CertificateDer::from(vec![byte])].into()
    }

    fn limits(capacity: usize, max_concurrent_fetches: usize) -> CacheLimits {
        CacheLimits {
            capacity,
            max_concurrent_fetches,
            failures_kept: 4,
            refused_for: Duration::from_secs(60),
            transient_for: Duration::from_secs(5),
            max_waiting: 2,
            slot_wait: Duration::from_secs(5),
        }
    }

    fn cache(capacity: usize, max_concurrent_fetches: usize) -> CertCache {
        CertCache::new(limits(capacity, max_concurrent_fetches))
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn ready(lookup: Lookup) -> Option<Chain> {
        match lookup {
            Lookup::Ready(chain) => Some(chain),
            Lookup::Failed(_) | Lookup::InFlight(..) | Lookup::Busy => None,
        }
    }

    fn unused() -> BoxFuture<'static, Result<Chain, FetchError>> {
        panic!("no fetch expected")
    }

    fn refused() -> FetchError {
        FetchError::Refused(Refusal {
            reason: "unexpected status",
            detail: "404".into(),
        })
    }

    /// Starts a failing fetch of `url` at `now` and records its failure, as a delivery does.
    async fn failed_fetch(cache: &CertCache, url: &str, now: DateTime<Utc>, error: FetchError) {
        let answer = error.clone();
        let Lookup::InFlight(id, flight) =
            cache.lookup(url, now, None, move || async move { Err(answer) }.boxed())
        else {
            panic!("expected a fetch of {url}");
        };
        assert!(flight.await.is_err());
        cache.fail(url, id, error, now);
    }

    #[tokio::test]
    async fn lookups_during_a_fetch_share_it() {
        let cache = cache(4, 4);
        let started = Arc::new(AtomicUsize::new(0));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let count = started.clone();
        let first = cache.lookup("u", at(0), None, move || {
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                let _ = gate.await;
                Ok(chain(1))
            }
            .boxed()
        });
        let second = cache.lookup("u", at(0), None, unused);
        let (Lookup::InFlight(a, fa), Lookup::InFlight(b, fb)) = (first, second) else {
            panic!("both should wait on a fetch");
        };
        assert_eq!(a, b);
        release.send(()).unwrap();
        assert_eq!(fa.await.unwrap()[0].as_ref(), &[1]);
        assert_eq!(fb.await.unwrap()[0].as_ref(), &[1]);
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stored_chain_is_found_without_a_fetch() {
        let cache = cache(4, 4);
        cache.store("u", chain(7));
        let found = ready(cache.lookup("u", at(0), None, unused)).unwrap();
        assert_eq!(found[0].as_ref(), &[7]);
    }

    #[tokio::test]
    async fn the_least_recently_used_chain_goes_beyond_capacity() {
        let cache = cache(2, 4);
        cache.store("a", chain(1));
        cache.store("b", chain(2));
        // "a" used after "b": "b" is the one to go.
        assert!(ready(cache.lookup("a", at(0), None, unused)).is_some());
        cache.store("c", chain(3));
        assert_eq!(cache.len(), 2);
        assert!(ready(cache.lookup("a", at(0), None, unused)).is_some());
        assert!(ready(cache.lookup("c", at(0), None, unused)).is_some());
        let refetch = cache.lookup("b", at(0), None, || async { Ok(chain(2)) }.boxed());
        assert!(matches!(refetch, Lookup::InFlight(..)));
    }

    #[tokio::test]
    async fn a_failed_fetch_is_remembered_for_its_kind_of_failure_then_fetched_again() {
        let cache = cache(4, 4);
        failed_fetch(&cache, "gone", at(0), refused()).await;
        failed_fetch(&cache, "down", at(0), FetchError::Transient("502".into())).await;
        // Within its time: the same answer, no fetch.
        assert!(matches!(
            cache.lookup("gone", at(59), None, unused),
            Lookup::Failed(FetchError::Refused(_))
        ));
        assert!(matches!(
            cache.lookup("down", at(4), None, unused),
            Lookup::Failed(FetchError::Transient(_))
        ));
        // After it: fetched again.
        let fetch = || async { Ok(chain(1)) }.boxed();
        assert!(matches!(
            cache.lookup("down", at(5), None, fetch),
            Lookup::InFlight(..)
        ));
        assert!(matches!(
            cache.lookup("gone", at(60), None, fetch),
            Lookup::InFlight(..)
        ));
    }

    #[tokio::test]
    async fn a_clock_that_went_back_does_not_keep_a_failure_longer() {
        let cache = cache(4, 4);
        failed_fetch(&cache, "u", at(100), FetchError::Transient("502".into())).await;
        assert!(matches!(
            cache.lookup("u", at(0), None, unused),
            Lookup::Failed(_)
        ));
        assert!(matches!(
            cache.lookup("u", at(105), None, || async { Ok(chain(1)) }.boxed()),
            Lookup::InFlight(..)
        ));
    }

    #[tokio::test]
    async fn remembered_failures_stay_bounded_the_oldest_going_first() {
        let cache = cache(4, 4);
        for i in 0..10 {
            failed_fetch(&cache, &format!("u{i}"), at(i), refused()).await;
        }
        assert_eq!(cache.slots(), 4);
        assert!(matches!(
            cache.lookup("u9", at(10), None, unused),
            Lookup::Failed(_)
        ));
        assert!(matches!(
            cache.lookup("u0", at(10), None, || async { Ok(chain(1)) }.boxed()),
            Lookup::InFlight(..)
        ));
    }

    #[tokio::test]
    async fn fetches_beyond_the_limit_wait_for_a_slot_and_take_it_when_one_ends() {
        let cache = Arc::new(cache(4, 1));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let Lookup::InFlight(_, flight) = cache.lookup("a", at(0), None, move || {
            async move {
                let _ = gate.await;
                Ok(chain(1))
            }
            .boxed()
        }) else {
            panic!("expected a fetch");
        };
        assert!(matches!(
            cache.lookup("b", at(0), None, unused),
            Lookup::Busy
        ));
        // The same URL still joins the fetch in flight.
        assert!(matches!(
            cache.lookup("a", at(0), None, unused),
            Lookup::InFlight(..)
        ));
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_for_slot().await.is_some() }
        });
        while cache.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        flight.await.unwrap();
        assert!(waiter.await.unwrap(), "the slot the fetch gave back");
    }

    #[tokio::test]
    async fn beyond_the_bound_of_waiters_a_delivery_is_turned_away_at_once() {
        let cache = Arc::new(cache(4, 1));
        let _held = cache.fetches.clone().try_acquire_owned().unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.wait_for_slot().await.is_some() })
            })
            .collect();
        while cache.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        assert!(cache.wait_for_slot().await.is_none());
        for waiter in waiters {
            waiter.abort();
        }
    }

    #[tokio::test]
    async fn fetches_nobody_waits_for_anymore_do_not_pile_up() {
        let cache = cache(4, 2);
        for i in 0..50 {
            let url = format!("u{i}");
            let Lookup::InFlight(_, flight) = cache.lookup(&url, at(0), None, || {
                async { Err(FetchError::Transient("x".into())) }.boxed()
            }) else {
                panic!("expected a fetch for {url}");
            };
            // The waiter hangs up; the task still ends and frees its permit.
            drop(flight);
            while cache.fetches.available_permits() < 2 {
                tokio::task::yield_now().await;
            }
        }
        // Only the last fetch's slot is left, never one per URL seen.
        assert_eq!(cache.slots(), 1);
    }

    #[tokio::test]
    async fn an_expired_chain_is_forgotten_unless_replaced() {
        let cache = cache(4, 4);
        let old = chain(1);
        cache.store("u", old.clone());
        cache.store("u", chain(2));
        cache.forget("u", |c| Arc::ptr_eq(c, &old));
        assert!(ready(cache.lookup("u", at(0), None, unused)).is_some());
        let current = ready(cache.lookup("u", at(0), None, unused)).unwrap();
        cache.forget("u", |c| Arc::ptr_eq(c, &current));
        assert_eq!(cache.len(), 0);
    }
}
