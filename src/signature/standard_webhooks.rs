//! Standard Webhooks signatures, the one definition both directions share: the signed content
//! is `{id}.{timestamp}.{body}`, the MAC HMAC-SHA256 under the base64 decoding of the secret
//! after its `whsec_` prefix, the header `v1,<base64>` (several space-separated while a
//! secret is rotated). The provider of that scheme verifies with it; the notification sender
//! signs with it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::scheme::Keys;
use crate::secret::Secret;

/// The keys of `secrets` (a secret that does not decode is left out; configuration and the
/// endpoint API refuse such a secret first).
pub(crate) fn keys(secrets: &[Secret], tolerance_secs: i64) -> Keys {
    Keys {
        keys: secrets
            .iter()
            .filter_map(Secret::standard_webhooks_key)
            .collect(),
        tolerance_secs,
    }
}

/// The signed content's parts.
pub(crate) fn parts<'a>(id: &'a [u8], timestamp: &'a [u8], body: &'a [u8]) -> [&'a [u8]; 5] {
    [id, b".", timestamp, b".", body]
}

/// The headers of a delivery of `body` as `id` at `timestamp`: one `v1,` signature per key, in
/// the keys' order.
pub(crate) fn sign_headers(
    keys: &Keys,
    id: &str,
    body: &[u8],
    timestamp: i64,
) -> Vec<(String, String)> {
    let timestamp = timestamp.to_string();
    let signature = keys
        .sign_each(&parts(id.as_bytes(), timestamp.as_bytes(), body))
        .iter()
        .map(|mac| format!("v1,{}", STANDARD.encode(mac)))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        ("webhook-id".to_owned(), id.to_owned()),
        ("webhook-timestamp".to_owned(), timestamp),
        ("webhook-signature".to_owned(), signature),
    ]
}

/// Signs notifications with one or more secrets (the new one first during a rotation).
pub struct Signer {
    keys: Keys,
}

impl Signer {
    pub fn new(secrets: &[Secret]) -> Self {
        Self {
            keys: keys(secrets, 0),
        }
    }

    pub fn sign_headers(&self, id: &str, body: &[u8], timestamp: i64) -> Vec<(String, String)> {
        sign_headers(&self.keys, id, body, timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_secrets_give_two_signatures_new_first() {
        let new = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let old = Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
        let both = Signer::new(&[new.clone(), old.clone()]).sign_headers("msg_1", b"{}", 1);
        let alone =
            |s: &Secret| Signer::new(std::slice::from_ref(s)).sign_headers("msg_1", b"{}", 1);
        let signature = &both[2].1;
        assert_eq!(
            signature,
            &format!("{} {}", alone(&new)[2].1, alone(&old)[2].1)
        );
    }
}
