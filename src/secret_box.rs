//! Secrets at rest: a merchant endpoint's signing secret is stored sealed with
//! XChaCha20-Poly1305 under `[secrets] key` (32 bytes), bound to the row it belongs to and its
//! merchant (the associated data), so a dump of the database holds no usable secret and a
//! sealed secret copied onto another row, or its row given to another merchant, does not open.
//! A [`Keyring`] seals with the key and opens with it or any earlier key (`[secrets]
//! previous_keys`), so keys rotate without a moment where a gateway cannot open a secret.
//! Below the configuration, which parses the keys, and the notification endpoints, which seal
//! and open with them.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

/// The key's length in bytes.
pub const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// The key that seals endpoint secrets; `Debug` never prints it.
#[derive(Clone)]
pub struct SecretsKey(XChaCha20Poly1305);

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl SecretsKey {
    /// The key from its standard base64 text; exactly [`KEY_LEN`] bytes.
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| "is not base64".to_owned())?;
        let bytes: [u8; KEY_LEN] = bytes.try_into().map_err(|bytes: Vec<u8>| {
            format!(
                "is {} bytes; it must be {KEY_LEN} (openssl rand -base64 32)",
                bytes.len()
            )
        })?;
        Ok(Self(XChaCha20Poly1305::new(&bytes.into())))
    }

    /// `plaintext` sealed for the row `aad` names: a fresh random nonce, then the ciphertext
    /// and its tag.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let nonce = XNonce::from(nonce);
        // Encryption fails only for a message longer than the cipher's counter allows (256 GiB).
        let sealed = self
            .0
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The plaintext of `sealed` for the row `aad` names; `None` for another key, another row
    /// or a changed byte.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        self.0
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .ok()
    }
}

/// The key that seals, and the earlier keys that still open what they sealed.
#[derive(Debug, Clone)]
pub struct Keyring {
    key: SecretsKey,
    previous: Vec<SecretsKey>,
}

impl Keyring {
    pub fn new(key: SecretsKey, previous: Vec<SecretsKey>) -> Self {
        Self { key, previous }
    }

    /// Sealed with the key.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        self.key.seal(plaintext, aad)
    }

    /// Opened with the key or, failing that, an earlier one.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        std::iter::once(&self.key)
            .chain(&self.previous)
            .find_map(|key| key.open(sealed, aad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SecretsKey {
        SecretsKey::from_base64(&STANDARD.encode([byte; KEY_LEN])).unwrap()
    }

    #[test]
    fn a_sealed_secret_opens_with_its_key_for_its_row_only() {
        let sealed = key(1).seal(b"whsec_abc", b"ep_1");
        assert_eq!(
            key(1).open(&sealed, b"ep_1").as_deref(),
            Some(&b"whsec_abc"[..])
        );
        assert_eq!(key(2).open(&sealed, b"ep_1"), None, "another key");
        assert_eq!(key(1).open(&sealed, b"ep_2"), None, "another row");
        let mut changed = sealed.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert_eq!(key(1).open(&changed, b"ep_1"), None, "a changed byte");
        assert!(
            !sealed.windows(9).any(|w| w == b"whsec_abc"),
            "no plaintext in the box"
        );
    }

    #[test]
    fn a_keyring_seals_with_its_key_and_opens_with_any_of_its_keys() {
        let ring = Keyring::new(key(2), vec![key(1)]);
        let old = key(1).seal(b"whsec_old", b"ep_1");
        assert_eq!(ring.open(&old, b"ep_1").as_deref(), Some(&b"whsec_old"[..]));
        let new = ring.seal(b"whsec_new", b"ep_1");
        assert_eq!(
            key(2).open(&new, b"ep_1").as_deref(),
            Some(&b"whsec_new"[..])
        );
        assert_eq!(key(1).open(&new, b"ep_1"), None, "new seals use the key");
        assert_eq!(Keyring::new(key(3), vec![]).open(&old, b"ep_1"), None);
    }

    #[test]
    fn two_seals_of_one_secret_differ() {
        assert_ne!(key(1).seal(b"s", b"a"), key(1).seal(b"s", b"a"));
    }

    #[test]
    fn a_key_must_be_32_bytes_of_base64() {
        assert!(SecretsKey::from_base64(&STANDARD.encode([0u8; 16])).is_err());
        assert!(SecretsKey::from_base64("not base64!").is_err());
        assert!(SecretsKey::from_base64(&STANDARD.encode([7u8; 32])).is_ok());
        assert_eq!(format!("{:?}", key(1)), "SecretsKey(..)");
    }
}
