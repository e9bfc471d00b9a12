//! Where each merchant's notifications go, as this gateway knows it now: the endpoints of the
//! configuration file (`[[merchants]]`, the endpoint `file` of its merchant) and those made by
//! API (`webhook_endpoints`, several per merchant). Which endpoints a change is staged for is
//! decided by the one writer in SQL (migration 000067): those made by API whose filter takes
//! its type, or the file's while the merchant has none made by API. A row goes to the endpoint
//! it was staged for. `super::watch` reads the endpoints' revision every
//! second and reloads them when it moved, so a change made through any gateway reaches this one within
//! about a second, with no restart. The write paths ask [`Directory::wants`] whether to stage
//! a merchant's notifications; the sender asks [`Directory::target`] where to send them.
//!
//! An endpoint made by API whose secret this gateway cannot open (another key sealed it: a
//! rekey while this gateway still holds the old key) still has its notifications staged: they
//! wait, pending, for a gateway that can sign them, and `gateway_webhook_endpoints{state=
//! "unopened"}` says so.
//! Until the first load nobody knows which merchants have an endpoint, so the gateway answers
//! no callback before it ([`Directory::loaded`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use super::model::EndpointKey;
use crate::config::merchants::MerchantSettings;
use crate::secret::Secret;
use crate::signature::standard_webhooks::Signer;

/// A merchant's endpoint, ready to sign for.
pub struct Target {
    pub url: reqwest::Url,
    /// The API endpoint's id; `None` for one of the configuration file.
    pub endpoint_id: Option<String>,
    /// At most this many attempts a second (an endpoint made by API may ask for it).
    pub rate_limit_per_sec: Option<u32>,
    /// Signs with the current secret.
    signer: Signer,
    /// Signs with the current and the previous secret, until the overlap ends.
    overlap: Option<(Signer, DateTime<Utc>)>,
}

impl Target {
    fn new(url: reqwest::Url, endpoint_id: Option<String>, current: &Secret) -> Self {
        Self {
            url,
            endpoint_id,
            rate_limit_per_sec: None,
            signer: Signer::new(std::slice::from_ref(current)),
            overlap: None,
        }
    }

    /// The Standard Webhooks headers of `body` as notification `id` at `now`: one signature,
    /// or during a rotation's overlap the new secret's and the previous one's
    /// (`v1,<new> v1,<old>`), so a merchant verifying with either accepts it.
    pub fn sign_headers(&self, id: &str, body: &[u8], now: DateTime<Utc>) -> Vec<(String, String)> {
        let signer = match &self.overlap {
            Some((both, until)) if now < *until => both,
            _ => &self.signer,
        };
        signer.sign_headers(id, body, now.timestamp())
    }
}

/// An endpoint made by API, its secrets opened.
pub struct ApiEndpoint {
    pub merchant_id: i64,
    pub id: String,
    pub url: reqwest::Url,
    pub current: Secret,
    /// The previous secret and until when it signs too.
    pub previous: Option<(Secret, DateTime<Utc>)>,
    pub rate_limit_per_sec: Option<u32>,
}

/// One consistent view: the targets by endpoint, and the revision the API's were read at.
#[derive(Default)]
struct Snapshot {
    revision: Option<i64>,
    targets: HashMap<EndpointKey, Arc<Target>>,
    /// The endpoints with a target, sorted (the sender's claim order starts from it).
    endpoints: Vec<EndpointKey>,
    /// The merchants whose changes stage notifications: every one with an endpoint, whether
    /// this gateway can open its secret or not.
    staged: HashSet<i64>,
}

/// This gateway's view of every merchant's endpoint.
pub struct Directory {
    /// The configuration file's endpoints: fixed for the process; new notifications go to one
    /// while its merchant has no endpoint made by API.
    config: HashMap<EndpointKey, Arc<Target>>,
    now: RwLock<Arc<Snapshot>>,
    /// The endpoints made by API have been read once.
    loaded: AtomicBool,
    first_load: Notify,
}

impl Directory {
    /// The configuration file's endpoints; the API's come with the first [`Directory::replace`].
    pub fn new(merchants: &[MerchantSettings]) -> Self {
        let config: HashMap<EndpointKey, Arc<Target>> = MerchantSettings::endpoints(merchants)
            .map(|(id, endpoint)| {
                (
                    EndpointKey::file(id),
                    Arc::new(Target::new(endpoint.url.clone(), None, &endpoint.secret)),
                )
            })
            .collect();
        let directory = Self {
            now: RwLock::default(),
            config,
            loaded: AtomicBool::new(false),
            first_load: Notify::new(),
        };
        directory.install(None, HashMap::new(), &[]);
        directory
    }

    fn read(&self) -> Arc<Snapshot> {
        self.now
            .read()
            .map(|s| Arc::clone(&s))
            .unwrap_or_else(|poisoned| Arc::clone(&poisoned.into_inner()))
    }

    /// Whether `merchant_id`'s changes stage notifications: it has an endpoint, enabled or not,
    /// whose secret this gateway can open or not.
    pub fn wants(&self, merchant_id: i64) -> bool {
        match self.now.read() {
            Ok(snapshot) => snapshot.staged.contains(&merchant_id),
            Err(poisoned) => poisoned.into_inner().staged.contains(&merchant_id),
        }
    }

    /// Whether the endpoints made by API have been read at least once: before it, a merchant's
    /// change could go unstaged, so nothing that stages is served.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Returns once the endpoints have been read (at once if they have been).
    pub async fn until_loaded(&self) {
        loop {
            let signalled = self.first_load.notified();
            if self.loaded() {
                return;
            }
            signalled.await;
        }
    }

    /// Where the notifications staged for `endpoint` go now.
    pub fn target(&self, endpoint: &EndpointKey) -> Option<Arc<Target>> {
        self.read().targets.get(endpoint).cloned()
    }

    /// The endpoints this gateway can sign for, sorted.
    pub fn endpoints(&self) -> Vec<EndpointKey> {
        self.read().endpoints.clone()
    }

    /// The API endpoints' revision this view holds (`None` before the first load).
    pub fn revision(&self) -> Option<i64> {
        self.read().revision
    }

    /// True when the configuration file names an endpoint for `merchant_id`.
    pub fn has_config_endpoint(&self, merchant_id: i64) -> bool {
        self.config.contains_key(&EndpointKey::file(merchant_id))
    }

    /// The API's endpoints read at `revision` replace the previous ones; `unopened` are the
    /// merchants with an endpoint whose secret this gateway could not open.
    pub fn replace(&self, revision: i64, endpoints: Vec<ApiEndpoint>, unopened: &[i64]) {
        let api = endpoints
            .into_iter()
            .map(|e| {
                let key = EndpointKey::new(e.merchant_id, &e.id);
                let mut target = Target::new(e.url, Some(e.id), &e.current);
                target.rate_limit_per_sec = e.rate_limit_per_sec;
                if let Some((previous, until)) = e.previous {
                    target.overlap = Some((Signer::new(&[e.current, previous]), until));
                }
                (key, Arc::new(target))
            })
            .collect();
        self.install(Some(revision), api, unopened);
        self.loaded.store(true, Ordering::Release);
        self.first_load.notify_waiters();
    }

    fn install(
        &self,
        revision: Option<i64>,
        api: HashMap<EndpointKey, Arc<Target>>,
        unopened: &[i64],
    ) {
        // The file's endpoint keeps its target when its merchant has endpoints made by API:
        // what was staged for it before still goes there (staging sends nothing new to it).
        // An endpoint that cannot be opened here has no target: its notifications wait for a
        // gateway that can sign them.
        let mut targets = self.config.clone();
        targets.extend(api);
        let mut endpoints: Vec<EndpointKey> = targets.keys().cloned().collect();
        endpoints.sort_unstable();
        let staged = endpoints
            .iter()
            .map(|e| e.merchant_id)
            .chain(unopened.iter().copied())
            .collect();
        let snapshot = Arc::new(Snapshot {
            revision,
            targets,
            endpoints,
            staged,
        });
        match self.now.write() {
            Ok(mut now) => *now = snapshot,
            Err(poisoned) => *poisoned.into_inner() = snapshot,
        }
    }
}
