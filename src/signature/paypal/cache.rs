//! Certificates by URL: a bounded cache of verified chains (least recently used goes first) and
//! at most one fetch in flight per URL, shared by every delivery that needs it meanwhile.
//!
//! A fetch runs as a task of its own, so a delivery whose client hangs up does not cancel it
//! for the others waiting; its result (chain or failure) goes to every waiter. Each waiter then
//! checks the chain at its own `now`; only a chain that verified is stored. A failure is not
//! remembered: the next delivery fetches again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::chain::Chain;
use super::fetch::FetchError;

pub(super) type Flight = Shared<BoxFuture<'static, Result<Chain, FetchError>>>;

enum Slot {
    Ready {
        chain: Chain,
        last_used: u64,
    },
    Fetching {
        id: u64,
        flight: Flight,
        /// Set when the fetch task ends, whether or not anyone is still waiting.
        done: Arc<AtomicBool>,
    },
}

#[derive(Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// Counts lookups, for least-recently-used order.
    clock: u64,
    next_id: u64,
}

/// What a lookup found.
pub(super) enum Lookup {
    Ready(Chain),
    /// The fetch to wait for (started now or by an earlier delivery), with its id.
    InFlight(u64, Flight),
    /// Every fetch permit is taken.
    Busy,
}

pub(super) struct CertCache {
    state: Mutex<State>,
    capacity: usize,
    fetches: Arc<Semaphore>,
}

impl CertCache {
    pub(super) fn new(capacity: usize, max_concurrent_fetches: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity: capacity.max(1),
            fetches: Arc::new(Semaphore::new(max_concurrent_fetches.max(1))),
        }
    }

    /// The verified chain of `url`, else the fetch in flight for it, else a new fetch of
    /// `start` (spawned with a permit, so it runs to its end whoever waits).
    pub(super) fn lookup<F>(&self, url: &str, start: F) -> Lookup
    where
        F: FnOnce() -> BoxFuture<'static, Result<Chain, FetchError>>,
    {
        let mut state = self.lock();
        state.clock += 1;
        let now = state.clock;
        match state.slots.get_mut(url) {
            Some(Slot::Ready { chain, last_used }) => {
                *last_used = now;
                return Lookup::Ready(chain.clone());
            }
            Some(Slot::Fetching { id, flight, .. }) => {
                return Lookup::InFlight(*id, flight.clone());
            }
            None => {}
        }
        let Ok(permit) = self.fetches.clone().try_acquire_owned() else {
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

    /// Keeps `chain`, verified, for `url` (in place of its fetch), dropping the least recently
    /// used chain beyond the capacity. True when `url` had no verified chain yet (the first of
    /// the deliveries that shared a fetch).
    pub(super) fn store(&self, url: &str, chain: Chain) -> bool {
        let mut state = self.lock();
        state.clock += 1;
        let last_used = state.clock;
        let previous = state
            .slots
            .insert(url.to_owned(), Slot::Ready { chain, last_used });
        while state.ready() > self.capacity {
            let oldest = state
                .slots
                .iter()
                .filter_map(|(url, slot)| match slot {
                    Slot::Ready { last_used, .. } => Some((*last_used, url.clone())),
                    Slot::Fetching { .. } => None,
                })
                .min();
            match oldest {
                Some((_, url)) => state.slots.remove(&url),
                None => break,
            };
        }
        !matches!(previous, Some(Slot::Ready { .. }))
    }

    /// Forgets fetch `id` of `url` (it failed, or gave a chain that did not verify).
    pub(super) fn forget_flight(&self, url: &str, id: u64) {
        let mut state = self.lock();
        if matches!(state.slots.get(url), Some(Slot::Fetching { id: current, .. }) if *current == id)
        {
            state.slots.remove(url);
        }
    }

    /// Forgets the cached `chain` of `url` (it expired), unless it was replaced meanwhile.
    pub(super) fn forget(&self, url: &str, chain: &Chain) {
        let mut state = self.lock();
        if matches!(state.slots.get(url), Some(Slot::Ready { chain: current, .. }) if Arc::ptr_eq(current, chain))
        {
            state.slots.remove(url);
        }
    }

    /// Verified chains held now.
    pub(super) fn len(&self) -> usize {
        self.lock().ready()
    }

    /// Slots of any kind (verified chains and fetches), for the bound's test.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every await-free step; a panic elsewhere cannot leave
        // it half-changed, so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    fn ready(&self) -> usize {
        self.slots
            .values()
            .filter(|slot| matches!(slot, Slot::Ready { .. }))
            .count()
    }
}

fn spawn(
    fetch: BoxFuture<'static, Result<Chain, FetchError>>,
    permit: OwnedSemaphorePermit,
    done: Arc<AtomicBool>,
) -> Flight {
    let task = tokio::spawn(async move {
        let result = fetch.await;
        done.store(true, Ordering::Release);
        drop(permit);
        result
    });
    async move {
        task.await.unwrap_or_else(|e| {
            Err(FetchError::Transient(format!(
                "certificate fetch task ended: {e}"
            )))
        })
    }
    .boxed()
    .shared()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use rustls::pki_types::CertificateDer;

    use super::*;

    fn chain(byte: u8) -> Chain {
        vec![CertificateDer::from(vec![byte])].into()
    }

    fn ready(lookup: Lookup) -> Option<Chain> {
        match lookup {
            Lookup::Ready(chain) => Some(chain),
            Lookup::InFlight(..) | Lookup::Busy => None,
        }
    }

    fn unused() -> BoxFuture<'static, Result<Chain, FetchError>> {
        panic!("no fetch expected")
    }

    #[tokio::test]
    async fn lookups_during_a_fetch_share_it() {
        let cache = CertCache::new(4, 4);
        let started = Arc::new(AtomicUsize::new(0));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let count = started.clone();
        let first = cache.lookup("u", move || {
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                let _ = gate.await;
                Ok(chain(1))
            }
            .boxed()
        });
        let second = cache.lookup("u", unused);
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
        let cache = CertCache::new(4, 4);
        cache.store("u", chain(7));
        let found = ready(cache.lookup("u", unused)).unwrap();
        assert_eq!(found[0].as_ref(), &[7]);
    }

    #[tokio::test]
    async fn the_least_recently_used_chain_goes_beyond_capacity() {
        let cache = CertCache::new(2, 4);
        cache.store("a", chain(1));
        cache.store("b", chain(2));
        // "a" used after "b": "b" is the one to go.
        assert!(ready(cache.lookup("a", unused)).is_some());
        cache.store("c", chain(3));
        assert_eq!(cache.len(), 2);
        assert!(ready(cache.lookup("a", unused)).is_some());
        assert!(ready(cache.lookup("c", unused)).is_some());
        let refetch = cache.lookup("b", || async { Ok(chain(2)) }.boxed());
        assert!(matches!(refetch, Lookup::InFlight(..)));
    }

    #[tokio::test]
    async fn a_failed_fetch_is_forgotten_and_the_next_lookup_fetches_again() {
        let cache = CertCache::new(4, 4);
        let Lookup::InFlight(id, flight) = cache.lookup("u", || {
            async { Err(FetchError::Transient("down".into())) }.boxed()
        }) else {
            panic!("expected a fetch");
        };
        assert!(flight.await.is_err());
        cache.forget_flight("u", id);
        assert!(matches!(
            cache.lookup("u", || async { Ok(chain(1)) }.boxed()),
            Lookup::InFlight(next, _) if next != id
        ));
    }

    #[tokio::test]
    async fn fetches_beyond_the_limit_are_refused_until_one_ends() {
        let cache = CertCache::new(4, 1);
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let Lookup::InFlight(_, flight) = cache.lookup("a", move || {
            async move {
                let _ = gate.await;
                Ok(chain(1))
            }
            .boxed()
        }) else {
            panic!("expected a fetch");
        };
        assert!(matches!(cache.lookup("b", unused), Lookup::Busy));
        // The same URL still joins the fetch in flight.
        assert!(matches!(cache.lookup("a", unused), Lookup::InFlight(..)));
        release.send(()).unwrap();
        flight.await.unwrap();
        cache.store("a", chain(1));
        assert!(matches!(
            cache.lookup("b", || async { Ok(chain(2)) }.boxed()),
            Lookup::InFlight(..)
        ));
    }

    #[tokio::test]
    async fn fetches_nobody_waits_for_anymore_do_not_pile_up() {
        let cache = CertCache::new(4, 2);
        for i in 0..50 {
            let url = format!("u{i}");
            let Lookup::InFlight(_, flight) = cache.lookup(&url, || {
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
        let cache = CertCache::new(4, 4);
        let old = chain(1);
        cache.store("u", old.clone());
        cache.store("u", chain(2));
        cache.forget("u", &old);
        assert!(ready(cache.lookup("u", unused)).is_some());
        let current = ready(cache.lookup("u", unused)).unwrap();
        cache.forget("u", &current);
        assert_eq!(cache.len(), 0);
    }
}
