//! Merchant endpoints by API (the `webhook_endpoints` table, migrations 000053 and 000067): up
//! to `[notifications] endpoints_per_merchant` endpoints per merchant, each with the event
//! types it receives (`filter_types`, none: all) and a rate (`rate_limit_per_sec`), created,
//! changed, disabled, rotated and deleted by the merchant (its API token or its portal) or an
//! admin, each change with its audit row in its transaction and a bump of the revision every
//! gateway watches ([`super::directory`]). Secrets are sealed with `[secrets] key`, the
//! endpoint's id and its merchant bound in, and appear in an answer only when made (creation,
//! rotation). An endpoint an operator disabled stays disabled for its merchant: its enabling
//! or rotation answers 409, and so does a new endpoint while any of the merchant's is so
//! disabled, until an operator (or an admin) enables it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rand::RngCore;
use serde_json::json;

use super::model::{self, DISABLED_BY_MERCHANT, DISABLED_BY_OPERATOR};
use crate::access::audit::{self, Action, Entry};
use crate::db::one_row::CommittedResult;
use crate::schema::{notification_endpoints, webhook_endpoint_revision, webhook_endpoints};
use crate::secret::Secret;
use crate::secret_box::{Keyring, SecretsKey};

/// The longest URL an endpoint may have, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 256;

/// An endpoint's URL as the API takes it: parsed once, `https://` (or `http://` where
/// `[notifications] allow_http` says so), a host, no `user:password@`, no fragment, at most
/// [`MAX_URL_BYTES`]. Where it points is checked when the sender connects, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl(reqwest::Url);

/// The fastest rate an endpoint may ask for, a second.
pub const MAX_RATE_PER_SEC: i64 = 1000;

/// The event types a filter may name: every type a notification has but `ping`, which goes to
/// the endpoint tested alone (docs/notifications.md, "What is sent, and when").
pub const EVENT_TYPES: [&str; 8] = [
    "order.paid",
    "order.partially_refunded",
    "order.refunded",
    "order.disputed",
    "order.charged_back",
    "payment.held",
    "refund_request.succeeded",
    "refund_request.failed",
];

/// Why an endpoint's fields were refused (400, nothing stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEndpoint {
    #[error("url: {0}")]
    Url(String),
    #[error("description: at most {MAX_DESCRIPTION_CHARS} characters, no control characters")]
    Description,
    #[error("filter_types: {0:?} is not an event type (one of {types})", types = EVENT_TYPES.join(", "))]
    EventType(String),
    #[error("rate_limit_per_sec: from 1 to {MAX_RATE_PER_SEC}, or null for no limit")]
    Rate,
    /// The outgoing-address rules refuse the URL's host outright (an IP literal inside the
    /// network), and the origin was not granted to the merchant.
    #[error("url: address_not_allowed: {0} is not an address the gateway may call")]
    Address(String),
}

impl EndpointUrl {
    pub fn parse(text: &str, allow_http: bool) -> Result<Self, InvalidEndpoint> {
        let bad = |why: &str| InvalidEndpoint::Url(why.to_owned());
        if text.len() > MAX_URL_BYTES {
            return Err(bad("longer than 2048 bytes"));
        }
        let url = reqwest::Url::parse(text).map_err(|e| bad(&format!("not a URL ({e})")))?;
        match url.scheme() {
            "https" => {}
            "http" if allow_http => {}
            "http" => return Err(bad("must be https:// ([notifications] allow_http is off)")),
            _ => return Err(bad("must be an https:// URL")),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("has no host"));
        }
        // Credentials would reach every log line and answer that shows the URL.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("must not carry user:password@"));
        }
        if url.fragment().is_some() {
            return Err(bad("must not carry a #fragment"));
        }
        Ok(Self(url))
    }

    pub fn as_url(&self) -> &reqwest::Url {
        &self.0
    }
}

/// The filter as stored: each name one of [`EVENT_TYPES`], sorted, once each; none: all types.
pub fn filter_types(names: &[String]) -> Result<Vec<String>, InvalidEndpoint> {
    let mut types = Vec::with_capacity(names.len());
    for name in names {
        if !EVENT_TYPES.contains(&name.as_str()) {
            return Err(InvalidEndpoint::EventType(name.chars().take(64).collect()));
        }
        types.push(name.clone());
    }
    types.sort_unstable();
    types.dedup();
    Ok(types)
}

/// A rate: 1 to [`MAX_RATE_PER_SEC`] a second.
pub fn rate(per_sec: i64) -> Result<i32, InvalidEndpoint> {
    if !(1..=MAX_RATE_PER_SEC).contains(&per_sec) {
        return Err(InvalidEndpoint::Rate);
    }
    i32::try_from(per_sec).map_err(|_| InvalidEndpoint::Rate)
}

/// Refuses a URL whose host the outgoing-address rules refuse outright (an IP literal inside
/// the network) unless its origin was granted to the merchant (`granted`). A name
/// is judged by what it resolves to when the sender connects, as before.
pub fn allowed(url: &EndpointUrl, granted: bool) -> Result<(), InvalidEndpoint> {
    match crate::outbound::refused_outright(url.as_url()) {
        Some(host) if !granted => Err(InvalidEndpoint::Address(host)),
        _ => Ok(()),
    }
}

/// A description: at most [`MAX_DESCRIPTION_CHARS`] characters, no control characters.
pub fn description(text: &str) -> Result<String, InvalidEndpoint> {
    if text.chars().count() > MAX_DESCRIPTION_CHARS || text.chars().any(char::is_control) {
        return Err(InvalidEndpoint::Description);
    }
    Ok(text.to_owned())
}

/// The URL as logs and the audit log may show it: its query (which may carry a token) hidden.
pub fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.query().is_some() => {
            parsed.set_query(None);
            format!("{parsed}?(query hidden)")
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "(not a URL)".into(),
    }
}

/// Why an endpoint operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(transparent)]
    Invalid(#[from] InvalidEndpoint),
    /// No such endpoint of this merchant (another merchant's is the same answer).
    #[error("no such endpoint")]
    NotFound,
    /// The merchant has as many endpoints as `[notifications] endpoints_per_merchant` allows.
    #[error("this merchant has {0} endpoints, as many as allowed; delete one first")]
    TooMany(i64),
    /// No `[secrets] key`: a secret could not be sealed or opened.
    #[error("the gateway has no [secrets] key: endpoints by API are off")]
    NoKey,
    /// An operator disabled the merchant's endpoint: only an operator's enable lifts it.
    #[error("an operator disabled this merchant's endpoint; only an operator can enable it")]
    DisabledByOperator,
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
}

/// A stored endpoint row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_endpoints)]
pub struct EndpointRow {
    pub id: String,
    pub merchant_id: i64,
    pub url: String,
    pub description: String,
    pub secret_sealed: Vec<u8>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub filter_types: Vec<Option<String>>,
    pub rate_limit_per_sec: Option<i32>,
}

/// An endpoint as the API shows it: never its secret.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    pub id: String,
    pub merchant_id: i64,
    pub url: String,
    pub description: String,
    /// The event types it receives; empty: every type.
    pub filter_types: Vec<String>,
    /// At most this many notifications a second (each gateway); null: no limit.
    pub rate_limit_per_sec: Option<i32>,
    /// enabled or disabled
    pub status: &'static str,
    /// Why it is disabled: `merchant`, `operator`, `gone` (it answered 410) or `no_success`.
    pub disabled_reason: Option<String>,
    /// Until when notifications also carry the previous secret's signature (after a rotation).
    #[schema(value_type = Option<String>)]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    #[schema(value_type = String)]
    pub created_at: DateTime<Utc>,
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

/// An endpoint with its new secret: the answer of a creation or a rotation, the only two.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct WithSecret {
    #[serde(flatten)]
    pub endpoint: EndpointView,
    /// `whsec_` + base64 of 32 random bytes: the Standard Webhooks secret that signs from now.
    pub secret: String,
}

/// The secrets of a stored endpoint, opened.
pub struct OpenedSecrets {
    pub current: Secret,
    /// The previous secret and until when it signs too.
    pub previous: Option<(Secret, DateTime<Utc>)>,
}

/// What a sealed secret is bound to: its row and its merchant, so that neither a sealed
/// secret copied onto another row nor a row given to another merchant opens.
fn bound_to(id: &str, merchant_id: i64) -> Vec<u8> {
    format!("{id}\u{0}merchant:{merchant_id}").into_bytes()
}

impl EndpointRow {
    /// Its secrets, opened with `keys` (`None`: another key sealed them, a byte changed, or the
    /// row is not the one, or not the merchant's, they were sealed for). A secret sealed before
    /// the merchant was bound in (by an earlier version) opens by its row alone, until
    /// `secrets rekey` seals it again.
    pub fn open(&self, keys: &Keyring) -> Option<OpenedSecrets> {
        let bound = bound_to(&self.id, self.merchant_id);
        let open = |sealed: &[u8]| {
            keys.open(sealed, &bound)
                .or_else(|| keys.open(sealed, self.id.as_bytes()))
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map(Secret::new)
        };
        let current = open(&self.secret_sealed)?;
        let previous = match (&self.previous_secret_sealed, self.previous_secret_until) {
            (Some(sealed), Some(until)) => Some((open(sealed)?, until)),
            _ => None,
        };
        Some(OpenedSecrets { current, previous })
    }
}

fn new_id() -> String {
    let mut bytes = [0u8; 12];
    rand::rng().fill_bytes(&mut bytes);
    format!("ep_{}", hex::encode(bytes))
}

fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// Serialises, until the transaction ends, what changes the set of a merchant's endpoints: two
/// creations are counted one after the other, a creation sees an operator's disable of every
/// endpoint that committed before it (and that disable sees the endpoint), and two deletions
/// each see the other's.
pub async fn lock_merchant(conn: &mut AsyncPgConnection, merchant_id: i64) -> QueryResult<()> {
    diesel::sql_query(
        "SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1::text, 0))",
    )
    .bind::<BigInt, _>(merchant_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Every change bumps the revision, in its own transaction: the gateways reload when it moves.
async fn bump_revision(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::update(webhook_endpoint_revision::table)
        .set(webhook_endpoint_revision::revision.eq(webhook_endpoint_revision::revision + 1))
        .execute(conn)
        .await?;
    Ok(())
}

/// The revision now.
pub async fn revision(conn: &mut AsyncPgConnection) -> QueryResult<i64> {
    webhook_endpoint_revision::table
        .select(webhook_endpoint_revision::revision)
        .first(conn)
        .await
}

/// Every endpoint, with the revision they were read at (one snapshot: a repeatable-read
/// transaction).
pub async fn load_all(conn: &mut AsyncPgConnection) -> QueryResult<(i64, Vec<EndpointRow>)> {
    conn.build_transaction()
        .repeatable_read()
        .read_only()
        .run(async |conn| {
            let revision = revision(conn).await?;
            let rows = webhook_endpoints::table
                .select(EndpointRow::as_select())
                .order(webhook_endpoints::merchant_id)
                .load(conn)
                .await?;
            Ok((revision, rows))
        })
        .await
}

/// How many endpoints the database holds (`serve` refuses to start without a key then).
pub async fn count(conn: &mut AsyncPgConnection) -> QueryResult<i64> {
    webhook_endpoints::table
        .count()
        .committed_result(conn)
        .await
}

/// Whether `merchant_id` has an endpoint made by API, as the database holds it now (a
/// gateway's directory learns of a new one up to a refresh later).
pub async fn exists_for(conn: &mut AsyncPgConnection, merchant_id: i64) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(
        webhook_endpoints::table.filter(webhook_endpoints::merchant_id.eq(merchant_id)),
    ))
    .committed_result(conn)
    .await
}

/// The endpoint `id` if it is `merchant_id`'s, locked for the change that follows.
async fn own(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
) -> Result<EndpointRow, EndpointError> {
    webhook_endpoints::table
        .filter(webhook_endpoints::id.eq(id))
        .filter(webhook_endpoints::merchant_id.eq(merchant_id))
        .select(EndpointRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?
        .ok_or(EndpointError::NotFound)
}

/// What the senders know of an endpoint: its disabled time and reason.
async fn state(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
) -> QueryResult<(Option<DateTime<Utc>>, Option<String>)> {
    Ok(notification_endpoints::table
        .find((merchant_id, id))
        .select((
            notification_endpoints::disabled_at,
            notification_endpoints::disabled_reason,
        ))
        .first(conn)
        .await
        .optional()?
        .unwrap_or((None, None)))
}

/// Whether an operator disabled endpoint `id` of `merchant_id` (`None`: any of its endpoints,
/// the file's included), and nobody has enabled it since.
async fn disabled_by_operator(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: Option<&str>,
) -> QueryResult<bool> {
    let mut query = notification_endpoints::table
        .filter(notification_endpoints::merchant_id.eq(merchant_id))
        .filter(notification_endpoints::disabled_at.is_not_null())
        .filter(notification_endpoints::disabled_reason.eq(DISABLED_BY_OPERATOR))
        .into_boxed();
    if let Some(id) = id {
        query = query.filter(notification_endpoints::endpoint_id.eq(id));
    }
    diesel::select(diesel::dsl::exists(query))
        .committed_result(conn)
        .await
}

/// A merchant may not undo what an operator did; an admin may (its role includes operator's).
async fn merchant_may_enable(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: Option<&str>,
    by: By,
) -> Result<(), EndpointError> {
    if by == By::Merchant && disabled_by_operator(conn, merchant_id, id).await? {
        return Err(EndpointError::DisabledByOperator);
    }
    Ok(())
}

async fn view(conn: &mut AsyncPgConnection, row: &EndpointRow) -> QueryResult<EndpointView> {
    let (disabled_at, disabled_reason) = state(conn, row.merchant_id, &row.id).await?;
    Ok(EndpointView {
        id: row.id.clone(),
        merchant_id: row.merchant_id,
        url: row.url.clone(),
        description: row.description.clone(),
        filter_types: row.filter_types.iter().flatten().cloned().collect(),
        rate_limit_per_sec: row.rate_limit_per_sec,
        status: if disabled_at.is_some() {
            "disabled"
        } else {
            "enabled"
        },
        disabled_reason: disabled_at.and(disabled_reason),
        previous_secret_expires_at: row
            .previous_secret_until
            .filter(|until| *until > Utc::now()),
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

fn target(id: &str) -> Option<String> {
    Some(format!("endpoint:{id}"))
}

/// An endpoint's fields as a merchant gave them (the API's JSON, the portal's form), before
/// they are checked.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub url: Option<String>,
    pub description: Option<String>,
    pub filter_types: Option<Vec<String>>,
    /// `Some(None)`: no limit.
    pub rate_limit_per_sec: Option<Option<i64>>,
    pub disabled: Option<bool>,
}

/// Checks what `merchant_id` gave against the rules of `settings`: the URL's form and the
/// outgoing-address rules (an origin granted to the merchant in `[[merchants]] allow_hosts`
/// passes), the description, each filter type, the rate.
pub fn check(
    settings: &crate::config::Settings,
    merchant_id: i64,
    given: Given,
) -> Result<Change, InvalidEndpoint> {
    let url = given
        .url
        .map(|text| {
            let url = EndpointUrl::parse(&text, settings.notifications.allow_http)?;
            let origin = crate::outbound::Origin::of(url.as_url());
            let granted = crate::config::merchants::MerchantSettings::grants(&settings.merchants)
                .any(|(merchant, granted)| merchant == merchant_id && Some(granted) == origin);
            allowed(&url, granted)?;
            Ok::<_, InvalidEndpoint>(url)
        })
        .transpose()?;
    Ok(Change {
        url,
        description: given.description.map(|d| description(&d)).transpose()?,
        filter_types: given.filter_types.map(|t| filter_types(&t)).transpose()?,
        rate_limit_per_sec: given
            .rate_limit_per_sec
            .map(|r| r.map(rate).transpose())
            .transpose()?,
        disabled: given.disabled,
    })
}

impl Change {
    /// The fields of a new endpoint: its URL is required.
    pub fn into_fields(self) -> Result<Fields, InvalidEndpoint> {
        Ok(Fields {
            url: self
                .url
                .ok_or_else(|| InvalidEndpoint::Url("is required".into()))?,
            description: self.description.unwrap_or_default(),
            filter_types: self.filter_types.unwrap_or_default(),
            rate_limit_per_sec: self.rate_limit_per_sec.flatten(),
        })
    }
}

/// What an endpoint is made of, each field checked by its function here.
#[derive(Debug, Clone)]
pub struct Fields {
    pub url: EndpointUrl,
    pub description: String,
    /// From [`filter_types`]; empty: every type.
    pub filter_types: Vec<String>,
    /// From [`rate`]; `None`: no limit.
    pub rate_limit_per_sec: Option<i32>,
}

/// Creates an endpoint of `merchant_id` with a new secret (returned once), while the merchant
/// has fewer than `max_endpoints` (409 beyond). It starts enabled and receives what its filter
/// names from the next change on; a merchant may not add one while an operator keeps any of
/// its endpoints disabled (409), an admin may.
pub async fn create(
    conn: &mut AsyncPgConnection,
    key: Option<&SecretsKey>,
    (merchant_id, by): (i64, By),
    fields: Fields,
    max_endpoints: i64,
    context: &audit::Context,
) -> Result<WithSecret, EndpointError> {
    let key = key.ok_or(EndpointError::NoKey)?;
    let id = new_id();
    let secret = new_secret();
    let sealed = key.seal(secret.as_bytes(), &bound_to(&id, merchant_id));
    conn.transaction(async |conn| {
        lock_merchant(conn, merchant_id).await?;
        merchant_may_enable(conn, merchant_id, None, by).await?;
        let existing: i64 = webhook_endpoints::table
            .filter(webhook_endpoints::merchant_id.eq(merchant_id))
            .count()
            .committed_result(conn)
            .await?;
        if existing >= max_endpoints {
            return Err(EndpointError::TooMany(existing));
        }
        let row: EndpointRow = diesel::insert_into(webhook_endpoints::table)
            .values((
                webhook_endpoints::id.eq(&id),
                webhook_endpoints::merchant_id.eq(merchant_id),
                webhook_endpoints::url.eq(fields.url.as_url().as_str()),
                webhook_endpoints::description.eq(&fields.description),
                webhook_endpoints::secret_sealed.eq(&sealed),
                webhook_endpoints::filter_types.eq(&fields.filter_types),
                webhook_endpoints::rate_limit_per_sec.eq(fields.rate_limit_per_sec),
            ))
            .returning(EndpointRow::as_returning())
            .committed_result(conn)
            .await?;
        bump_revision(conn).await?;
        let entry =
            Entry::new(Action::EndpointCreate, target(&id), "enabled").with_changes(json!({
                "merchant_id": merchant_id,
                "url": shown(&row.url),
                "description": fields.description,
                "filter_types": fields.filter_types,
                "rate_limit_per_sec": fields.rate_limit_per_sec,
            }));
        audit::record(conn, context, entry).await?;
        Ok(WithSecret {
            endpoint: view(conn, &row).await?,
            secret: secret.clone(),
        })
    })
    .await
}

/// The endpoints of `merchant_id`, oldest first.
pub async fn list(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
) -> QueryResult<Vec<EndpointView>> {
    let rows: Vec<EndpointRow> = webhook_endpoints::table
        .filter(webhook_endpoints::merchant_id.eq(merchant_id))
        .order((webhook_endpoints::created_at, webhook_endpoints::id))
        .select(EndpointRow::as_select())
        .load(conn)
        .await?;
    let mut views = Vec::with_capacity(rows.len());
    for row in &rows {
        views.push(view(conn, row).await?);
    }
    Ok(views)
}

/// One endpoint of `merchant_id`, if it is the merchant's.
pub async fn find(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
) -> QueryResult<Option<EndpointView>> {
    let row: Option<EndpointRow> = webhook_endpoints::table
        .filter(webhook_endpoints::id.eq(id))
        .filter(webhook_endpoints::merchant_id.eq(merchant_id))
        .select(EndpointRow::as_select())
        .first(conn)
        .await
        .optional()?;
    match row {
        Some(row) => Ok(Some(view(conn, &row).await?)),
        None => Ok(None),
    }
}

/// A change of an endpoint: any of its URL, description, filter, rate and disabled state.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub url: Option<EndpointUrl>,
    pub description: Option<String>,
    pub filter_types: Option<Vec<String>>,
    /// `Some(None)`: no limit from now on.
    pub rate_limit_per_sec: Option<Option<i32>>,
    pub disabled: Option<bool>,
}

/// Who disables: the merchant itself, or an admin for it (the reason an endpoint shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Merchant,
    Admin,
}

/// Changes endpoint `id` of `merchant_id`. Disabling keeps its notifications waiting (at most
/// `[notifications] disabled_keep`); enabling releases them at `release_per_sec`.
pub async fn update(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
    change: Change,
    (by, release_per_sec): (By, u64),
    context: &audit::Context,
) -> Result<EndpointView, EndpointError> {
    conn.transaction(async |conn| {
        let before = own(conn, merchant_id, id).await?;
        if change.disabled == Some(false) {
            merchant_may_enable(conn, merchant_id, Some(id), by).await?;
        }
        let mut changes = serde_json::Map::new();
        if let Some(url) = &change.url {
            changes.insert("url".into(), json!(shown(url.as_url().as_str())));
        }
        if let Some(description) = &change.description {
            changes.insert("description".into(), json!(description));
        }
        if let Some(types) = &change.filter_types {
            changes.insert("filter_types".into(), json!(types));
        }
        if let Some(rate) = &change.rate_limit_per_sec {
            changes.insert("rate_limit_per_sec".into(), json!(rate));
        }
        let before_types: Vec<String> = before.filter_types.iter().flatten().cloned().collect();
        let row: EndpointRow = diesel::update(webhook_endpoints::table.find(id))
            .set((
                webhook_endpoints::url.eq(change
                    .url
                    .as_ref()
                    .map_or(before.url.as_str(), |u| u.as_url().as_str())),
                webhook_endpoints::description
                    .eq(change.description.as_deref().unwrap_or(&before.description)),
                webhook_endpoints::filter_types
                    .eq(change.filter_types.as_ref().unwrap_or(&before_types)),
                webhook_endpoints::rate_limit_per_sec.eq(change
                    .rate_limit_per_sec
                    .unwrap_or(before.rate_limit_per_sec)),
                webhook_endpoints::updated_at.eq(diesel::dsl::now),
            ))
            .returning(EndpointRow::as_returning())
            .committed_result(conn)
            .await?;
        match change.disabled {
            Some(true) => {
                let reason = match by {
                    By::Merchant => DISABLED_BY_MERCHANT,
                    By::Admin => DISABLED_BY_OPERATOR,
                };
                model::disable(conn, merchant_id, model::Endpoints::One(id), reason).await?;
                changes.insert("disabled".into(), json!(true));
            }
            Some(false) => {
                model::enable(
                    conn,
                    merchant_id,
                    model::Endpoints::One(id),
                    release_per_sec,
                )
                .await?;
                changes.insert("disabled".into(), json!(false));
            }
            None => {}
        }
        bump_revision(conn).await?;
        let shown = view(conn, &row).await?;
        let entry = Entry::new(Action::EndpointUpdate, target(id), shown.status)
            .with_changes(serde_json::Value::Object(changes));
        audit::record(conn, context, entry).await?;
        Ok(shown)
    })
    .await
}

/// Deletes endpoint `id` of `merchant_id`. Its waiting notifications fail with `endpoint
/// deleted`, unless it was the merchant's last endpoint made by API and the configuration file
/// names one for the merchant (`config_fallback`): they then go there, as what comes next does.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
    config_fallback: bool,
    context: &audit::Context,
) -> Result<(), EndpointError> {
    conn.transaction(async |conn| {
        lock_merchant(conn, merchant_id).await?;
        let row = own(conn, merchant_id, id).await?;
        diesel::delete(webhook_endpoints::table.find(id))
            .execute(conn)
            .await?;
        let others: i64 = webhook_endpoints::table
            .filter(webhook_endpoints::merchant_id.eq(merchant_id))
            .count()
            .committed_result(conn)
            .await?;
        let to_file = config_fallback && others == 0;
        let pending = diesel::sql_query(
            "UPDATE merchant_notifications \
             SET endpoint_id = CASE WHEN $3 THEN 'file' ELSE endpoint_id END, \
                 status = CASE WHEN $3 THEN status ELSE 'failed' END, \
                 last_error = CASE WHEN $3 THEN last_error ELSE 'endpoint deleted' END, \
                 last_attempt_at = CASE WHEN $3 THEN last_attempt_at ELSE now() END \
             WHERE merchant_id = $1 AND endpoint_id = $2 AND status = 'pending'",
        )
        .bind::<BigInt, _>(merchant_id)
        .bind::<Text, _>(id)
        .bind::<diesel::sql_types::Bool, _>(to_file)
        .execute(conn)
        .await?;
        let failed = if to_file { 0 } else { pending };
        bump_revision(conn).await?;
        let entry = Entry::new(Action::EndpointDelete, target(id), "deleted").with_changes(
            json!({"url": shown(&row.url), "failed_pending": failed, "config_fallback": to_file}),
        );
        audit::record(conn, context, entry).await?;
        Ok(())
    })
    .await
}

/// A new secret for endpoint `id` of `merchant_id` (returned once); the previous one signs
/// beside it for `overlap`, then stops.
pub async fn rotate(
    conn: &mut AsyncPgConnection,
    key: Option<&SecretsKey>,
    (merchant_id, id, by): (i64, &str, By),
    overlap: std::time::Duration,
    context: &audit::Context,
) -> Result<WithSecret, EndpointError> {
    let secret = new_secret();
    let until = Utc::now() + Duration::from_std(overlap).unwrap_or_else(|_| Duration::hours(24));
    conn.transaction(async |conn| {
        // Whose it is first: another merchant's (or no) endpoint is 404 whatever the setup.
        let before = own(conn, merchant_id, id).await?;
        merchant_may_enable(conn, merchant_id, Some(id), by).await?;
        let key = key.ok_or(EndpointError::NoKey)?;
        let sealed = key.seal(secret.as_bytes(), &bound_to(id, merchant_id));
        let (previous, previous_until) = if overlap.is_zero() {
            (None, None)
        } else {
            (Some(before.secret_sealed.clone()), Some(until))
        };
        let row: EndpointRow = diesel::update(webhook_endpoints::table.find(id))
            .set((
                webhook_endpoints::secret_sealed.eq(&sealed),
                webhook_endpoints::previous_secret_sealed.eq(previous),
                webhook_endpoints::previous_secret_until.eq(previous_until),
                webhook_endpoints::updated_at.eq(diesel::dsl::now),
            ))
            .returning(EndpointRow::as_returning())
            .committed_result(conn)
            .await?;
        bump_revision(conn).await?;
        let entry = Entry::new(Action::EndpointRotateSecret, target(id), "rotated")
            .with_changes(json!({"previous_secret_signs_until": previous_until}));
        audit::record(conn, context, entry).await?;
        Ok(WithSecret {
            endpoint: view(conn, &row).await?,
            secret: secret.clone(),
        })
    })
    .await
}

/// A `ping` notification staged for endpoint `id` of `merchant_id`: it goes out as any other,
/// so the merchant sees its endpoint receive and verify one. Returns its id.
pub async fn ping(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    id: &str,
    context: &audit::Context,
) -> Result<i64, EndpointError> {
    conn.transaction(async |conn| {
        own(conn, merchant_id, id).await?;
        #[derive(QueryableByName)]
        struct Staged {
            #[diesel(sql_type = BigInt)]
            id: i64,
        }
        // Staged by the one writer of notifications, as every other; the endpoint's row lock
        // (taken above) keeps a concurrent ping of it from being the row read back.
        diesel::sql_query(
            "SELECT notifications_stage(ARRAY[$1::bigint], ARRAY['ping'], ARRAY[NULL::bigint], \
               ARRAY['ping'], ARRAY[NULL::bigint], ARRAY[NULL::text], ARRAY[NULL::text], \
               ARRAY[NULL::text], ARRAY[NULL::bigint], ARRAY[NULL::text], ARRAY[NULL::bigint], \
               ARRAY[$2::text])",
        )
        .bind::<BigInt, _>(merchant_id)
        .bind::<Text, _>(id)
        .execute(conn)
        .await?;
        let staged: Staged = diesel::sql_query(
            "SELECT max(id) AS id FROM merchant_notifications \
             WHERE merchant_id = $1 AND status = 'pending' AND kind = 'ping' AND detail = $2",
        )
        .bind::<BigInt, _>(merchant_id)
        .bind::<Text, _>(id)
        .committed_result(conn)
        .await?;
        let entry = Entry::new(Action::EndpointTest, target(id), "pending")
            .with_changes(json!({"notification_id": staged.id}));
        audit::record(conn, context, entry).await?;
        Ok(staged.id)
    })
    .await
}

/// Re-seals every endpoint secret sealed with `old` under `new`, bound to its row and its
/// merchant, in one transaction: all of them or none (a secret `old` does not open stops it).
/// Run with the same key as old and new, it binds the merchant into secrets an earlier
/// version sealed. Returns how many endpoints.
pub async fn rekey(
    conn: &mut AsyncPgConnection,
    old: &SecretsKey,
    new: &SecretsKey,
    context: &audit::Context,
) -> Result<usize, RekeyError> {
    let old = Keyring::new(old.clone(), Vec::new());
    conn.transaction(async |conn| {
        let rows: Vec<EndpointRow> = webhook_endpoints::table
            .select(EndpointRow::as_select())
            .for_update()
            .load(conn)
            .await?;
        for row in &rows {
            let bound = bound_to(&row.id, row.merchant_id);
            let reseal = |sealed: &[u8]| {
                old.open(sealed, &bound)
                    .or_else(|| old.open(sealed, row.id.as_bytes()))
                    .map(|plain| new.seal(&plain, &bound))
                    .ok_or_else(|| RekeyError::DoesNotOpen(row.id.clone()))
            };
            let current = reseal(&row.secret_sealed)?;
            let previous = row
                .previous_secret_sealed
                .as_deref()
                .map(reseal)
                .transpose()?;
            diesel::update(webhook_endpoints::table.find(&row.id))
                .set((
                    webhook_endpoints::secret_sealed.eq(current),
                    webhook_endpoints::previous_secret_sealed.eq(previous),
                ))
                .execute(conn)
                .await?;
        }
        bump_revision(conn).await?;
        let entry = Entry::new(Action::SecretsRekey, None, "rekeyed")
            .with_changes(json!({"endpoints": rows.len()}));
        audit::record(conn, context, entry).await?;
        Ok(rows.len())
    })
    .await
}

#[derive(Debug, thiserror::Error)]
pub enum RekeyError {
    #[error("the old key does not open the secret of endpoint {0}: nothing was changed")]
    DoesNotOpen(String),
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_url_is_https_with_a_host_and_nothing_hidden_in_it() {
        assert!(EndpointUrl::parse("https://merchant.example/hooks?t=1", false).is_ok());
        for bad in [
            "not a url",
            "ftp://merchant.example/",
            "http://merchant.example/",
            "https://user:pw@merchant.example/",
            "https://merchant.example/#frag",
        ] {
            assert!(EndpointUrl::parse(bad, false).is_err(), "{bad}");
        }
        assert!(EndpointUrl::parse("http://merchant.example/", true).is_ok());
        let long = format!("https://merchant.example/{}", "a".repeat(2048));
        assert!(matches!(
            EndpointUrl::parse(&long, false),
            Err(InvalidEndpoint::Url(why)) if why.contains("2048")
        ));
    }

    #[test]
    fn a_description_is_short_plain_text() {
        assert!(description(&"é".repeat(256)).is_ok());
        assert!(description(&"é".repeat(257)).is_err());
        assert!(description("line\nbreak").is_err());
    }

    #[test]
    fn a_shown_url_hides_its_query() {
        assert_eq!(
            shown("https://m.example/hook?token=s3cret"),
            "https://m.example/hook?(query hidden)"
        );
        assert_eq!(shown("https://m.example/hook"), "https://m.example/hook");
    }

    fn row(id: &str, merchant_id: i64, sealed: Vec<u8>) -> EndpointRow {
        EndpointRow {
            id: id.into(),
            merchant_id,
            url: "https://m.example/".into(),
            description: String::new(),
            secret_sealed: sealed,
            previous_secret_sealed: None,
            previous_secret_until: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            filter_types: Vec::new(),
            rate_limit_per_sec: None,
        }
    }

    #[test]
    fn a_sealed_secret_opens_for_its_row_and_merchant_only() {
        use base64::Engine;
        let key = SecretsKey::from_base64(&STANDARD.encode([9u8; 32])).unwrap();
        let keys = Keyring::new(key.clone(), Vec::new());
        let sealed = key.seal(b"whsec_x", &bound_to("ep_1", 42));
        assert!(row("ep_1", 42, sealed.clone()).open(&keys).is_some());
        assert!(row("ep_1", 43, sealed.clone()).open(&keys).is_none());
        assert!(row("ep_2", 42, sealed).open(&keys).is_none());
        // Sealed by an earlier version (its row alone): opens until a rekey binds it.
        let legacy = key.seal(b"whsec_x", b"ep_1");
        assert!(row("ep_1", 42, legacy).open(&keys).is_some());
    }

    #[test]
    fn a_new_secret_is_a_standard_webhooks_secret_of_32_bytes() {
        let secret = Secret::new(new_secret());
        assert_eq!(secret.standard_webhooks_key().map(|k| k.len()), Some(32));
        assert!(new_id().starts_with("ep_") && new_id().len() == 27);
    }
}
